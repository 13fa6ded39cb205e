"""The simulator behind the synthetic traces: a timeline of tracks and events, host
threads (a cursor in time and a stack of open ops) that launch work onto FIFO device
streams.  All times are integer nanoseconds; every device op that ends an injected gap
carries a marker with the cause (``Timeline.expect``)."""
from __future__ import annotations

import random
from contextlib import contextmanager

US = 1_000          # all times are integer nanoseconds
MS = 1_000_000
GAP_MIN_NS = 5 * US
ACTIVITY = ("kernel", "memcpy", "memset")

# cause vocabulary: tb_perfdiag/analysis/causes.py
HOST_SYNC = "host_sync"
COMPILATION = "compilation"
H2D_TRANSFER = "h2d_transfer"
DATA_LOADING = "data_loading"
HOST_COMPUTE = "host_compute"
LAUNCH_OVERHEAD = "launch_overhead"
COLLECTIVE_WAIT = "collective_wait"
UNTRACED = "untraced"
DEVICE_WAIT = "device_wait"
ALLOCATOR = "allocator"
GRAPH_CAPTURE = "graph_capture"
RUNTIME_CALL = "runtime_call"
STARTUP = "startup"
CAUSES = (HOST_SYNC, COMPILATION, H2D_TRANSFER, DATA_LOADING, HOST_COMPUTE, LAUNCH_OVERHEAD,
          COLLECTIVE_WAIT, UNTRACED, DEVICE_WAIT, ALLOCATOR, GRAPH_CAPTURE, RUNTIME_CALL,
          STARTUP)


class Ev:
    __slots__ = ("idx", "track", "name", "cat", "ts", "dur", "kind", "parent", "ext", "corr",
                 "args", "stats", "launch", "step", "marker", "meta")

    def __init__(self, idx, track, name, cat, ts, dur, kind, parent=None):
        self.idx = idx
        self.track = track
        self.name = name
        self.cat = cat
        self.ts = ts
        self.dur = dur
        self.kind = kind            # "host" | "kernel" | "memcpy" | "memset" | "dev_other"
        self.parent = parent
        self.ext = None             # Kineto External id
        self.corr = None            # correlation id (launch <-> device op)
        self.args = None            # extra Kineto args
        self.stats = None           # XSpace stats: [(name, type, value)]
        self.launch = None          # device op: the host event that launched it
        self.step = None            # device op: step whose host code launched it
        self.marker = None          # device op: it ends an injected gap
        self.meta = None            # "flow" (Kineto: write an ac2g start) or a dict of
        #                             XSpace extras (display name, metadata stats, op_name)

    @property
    def end(self):
        return self.ts + self.dur


class Track:
    def __init__(self, key, side, device=None, **info):
        self.key = key
        self.side = side            # "host" | "device"
        self.device = device        # display name of the device ("GPU 0", "TPU 1")
        self.info = info


class Timeline:
    """Events of one file (or, in --large mode, of the current chunk)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.events: list = []
        self.tracks: dict = {}
        self._n = 0
        self._corr = 1000
        self._ext = 0
        self.pending = None         # marker for the next device op
        self.step = None            # step currently being generated (host side)

    def track(self, key, side, device=None, **info) -> Track:
        t = self.tracks.get(key)
        if t is None:
            t = self.tracks[key] = Track(key, side, device, **info)
        return t

    def add(self, track, name, cat, ts, dur, kind, parent=None) -> Ev:
        ev = Ev(self._n, track, name, cat, ts, dur, kind, parent)
        self._n += 1
        self.events.append(ev)
        return ev

    def next_corr(self) -> int:
        self._corr += self.rng.choice((1, 2, 2, 3))
        return self._corr

    def next_ext(self) -> int:
        self._ext += 1
        return self._ext

    def expect(self, cause, culprit=None, optional=False, note=None):
        """The next device op launched ends an injected gap of this cause; ``culprit``: the
        host op behind it when that is not the op's own launch."""
        self.pending = {"cause": cause, "culprit": culprit, "optional": optional,
                        "note": note}


