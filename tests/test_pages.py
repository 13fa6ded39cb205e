"""Recycled pages (tb_perfdiag.trace.pages, native/pages.c): numpy's large arrays made in a
scope reuse freed pages, read and write as any array, and never make the process
hold more than the most it had in use."""
import os
import random
import threading

import numpy as np
import pytest

from tb_perfdiag.trace import pages

pytestmark = pytest.mark.skipif(not pages.available(),
                                reason="the C extension is not built here")

MB = 1 << 20
BIG = 40 * MB                       # above the handler's 32 MB line: a large block


def _handler_name(a=None):
    from numpy._core.multiarray import get_handler_name
    return get_handler_name() if a is None else get_handler_name(a)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / MB


def _held(s):
    return s["live"] + s["cached"] + s["small"]


def test_only_the_scope_uses_it():
    outside = _handler_name()
    with pages.recycled_pages():
        assert _handler_name() == "tb_perfdiag_recycled_pages"
        seen = []
        t = threading.Thread(target=lambda: seen.append(_handler_name()))
        t.start()
        t.join()
        assert seen == [outside]            # another thread keeps its own handler
        with pages.recycled_pages():        # nested: still ours, and back after
            pass
        assert _handler_name() == "tb_perfdiag_recycled_pages"
    assert _handler_name() == outside
    assert pages.stats()["scopes"] == 0


def test_off_with_the_rest_of_the_extension(monkeypatch):
    """TB_PERFDIAG_NO_NATIVE (the pure-Python path) turns the pages off too, even after
    they were first used."""
    with pages.recycled_pages():
        pass
    monkeypatch.setenv("TB_PERFDIAG_NO_NATIVE", "1")
    with pages.recycled_pages():
        assert _handler_name() == "default_allocator"
        a = np.ones(BIG, np.uint8)
    assert _handler_name(a) == "default_allocator"


