"""Recycled pages for the large numpy arrays of a read or an analysis.

A large trace's analysis makes and drops column-sized temporaries by the
hundred; from fresh memory each one has its pages faulted in and zeroed by the
kernel again (29 % of the whole run on a 40 M-event trace).  Within
``recycled_pages()`` numpy's large blocks come from the extension's handler
(native/pages.c), which hands a freed block to the next request it fits; the
extension's own columns (the scanners', the C passes' results) come from the same
blocks, so a read's build reuses the scan columns it drops.  Kept
blocks give way whenever numpy's arrays, large or small, need the room: held
memory stays within 8 MB of the most that was in use.  They are unmapped when the
last scope ends.  Only the current context (this thread, this task) is affected;
without the extension this is a no-op.

Large blocks ask for transparent huge pages, as numpy asks for its own, except on a
virtual machine whose host takes its free memory back (``huge_pages_pay``): there a
fresh huge page is faulted in from the host whole, and costs several times the small
pages the same bytes would take.
"""
from __future__ import annotations

import contextlib
import os
import threading

from .extension import native_fn

_lock = threading.Lock()
_offered: bool | None = None
_padded = 0                  # heap_pad blocks open


def _array_api():
    try:
        from numpy._core import _multiarray_umath as mu
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as mu
    return mu._ARRAY_API


def available() -> bool:
    """Whether the handler can be used here: built, not turned off with the rest of the
    extension (TB_PERFDIAG_NO_NATIVE, looked at every time), and numpy's own handler
    current when first asked."""
    global _offered
    install = native_fn("pages_install")
    if install is None:
        return False
    with _lock:
        if _offered is None:
            _offered = bool(install(_array_api()))
            if _offered:
                _settle_huge_pages()
        return _offered


HUGE_PAGES_ENV = "TB_PERFDIAG_HUGE_PAGES"
VIRTIO_DEVICES = "/sys/bus/virtio/devices"
_VIRTIO_BALLOON = 5                 # virtio device id
_BALLOON_F_REPORTING = 5            # feature bit: free page reporting


def huge_pages_pay(devices: str = VIRTIO_DEVICES) -> bool:
    """Whether large arrays should ask for transparent huge pages: ``TB_PERFDIAG_HUGE_PAGES``
    says ``on`` or ``off``; unset (or ``auto``), yes unless this machine's free memory
    is handed back to a host (``free_memory_reported``).  Measured on such a guest
    (Firecracker, 2 cores): 1.2 GB of fresh huge pages took 3.3-3.6 s to fault in,
    the same bytes in 4 KB pages 0.5-1.5 s, and a 20 M-event Kineto diagnosis
    10.5 s instead of 12.4 s.  On other machines a huge page is the cheaper way in."""
    setting = os.environ.get(HUGE_PAGES_ENV, "auto").strip().lower()
    if setting in ("on", "1", "yes", "true"):
        return True
    if setting in ("off", "0", "no", "false"):
        return False
    return not free_memory_reported(devices)


def free_memory_reported(devices: str = VIRTIO_DEVICES) -> bool:
    """Whether a virtio balloon with free page reporting is bound here (Linux sysfs):
    the guest tells its host which pages are free, the host takes them back, and a page
    used again is faulted in from the host anew.  Reported in blocks of a huge page's
    size or more, free huge pages are the ones the host took; small pages come from
    what is left between."""
    try:
        names = os.listdir(devices)
    except OSError:
        return False
    for name in names:
        dev = os.path.join(devices, name)
        try:
            with open(os.path.join(dev, "device")) as f:
                if int(f.read().strip(), 16) != _VIRTIO_BALLOON:
                    continue
            with open(os.path.join(dev, "features")) as f:
                bits = f.read().strip()
        except (OSError, ValueError):
            continue
        if os.path.exists(os.path.join(dev, "driver")) and bits[_BALLOON_F_REPORTING:][:1] == "1":
            return True
    return False


def _settle_huge_pages() -> None:
    """The extension's large blocks, and numpy's own (process-wide: its setting for
    every array), ask for huge pages only where ``huge_pages_pay``."""
    pay = huge_pages_pay()
    native_fn("pages_huge")(pay)
    if not pay:
        try:
            from numpy._core.multiarray import _set_madvise_hugepage
        except ImportError:  # numpy 1.x
            from numpy.core.multiarray import _set_madvise_hugepage
        _set_madvise_hugepage(False)


def huge_pages() -> bool:
    """Whether the recycled pages' large blocks ask for transparent huge pages now."""
    fn = native_fn("pages_huge")
    return bool(fn()) if fn is not None and available() else False