class Host:
    """A host thread: a cursor in time and a stack of open events."""

    def __init__(self, tl: Timeline, track: Track, t: int = 0):
        self.tl = tl
        self.track = track
        self.t = t
        self.stack: list = []

    @property
    def rng(self):
        return self.tl.rng

    def r(self, lo, hi) -> int:
        return self.tl.rng.randint(lo, hi)

    def open(self, name, cat="cpu_op", stats=None, args=None) -> Ev:
        ev = self.tl.add(self.track, name, cat, self.t, 0, "host",
                         self.stack[-1] if self.stack else None)
        ev.ext = self.tl.next_ext()
        ev.stats = stats
        ev.args = args
        self.stack.append(ev)
        return ev

    def close(self, tail=0) -> Ev:
        self.t += tail
        ev = self.stack.pop()
        ev.dur = self.t - ev.ts
        return ev

    def leaf(self, name, cat="cpu_op", dur=0, stats=None, args=None) -> Ev:
        ev = self.tl.add(self.track, name, cat, self.t, dur, "host",
                         self.stack[-1] if self.stack else None)
        ev.ext = self.tl.next_ext() if cat in ("cpu_op", "user_annotation") else \
            (self.stack[-1].ext if self.stack else 0)
        ev.stats = stats
        ev.args = args
        self.t += dur
        return ev

    def adv(self, dt):
        self.t += dt

    @contextmanager
    def span(self, name, cat="cpu_op", pre=0, post=0, stats=None, args=None):
        ev = self.open(name, cat, stats, args)
        self.t += pre
        yield ev
        self.close(post)

    def launch(self, stream, name, dur, kind="kernel", api="cudaLaunchKernel", api_dur=None,
               delay=None, blocking_ret=None, dev_args=None, dev_stats=None, api_stats=None,
               corr_stat=None, cat=None, not_before=None):
        """A runtime call that enqueues one device op on ``stream``.

        ``delay``: earliest device start after the call starts (default 2.5–4 µs).
        ``blocking_ret``: the call returns this long after the device op ends
        (synchronous copies); otherwise it lasts ``api_dur``.
        """
        rt_cat = "cuda_runtime"
        rt = self.tl.add(self.track, api, rt_cat, self.t, 0, "host",
                         self.stack[-1] if self.stack else None)
        rt.ext = self.stack[-1].ext if self.stack else 0
        rt.corr = self.tl.next_corr()
        rt.stats = list(api_stats or [])
        if corr_stat:
            rt.stats.append((corr_stat, "u", rt.corr))
        earliest = self.t + (delay if delay is not None else self.r(2500, 4000))
        dev = stream.run(name, dur, earliest, kind=kind, cat=cat, args=dev_args,
                         stats=dev_stats, not_before=not_before)
        dev.corr = rt.corr
        dev.launch = rt
        if corr_stat:
            dev.stats = list(dev.stats or []) + [(corr_stat, "u", rt.corr)]
        if blocking_ret is not None:
            rt.dur = dev.end + blocking_ret - rt.ts
        else:
            rt.dur = api_dur if api_dur is not None else self.r(4500, 7500)
        self.t = rt.ts + rt.dur
        return rt, dev


class Stream:
    """A FIFO device queue (CUDA stream, XLA op line)."""

    def __init__(self, tl: Timeline, track: Track, gap=(600, 2400)):
        self.tl = tl
        self.track = track
        self.gap = gap
        self.free = None            # end of the last op on this queue

    def run(self, name, dur, earliest, kind="kernel", cat=None, args=None, stats=None,
            not_before=None) -> Ev:
        start = earliest
        if self.free is not None:
            start = max(start, self.free + self.tl.rng.randint(*self.gap))
        if not_before is not None:
            start = max(start, not_before)
        ev = self.tl.add(self.track, name, cat or {"kernel": "kernel", "memcpy": "gpu_memcpy",
                                                   "memset": "gpu_memset"}.get(kind, kind),
                         start, dur, kind)
        ev.args = args
        ev.stats = list(stats) if stats else None
        ev.step = self.tl.step
        if self.tl.pending is not None and kind in ACTIVITY:
            ev.marker = self.tl.pending
            self.tl.pending = None
        self.free = start + dur
        return ev


def chain_names(ev) -> list:
    out = []
    p = ev.parent
    while p is not None:
        out.append(p.name)
        p = p.parent
    return out[::-1]


def disp(ev) -> str:
    return ev.meta.get("display", ev.name) if isinstance(ev.meta, dict) else ev.name