def test_a_freed_block_is_reused_and_zeros_are_zeros():
    with pages.recycled_pages():
        a = np.full(BIG // 8, 7, np.int64)
        del a
        before = pages.stats()
        b = np.zeros(BIG // 8, np.int64)    # the freed block, handed out again
        after = pages.stats()
        assert after["hits"] == before["hits"] + 1
        assert after["misses"] == before["misses"]
        assert not b.any()
        c = np.empty(BIG // 16, np.int64)   # a smaller request: part of a kept block
        c[:] = 3
        b += 1
        assert b.sum() == BIG // 8 and c.sum() == 3 * (BIG // 16)


def test_reused_zeros_are_not_touched_whole():
    """np.zeros from a kept block leaves the pages nobody writes unbacked, as a fresh
    mapping would (a sparse table must not cost its whole size)."""
    n = 256 * MB
    with pages.recycled_pages():
        a = np.ones(n, np.uint8)
        del a
        rss_kept = _rss_mb()                # the kept block is still resident
        b = np.zeros(n, np.uint8)
        assert pages.stats()["hits"] >= 1
        b[:: 16 * MB] = 1                   # one byte per 16 MB (a huge page is 2 MB)
        assert _rss_mb() < rss_kept - 200
        assert int(b.sum()) == n // (16 * MB)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm") or
                    os.confstr("CS_GNU_LIBC_VERSION") is None, reason="glibc on Linux only")
def test_the_last_scope_gives_malloc_heap_back():
    """Arrays under the 32 MB line live in malloc's heap once glibc has raised its mmap
    threshold; what a scope freed there goes back to the system when the last scope
    ends, while an array still alive keeps its pages."""
    with pages.recycled_pages():
        np.ones(24 * MB // 8).sum()     # an mmap'd block freed: glibc raises its threshold
        many = [np.ones(MB // 8 * 3) for _ in range(60)]        # 180 MB in the heap
        keep = np.ones(MB // 8 * 3)     # above them: the heap's top stays in use
        del many
        before = _rss_mb()
    after = _rss_mb()
    assert before - after > 120, (before, after)
    assert keep.sum() == keep.shape[0]


def test_extension_columns_of_final_size_under_the_line_come_from_the_heap():
    """A column the extension makes at its final size (a C pass's result) is a small
    block under the 32 MB line, from malloc's heap that freed arrays return to, and a
    big block from it; its values are the pass's either way."""
    from tb_perfdiag.trace.extension import native_fn
    search = native_fn("sorted_search")
    a = np.arange(0, 4 * MB, 2, dtype=np.int64)
    for n, big in ((MB, False), (5 * MB, True)):            # 8 MB and 40 MB of int64
        keys = np.arange(n, dtype=np.int64)
        with pages.recycled_pages():
            s0 = pages.stats()
            col = search(a, keys, 8, False)
            s1 = pages.stats()
            got = np.frombuffer(col, np.int64)
            np.testing.assert_array_equal(got, np.searchsorted(a, keys))
            grew_small, grew_live = s1["small"] - s0["small"], s1["live"] - s0["live"]
            if big:
                assert grew_live >= 8 * n and grew_small < MB, (grew_live, grew_small)
            else:
                assert grew_small >= 8 * n and grew_live == 0, (grew_live, grew_small)
            del got, col


def test_arrays_outlive_the_scope():
    with pages.recycled_pages():
        a = np.arange(BIG // 8, dtype=np.int64)
        small = np.arange(1000)
    assert _handler_name(a) == "tb_perfdiag_recycled_pages"
    s = pages.stats()
    assert s["cached"] == 0                  # kept blocks go when the scope ends
    assert a[-1] == BIG // 8 - 1 and small.sum() == 499500
    live = s["live"]
    a2 = a * 2                               # made outside: numpy's own handler
    assert _handler_name(a2) != "tb_perfdiag_recycled_pages"
    del a
    assert pages.stats()["live"] == live - (BIG + 4096)
    assert pages.stats()["cached"] == 0      # freed outside a scope: unmapped at once


def test_resize_in_place_keeps_the_data():
    with pages.recycled_pages():
        a = np.arange(BIG // 8, dtype=np.int64)
        a.resize(BIG // 4, refcheck=False)   # grows: numpy's realloc
        assert (a[: BIG // 8] == np.arange(BIG // 8)).all() and not a[BIG // 8:].any()
        live = pages.stats()["live"]
        a.resize(BIG // 8 + 5, refcheck=False)   # shrinks in place, giving the rest back
        assert pages.stats()["live"] <= live - BIG + MB
        assert a[BIG // 8 - 1] == BIG // 8 - 1 and len(a) == BIG // 8 + 5
        b = np.arange(1000, dtype=np.int64)
        b.resize(BIG // 8, refcheck=False)   # small to large
        assert b[999] == 999 and not b[1000:].any()


def test_kept_blocks_give_way_to_small_arrays():
    """Kept blocks must not hold room that the scope's small arrays then need: what is
    held stays under the most that was in use (and the handler's slack, 8 MB)."""
    with pages.recycled_pages():
        a = np.ones(128 * MB, np.uint8)
        del a                                # kept: 128 MB
        assert pages.stats()["cached"] >= 128 * MB
        smalls = [np.ones(MB, np.uint8) for _ in range(100)]   # 100 MB of small blocks
        s = pages.stats()
        assert _held(s) <= s["peak_use"] + s["slack"]
        assert s["cached"] < 40 * MB
        del smalls


def test_held_never_passes_the_most_in_use():
    rng = random.Random(7)
    with pages.recycled_pages():
        alive = []
        for _ in range(300):
            if alive and rng.random() < 0.45:
                alive.pop(rng.randrange(len(alive)))
            else:
                size = rng.choice([rng.randint(1, 4) * MB, rng.randint(33, 200) * MB])
                make = rng.choice([np.empty, np.zeros])
                a = make(size, np.uint8)
                a[::4096] = 1
                alive.append(a)
            s = pages.stats()
            assert _held(s) <= s["peak_use"] + s["slack"]
        s = pages.stats()
        assert s["hits"] > 0 and s["peak_held"] <= s["peak_use"] + s["slack"]
        del alive


def test_a_block_freed_at_the_peak_is_kept():
    """The peak counts small arrays made while nothing was kept: a large block freed
    at that peak stays for the next request instead of giving way at once."""
    with pages.recycled_pages():
        a = np.ones(64 * MB, np.uint8)
        smalls = [np.ones(MB, np.uint8) for _ in range(100)]
        del a
        smalls.pop()
        smalls.append(np.ones(MB, np.uint8))   # back to the same total: nothing to give
        before = pages.stats()
        assert before["cached"] >= 64 * MB
        b = np.empty(64 * MB, np.uint8)
        assert pages.stats()["hits"] == before["hits"] + 1
        del b, smalls


def test_letting_go_unmaps_the_kept_blocks_and_keeps_only_the_use_after():
    """``let_go`` (before work that makes Python objects) unmaps the kept blocks, and
    from then on blocks are kept only up to the arrays' use since, not the earlier peak;
    a new peak after it keeps blocks up to itself again."""
    with pages.recycled_pages():
        a = np.ones(128 * MB, np.uint8)
        del a                                        # kept: the peak was 128 MB
        assert pages.stats()["cached"] >= 128 * MB
        gone = pages.let_go()
        s = pages.stats()
        assert gone >= 128 * MB and s["cached"] == 0
        assert s["peak_use"] >= 128 * MB             # the peak is still reported
        b = np.ones(40 * MB, np.uint8)
        del b                                        # kept: the use since was 40 MB
        assert pages.stats()["cached"] >= 40 * MB
        small = [np.ones(MB, np.uint8) for _ in range(30)]
        s = pages.stats()                            # 30 MB more in use: it gives way,
        assert s["cached"] == 0, s                   # though under the earlier 128 MB
        d = np.ones(200 * MB, np.uint8)
        del d                                        # a new peak: kept again
        assert pages.stats()["cached"] >= 200 * MB
        del small
    assert pages.let_go() == 0 or not pages.available()


_GROWN_OUTSIDE = """
import json, numpy as np
from tb_perfdiag.trace import pages
MB = 1 << 20
def status(key):
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) << 10 for x in f if x.startswith(key + ":"))
with pages.recycled_pages():
    a = np.ones(300 * MB, np.uint8)              # the read: the mark is set
    del a
out = {}
mark = pages.high_water()
with pages.recycled_pages(pages.room_under_high_water(0)):
    b = np.ones(250 * MB, np.uint8)
    del b                                        # kept, under the room
    out["kept"] = pages.stats()["cached"]
    grown = bytearray(200 * MB)                  # the process grows outside the arrays
    grown[::4096] = b"x" * len(grown[::4096])
    out["gone"] = pages.keep_under_high_water(mark)
    out["after"] = pages.stats()["cached"]
    out["mark"], out["rss"] = mark, status("VmRSS")
    c = np.ones(400 * MB, np.uint8)              # use past the bound is still use
    out["live"] = pages.stats()["live"]
    del c, grown
out["outside_scope"] = pages.keep_under_high_water(mark)
print(json.dumps(out))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_kept_blocks_give_way_to_what_the_process_grew_outside_them():
    """A scope given room up to the high-water mark keeps freed blocks up to it; once the
    process has grown outside the arrays (Python objects, malloc's heap: here 200 MB of
    bytes) ``keep_under_high_water`` unmaps kept blocks so that arrays, kept blocks and
    the rest stay under the mark; the arrays' own use still goes past it.  Outside a
    scope it does nothing.  In a fresh process: the mark is this scenario's own."""
    import json
    import subprocess
    import sys
    got = subprocess.run([sys.executable, "-c", _GROWN_OUTSIDE], capture_output=True,
                         text=True, timeout=120, check=True)
    out = json.loads(got.stdout.strip().splitlines()[-1])
    assert out["kept"] >= 250 * MB
    assert out["gone"] >= 150 * MB and out["after"] <= 100 * MB, out
    assert out["rss"] <= out["mark"] + 8 * MB       # back under the mark it began under
    assert out["live"] >= 400 * MB and out["outside_scope"] == 0


def test_room_keeps_blocks_up_to_the_earlier_use():
    """A scope given room (what the request's read had in use at its peak) keeps freed
    blocks up to it from the start, where on its own it keeps them only up to its own
    peak; it never holds more than the room or its peak, and tells its peak."""
    def kept_after_churn(room):
        with pages.recycled_pages(room) as scope:
            a = np.ones(64 * MB, np.uint8)
            b = np.ones(64 * MB, np.uint8)
            del a                            # kept either way: its peak was 128 MB
            c = np.ones(100 * MB, np.uint8)  # no kept block fits: fresh, the peak grows
            del b, c
            s = pages.stats()
            assert _held(s) <= max(room, s["peak_use"]) + s["slack"]
            cached = s["cached"]
        assert scope.peak >= max(room, 164 * MB)
        return cached
    base = kept_after_churn(0)
    roomy = kept_after_churn(400 * MB)
    assert base <= 172 * MB < 228 * MB <= roomy    # the room kept all three blocks
    s = pages.stats()
    assert s["cached"] == 0 and s["scopes"] == 0   # and gave them back at the end


def test_a_read_tells_the_analysis_its_peak():
    """``load`` records what its read had in use at its peak, which ``analyse`` passes
    on as the least room its scope may keep freed blocks in."""
    import tb_perfdiag
    from tb_perfdiag.analysis import diagnosis
    rel = "testdata/synthetic/logdir/kineto_launch_bound/worker0.1795400183000.pt.trace.json"
    tr = tb_perfdiag.trace.load(os.path.join(os.path.dirname(__file__), "..", rel))
    assert tr.read_peak > 0
    seen = []
    real = diagnosis.recycled_pages
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(diagnosis, "recycled_pages", lambda room=0: seen.append(room) or real(room))
        diagnosis.analyse(tr)
    assert len(seen) == 1 and seen[0] >= tr.read_peak
    if os.path.exists("/proc/self/status"):
        assert seen[0] <= _status_kb("VmHWM") * 1024


def test_a_file_read_and_analysed_in_one_go_hands_the_reads_blocks_to_the_analysis():
    """``read_and_analyse``: the blocks the read frees at its end are still kept when the
    analysis begins (read and analysed apart, they are unmapped in between), and the
    answer is the same byte for byte."""
    from conftest import ROOT
    from tb_perfdiag import trace as TR
    from tb_perfdiag.analysis import diagnosis
    from tb_perfdiag.file_analysis import read_and_analyse
    from tb_perfdiag.render.json import diagnosis_json, json_bytes
    path = os.path.join(ROOT, ANSWER_TRACES[-1])
    kept_at_start = []
    real = diagnosis.recycled_pages

    def spy(room=0):
        kept_at_start.append(pages.stats()["cached"])
        return real(room)
    with pages.tuned(4096, False), pytest.MonkeyPatch.context() as mp:
        mp.setattr(diagnosis, "recycled_pages", spy)
        apart = json_bytes(diagnosis_json(diagnosis.analyse(TR.load(path))[0]))
        together = json_bytes(diagnosis_json(read_and_analyse(path)[0]))
    assert kept_at_start[0] == 0 < kept_at_start[1]
    assert together == apart
    assert pages.stats()["scopes"] == 0 and pages.stats()["cached"] == 0


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
def test_room_is_the_headroom_under_the_process_high_water_mark(monkeypatch):
    """With no scope open, the room is the process' high-water mark less what it holds
    outside the pages: a 300 MB array made and dropped outside any scope leaves that
    much headroom, and an array of the pages' that is still alive counts in it (the
    analysis' own trace).  With a scope open, or no /proc, the room is the floor given."""
    a = np.ones(300 * MB, np.uint8)
    del a
    # measured before the pages' array is made: it is in the process' resident memory,
    # and only the room counts it as headroom
    assert 280 * MB <= _status_kb("VmHWM") * 1024 - _status_kb("VmRSS") * 1024
    with pages.recycled_pages():
        kept = np.ones(200 * MB, np.uint8)
    room = pages.room_under_high_water(0)
    hwm, rss = _status_kb("VmHWM") * 1024, _status_kb("VmRSS") * 1024
    assert hwm - rss + 190 * MB <= room <= hwm
    del kept
    assert pages.room_under_high_water(hwm + MB) == hwm + MB    # never under the floor
    with pages.recycled_pages():
        assert pages.room_under_high_water(5) == 5
    import builtins
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: (_ for _ in ()).throw(
        OSError("no /proc")) if p == "/proc/self/status" else real_open(p, *a, **k))
    assert pages.room_under_high_water(7) == 7


ANSWER_TRACES = [
    "testdata/captures/torch_xla_cpu/plugins/profile/2026_11_22_05_09_13/cpuhost.xplane.pb",
    "testdata/captures/torch_cpu/toyhost.1795324137232776410.pt.trace.json",
    "testdata/captures/tf_cpu/eager_loop/plugins/profile/2026_11_25_02_04_21/cpuhost.xplane.pb",
    "testdata/synthetic/logdir/kineto_launch_bound/worker0.1795400183000.pt.trace.json",
]


@pytest.mark.parametrize("rel", ANSWER_TRACES)
def test_answers_do_not_depend_on_what_memory_held(rel, monkeypatch):
    """Recycled blocks hold old data: with every block from 4 KB recycled and every
    block malloc hands out filled with garbage, the diagnosis is the same, byte for
    byte, as with numpy's own handler (an array read before it is written shows)."""
    from conftest import ROOT
    from tb_perfdiag import trace as TR
    from tb_perfdiag.analysis import diagnosis as G
    from tb_perfdiag.render.json import diagnosis_json, json_bytes

    path = os.path.join(ROOT, rel)

    def answer():
        return json_bytes(diagnosis_json(G.diagnose_trace(TR.load(path))))

    def handed_out():
        s = pages.stats()
        return s["hits"] + s["misses"]

    with pages.tuned(4096, True):
        before = handed_out()
        recycled = answer()
        assert handed_out() > before    # the low line made large blocks of its arrays
    monkeypatch.setattr(pages, "available", lambda: False)
    assert recycled == answer()


def test_the_heap_pad_setting_gives_back_the_one_it_replaced():
    from tb_perfdiag.trace.extension import native_fn
    fn = native_fn("pages_heap_pad")
    old = fn(3 * MB)
    try:
        assert fn(5 * MB) == 3 * MB
    finally:
        fn(old)
    with pytest.raises(ValueError):
        fn(-1)


class _PadCalls:
    """A stand-in for the native setting that records what it was set to: the server's
    own threads may stream a trace while the suite runs, so the real one is not read."""

    def __init__(self):
        self.calls, self.pad = [], 0

    def __call__(self, n):
        self.calls.append(n)
        old, self.pad = self.pad, n
        return old


def test_the_heap_pad_lasts_while_any_read_needs_it(monkeypatch):
    # two streamed reads at once: the first to end must not take the pad from the other
    fake = _PadCalls()
    monkeypatch.setattr(pages, "native_fn", lambda name: fake)
    monkeypatch.setattr(pages, "_padded", 0)
    inside, leave = threading.Event(), threading.Event()

    def other_read():
        with pages.heap_pad(64 * MB):
            inside.set()
            leave.wait(5)
    t = threading.Thread(target=other_read)
    with pages.heap_pad(64 * MB):
        assert fake.pad == 64 * MB
        t.start()
        assert inside.wait(5)
    assert fake.pad == 64 * MB          # the other read goes on
    leave.set()
    t.join()
    assert fake.pad == 0 and fake.calls == [64 * MB, 0]


def test_the_heap_pad_goes_when_the_last_read_ends(monkeypatch):
    fake = _PadCalls()
    monkeypatch.setattr(pages, "native_fn", lambda name: fake)
    monkeypatch.setattr(pages, "_padded", 0)
    with pytest.raises(RuntimeError):
        with pages.heap_pad(64 * MB):
            raise RuntimeError("the read failed")
    assert fake.pad == 0 and fake.calls == [64 * MB, 0]


def _balloon(root, name="virtio0", device="0x0005", features="0110010100", bound=True):
    dev = root / name
    dev.mkdir(parents=True)
    (dev / "device").write_text(device + "\n")
    (dev / "features").write_text(features + "0" * 54 + "\n")
    if bound:
        (dev / "driver").mkdir()
    return str(root)


@pytest.mark.parametrize("kw, reported", [
    ({}, True),                                     # a bound balloon reporting free pages
    ({"features": "0110000100"}, False),            # a balloon without the feature
    ({"bound": False}, False),                      # no driver bound to it
    ({"device": "0x0002"}, False),                  # a disk, not a balloon
])
def test_free_page_reporting_is_read_off_the_virtio_devices(tmp_path, kw, reported):
    devices = _balloon(tmp_path / "devices", **kw)
    assert pages.free_memory_reported(devices) is reported
    assert pages.free_memory_reported(str(tmp_path / "absent")) is False


@pytest.mark.parametrize("setting, reported, pay", [
    (None, True, False), ("auto", True, False), (None, False, True),
    ("on", True, True), ("OFF", False, False), ("0", False, False),
])
def test_huge_pages_are_asked_for_unless_the_host_takes_free_memory(tmp_path, monkeypatch,
                                                                      setting, reported, pay):
    devices = _balloon(tmp_path / "devices", features="0110010100" if reported else "0")
    if setting is None:
        monkeypatch.delenv(pages.HUGE_PAGES_ENV, raising=False)
    else:
        monkeypatch.setenv(pages.HUGE_PAGES_ENV, setting)
    assert pages.huge_pages_pay(devices) is pay


def _vm_flags(address: int) -> list:
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                return line.split()[1:]
    raise AssertionError("no mapping holds the array")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's /proc")
@pytest.mark.skipif(not os.path.exists("/sys/kernel/mm/transparent_hugepage"),
                    reason="a kernel without transparent huge pages")
@pytest.mark.parametrize("huge", [True, False])
def test_large_blocks_ask_for_huge_pages_only_when_told(huge):
    from tb_perfdiag.trace.extension import native_fn
    fn = native_fn("pages_huge")
    old = fn(huge)
    try:
        assert pages.huge_pages() is huge
        with pages.recycled_pages():
            a = np.ones(BIG // 8 + 4096, np.int64)
            assert _handler_name(a) == "tb_perfdiag_recycled_pages"
            assert ("hg" in _vm_flags(a.ctypes.data)) is huge
            del a
    finally:
        fn(old)


def test_the_decision_reaches_numpy_only_to_turn_huge_pages_off(monkeypatch):
    """Where huge pages do not pay, numpy's own large arrays stop asking for them too
    (its setting is process-wide); where they pay, numpy's setting is left as it is."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import _set_madvise_hugepage
    from tb_perfdiag.trace.extension import native_fn
    flag = native_fn("pages_huge")
    before_native, before_numpy = flag(), _set_madvise_hugepage(True)
    try:
        _set_madvise_hugepage(False)
        monkeypatch.setattr(pages, "huge_pages_pay", lambda: True)
        pages._settle_huge_pages()
        assert pages.huge_pages() and _set_madvise_hugepage(False) is False   # left off
        _set_madvise_hugepage(True)
        monkeypatch.setattr(pages, "huge_pages_pay", lambda: False)
        pages._settle_huge_pages()
        assert not pages.huge_pages() and _set_madvise_hugepage(True) is False  # turned off
    finally:
        flag(before_native)
        _set_madvise_hugepage(before_numpy)