@contextlib.contextmanager
def recycled_pages(room: int = 0):
    """numpy's large arrays made in this block (and their temporaries) reuse freed
    pages.  Arrays made here may outlive it: they are freed as usual later.

    ``room``: bytes in use at the peak of earlier work for the same request (the read
    of the trace an analysis reads, ``Trace.read_peak``, or the process' headroom,
    ``room_under_high_water``): freed blocks may be kept up to it from the start, as
    that raises no high-water mark of the process.  The block
    yields a ``Scope`` whose ``peak`` is, once the block is left, the most its arrays had
    in use (0 where the pages are off)."""
    scope = Scope()
    if not available():
        yield scope
        return
    # both looked up before entering: the setting may change while the block runs
    enter, leave, stats_fn = (native_fn(n) for n in ("pages_enter", "pages_leave",
                                                       "pages_stats"))
    old = enter(int(room))
    try:
        yield scope
    finally:
        # the peaks restart when the last scope ends: read before
        scope.peak = int(stats_fn().get("peak_use", 0))
        leave(old)


@contextlib.contextmanager
def heap_pad(nbytes: int):
    """malloc keeps ``nbytes`` free at the top of each of its heaps while a block of this
    kind is open in any thread (its blocks under 32 MB are then reused, not faulted in
    and zeroed anew: see ``pages_heap_pad`` in native/pages.c); no pad once the last one
    ends.  For a read that makes and drops such blocks by the thousand.  Process-wide
    (malloc's setting); a no-op without the extension or off glibc."""
    global _padded
    fn = native_fn("pages_heap_pad")
    if fn is None:
        yield
        return
    with _lock:
        _padded += 1
        if _padded == 1:
            fn(int(nbytes))
    try:
        yield
    finally:
        with _lock:
            _padded -= 1
            if _padded == 0:
                fn(0)


class Scope:
    """What a ``recycled_pages`` block saw."""

    peak = 0


@contextlib.contextmanager
def tuned(big_line: int, poison: bool):
    """For tests: blocks from ``big_line`` bytes (at least 4 KB) are recycled, and with
    ``poison`` what malloc hands out is filled with garbage, as reused memory may be."""
    fn = native_fn("pages_tune")
    old = fn(big_line, poison)
    try:
        yield
    finally:
        fn(*old)


def high_water() -> int:
    """The process' high-water mark in bytes (0 where the kernel does not say)."""
    got = _high_water_and_rss()
    return got[0] if got else 0


def keep_under_high_water(mark: int) -> int:
    """Kept blocks give way, from now on, to what the process grew outside the arrays,
    so that arrays, kept blocks and the rest stay under ``mark`` (the high-water mark
    when the scope's room was set, ``high_water``): malloc's heap keeps the freed blocks
    of an analysis' block-at-a-time passes (0.1 GB at 40 M events) and Python objects
    pile up; kept up to the room set at the start, the blocks sat on top of them, past
    the read's mark.  The arrays' own use still goes past it.  Bytes unmapped; 0 where
    the pages are off, no scope is open, no mark is given or the kernel does not say."""
    fn = native_fn("pages_lower")
    if fn is None or not available() or mark <= 0:
        return 0
    st = stats()
    if not st.get("scopes"):
        return 0
    got = _high_water_and_rss()
    if got is None:
        return 0
    outside = got[1] - (st["live"] + st["cached"] + st["small"])
    return int(fn(max(mark - max(outside, 0), 0)))


def _high_water_and_rss() -> tuple[int, int] | None:
    """(the process' high-water mark, its resident memory) in bytes, or None."""
    try:
        with open("/proc/self/status", "rb") as f:
            kb = {k: int(v.split()[0]) for k, v in
                  (line.split(b":", 1) for line in f if line.startswith((b"VmHWM", b"VmRSS")))}
        return kb[b"VmHWM"] << 10, kb[b"VmRSS"] << 10
    except (OSError, KeyError, ValueError, IndexError):
        return None


def room_under_high_water(floor: int) -> int:
    """The room for a scope about to open (see ``recycled_pages``): at least ``floor``,
    and as much as keeps the process under its own high-water mark, which is that mark
    less what the process holds outside the pages.  At 40 M events the read's arrays
    peak 0.45 GB under the process' mark (its strings, the file's pages); an analysis
    held to the read's peak faulted in fresh huge pages for 1.5 s more system time.
    ``floor`` alone where another scope is open (two scopes would both fill the same
    headroom) or the kernel does not say (not Linux)."""
    st = stats()
    if not st or st.get("scopes"):
        return floor
    got = _high_water_and_rss()
    if got is None:
        return floor
    mark, rss = got
    outside = rss - (st["live"] + st["cached"] + st["small"])
    return max(int(floor), mark - max(outside, 0))


def stats() -> dict:
    """The handler's byte counts: large blocks in arrays (live) and kept (cached),
    small blocks in arrays (small), the largest live + small (peak_use) and
    live + cached + small (peak_held) since the last scope ended, how far held may
    pass peak_use (slack); large requests served from kept blocks (hits) and from
    fresh pages (misses); open scopes."""
    fn = native_fn("pages_stats")
    return fn() if fn and available() else {}


def let_go() -> int:
    """Unmaps the kept blocks now, and keeps blocks from here on only up to the arrays'
    use from here, not the earlier peak: before work that grows the process' other
    memory (Python objects), which would otherwise sit on top of them (the HLO join of
    a 40 M-event read: 0.23 GB of objects over 0.7 GB of kept blocks).  Bytes unmapped;
    0 where the pages are off."""
    fn = native_fn("pages_let_go")
    return int(fn()) if fn and available() else 0
