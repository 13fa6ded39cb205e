"""The typed result of a diagnosis: numpy columns and small dataclasses.

Nothing here is JSON or display text (finding titles and fixes excepted): renderers in
``tb_perfdiag.render`` turn a ``Diagnosis`` into the page/CLI JSON, the Chrome-trace
overlay, terminal text and pod rows.  Times are integer picoseconds relative to the
trace origin; event columns hold indices into the trace, and ``refs`` keeps what a
renderer needs to name those events, so a ``Diagnosis`` is self-contained (it is
pickled for the disk cache and sent back from pod workers without the trace).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields

import numpy as np

from . import causes as C


class Cause(enum.IntEnum):
    """Gap causes, in the order of ``causes.ALL`` (their string names)."""

    HOST_SYNC = 0
    COMPILATION = 1
    H2D_TRANSFER = 2
    DATA_LOADING = 3
    HOST_COMPUTE = 4
    LAUNCH_OVERHEAD = 5
    COLLECTIVE_WAIT = 6
    UNTRACED = 7
    DEVICE_WAIT = 8
    ALLOCATOR = 9
    GRAPH_CAPTURE = 10
    RUNTIME_CALL = 11
    STARTUP = 12

    @property
    def key(self) -> str:
        return C.ALL[self]


assert [c.key for c in Cause] == list(C.ALL)


class FindingKind(str, enum.Enum):
    HOST_SYNC = "host_sync"
    RECOMPILATION = "recompilation"
    COMPILATION = "compilation"
    DEVICE_WAIT = "device_wait"
    ALLOCATOR = "allocator"
    GRAPH_CAPTURE = "graph_capture"
    RUNTIME_CALL = "runtime_call"
    GRAPH_BUILDING = "graph_building"
    D2H_TRANSFER = "d2h_transfer"
    INPUT_BOUND = "input_bound"
    H2D_TRANSFER = "h2d_transfer"
    LAUNCH_BOUND = "launch_bound"
    HOST_COMPUTE = "host_compute"
    COLLECTIVE_WAIT = "collective_wait"
    UNTRACED = "untraced"
    EXCESSIVE_MEMCPY = "excessive_memcpy"
    DEVICE_SKEW = "device_skew"
    SERIALIZED_DEVICES = "serialized_devices"
    RECURRING_GAP = "recurring_gap"
    STARTUP = "startup"
    # busy time badly spent (``findings/efficiency.py``)
    FP32_MATMUL = "fp32_matmul"
    SLOW_MATMUL = "slow_matmul"
    UNFUSED_ELEMENTWISE = "unfused_elementwise"
    UNFUSED_ATTENTION = "unfused_attention"
    COPY_BOUND = "copy_bound"


def _nbytes(obj) -> int:
    """Rough resident size of a result part (numpy buffers plus a little per object)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (list, tuple)):
        return 64 + sum(_nbytes(x) for x in obj[:1000]) * max(len(obj), 1) // max(
            min(len(obj), 1000), 1)
    if isinstance(obj, dict):
        return 64 + sum(_nbytes(k) + _nbytes(v) for k, v in obj.items())
    if isinstance(obj, str):
        return 50 + len(obj)
    if hasattr(obj, "__dataclass_fields__"):
        return sum(_nbytes(getattr(obj, f.name)) for f in fields(obj))
    return 32


@dataclass
class EventRefs:
    """Names, places and call chains of the trace events a diagnosis cites."""

    event: np.ndarray          # int64 trace event indices, sorted
    name: np.ndarray           # int32 index into strings
    track: np.ndarray          # int32 trace track (labels in Diagnosis.track_labels)
    ts: np.ndarray             # int64 ps
    dur: np.ndarray            # int64 ps
    kind: np.ndarray           # int8 EventKind
    hlo_op: np.ndarray         # int32 string id, −1 none
    annotation: np.ndarray     # int32 string id (op_name or tf_op), −1 none
    chain: list                # per row: tuple of string ids, outermost first
    strings: list
    # device events replayed from a CUDA/HIP graph and matched to a capture's launch
    # (``graphs.captured_places``): their rows, and per one the capture's chain of the
    # launch (string ids, outermost first), the framework op in it (−1 none) and the
    # user annotations in it
    captured_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    captured_chain: list = field(default_factory=list)
    captured_op: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    captured_annotations: list = field(default_factory=list)

    def row(self, events) -> np.ndarray:
        """Row of each event (−1 for −1 or an event not cited)."""
        e = np.asarray(events, np.int64)
        k = np.minimum(np.searchsorted(self.event, e), max(self.event.shape[0] - 1, 0))
        ok = (e >= 0) & (self.event.shape[0] > 0)
        if self.event.shape[0]:
            ok &= self.event[k] == e
        return np.where(ok, k, -1)

    def name_of(self, event: int) -> str:
        return self.names_of([event])[0]

    def names_of(self, events) -> list:
        """``name_of`` of each event, in one lookup."""
        r = self.row(events)
        ids = np.where(r >= 0, self.name[np.maximum(r, 0)] if self.event.shape[0] else -1, -1)
        S = self.strings
        return [S[i] if i >= 0 else "" for i in ids.tolist()]

    def chain_of(self, event: int) -> list:
        r = int(self.row([event])[0])
        return [self.strings[i] for i in self.chain[r]] if r >= 0 else []

    def captured_of(self, row: int) -> tuple | None:
        """(chain, op, annotations) as names of row ``row``'s launch while its graph was
        captured; None where the row was not replayed from a matched capture."""
        k = int(np.searchsorted(self.captured_rows, row))
        if k >= self.captured_rows.shape[0] or int(self.captured_rows[k]) != row:
            return None
        S = self.strings
        op = int(self.captured_op[k])
        return ([S[i] for i in self.captured_chain[k]], S[op] if op >= 0 else None,
                [S[i] for i in self.captured_annotations[k]])


@dataclass
class GapTable:
    """One row per gap ≥ threshold, largest first (ties: earlier first).  Each gap's
    length is split into counterfactual cause shares (``shares.py``) that add up to it."""

    device: np.ndarray         # int32
    start: np.ndarray          # int64 ps
    end: np.ndarray
    step: np.ndarray           # int32 index into Diagnosis.steps (−1 none)
    prev_op: np.ndarray        # int64 event: the device op before the gap (−1)
    next_op: np.ndarray        # int64 event: the device op ending it (−1)
    waited_for: np.ndarray     # int64 event: the host call that issued next_op (−1)
    found_via: np.ndarray      # int8 attribution.VIA_*
    cause: np.ndarray          # int8 Cause: the primary (largest share)
    shares: np.ndarray         # (n, n_causes) int64 ps, rows add up to the gap
    rest_end: np.ndarray       # int64 ps: end of the host-side part (device-side wait after)
    thread: np.ndarray         # int32 host track analysed: the one that issued next_op (−1)
    followed: np.ndarray       # int32 track its idle time was followed to (−1)
    blocking: np.ndarray       # int64 event: the blocking call that earned host_sync (−1)
    blocking_track: np.ndarray  # int32 its track (−1)
    drained: np.ndarray        # bool: a sync in flight as the device went idle drained it
    culprit: np.ndarray        # int64 event: the op behind the primary share (−1)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @staticmethod
    def empty(n_causes: int) -> "GapTable":
        z = np.zeros(0, np.int64)
        i32 = z.astype(np.int32)
        return GapTable(i32, z, z, i32, z, z, z, z.astype(np.int8), z.astype(np.int8),
                        np.zeros((0, n_causes), np.int64), z, i32, i32, z, i32,
                        z.astype(bool), z)


@dataclass
class HostOps:
    """What each host thread ran during the gaps given detail: per (gap row, thread), the
    ops with the most self time inside the gap."""

    gap: np.ndarray            # int32 gap row
    track: np.ndarray          # int32
    event: np.ndarray          # int64
    self_time: np.ndarray      # int64 ps
    syncs: list                # per detailed gap row: list of (track, event) blocking calls
    rows: np.ndarray           # int32 gap rows that have detail


@dataclass
class DeviceTable:
    name: list
    kind: list
    ops: np.ndarray            # int64 device activity events
    busy: np.ndarray           # int64 ps (union)
    lo: np.ndarray             # int64 ps first activity start (−1 none)
    hi: np.ndarray             # int64 ps last activity end
    idle_by_cause: np.ndarray  # (n_dev, n_causes) int64 ps, gaps ≥ threshold
    small_count: np.ndarray    # int64 gaps under the threshold
    small_total: np.ndarray    # int64 ps
    # the window its idle is counted over: its activity [lo, hi) and the step windows on
    # it (idle before its first op and after its last within them is idle too); None in
    # old results
    win_lo: np.ndarray | None = None
    win_hi: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.name)

    def window(self, d: int) -> tuple:
        """(start, end) ps of the window device ``d``'s idle by cause adds up over."""
        if self.win_lo is None or self.win_lo[d] < 0:
            return int(self.lo[d]), int(self.hi[d])
        return int(self.win_lo[d]), int(self.win_hi[d])


@dataclass
class StepNumbers:
    """Per step, and per step and device (axis 1: devices with activity, −1 windows
    where a device has none)."""

    ids: np.ndarray            # int64 step numbers
    host_start: np.ndarray     # int64 ps
    host_end: np.ndarray
    source: str
    has_device: np.ndarray     # bool (n_dev,): devices with activity
    win_start: np.ndarray      # (n_steps, n_dev) int64 ps
    win_end: np.ndarray
    busy: np.ndarray           # (n_steps, n_dev) int64 ps
    idle_by_cause: np.ndarray  # (n_steps, n_dev, n_causes) int64 ps
    small_count: np.ndarray    # (n_steps, n_dev)
    small_total: np.ndarray
    compile_count: np.ndarray  # (n_steps,)
    compile_total: np.ndarray  # ps
    outlier: np.ndarray        # bool
    # (n_steps, n_dev) int64 ps: union of the device ops each step launched, wherever they
    # ran (−1 where steps are device-side or the whole trace); None in old results
    launched: np.ndarray | None = None
    marker: str = ""           # "training_loop", "backward_passes": what marks the
                               # iterations

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def typical(self) -> np.ndarray:
        """bool per step: the steps a typical step is averaged over — those not flagged
        ``outlier`` (compiling, or 1.5× the median step), all of them when every step is."""
        return typical_of(self.outlier)

    def typical_step_ps(self) -> float | None:
        """The step time every face shows (``TYPICAL_STEP``): the mean host step window
        over the typical steps; None without steps."""
        if not len(self):
            return None
        host = np.asarray(self.host_end, np.int64) - np.asarray(self.host_start, np.int64)
        return float(host[self.typical()].mean())


# the one definition of step time, said by the page, the CLI (diagnose, check, compare, the
# pod summary) and MCP: a mean, so that busy + idle by cause add up to it
TYPICAL_STEP = ("Typical step (the step time shown everywhere): the mean host step window over "
                "the typical steps — every step but those that compile or last over 1.5× the "
                "median step (all of them when every step does); a trace without steps is "
                "one step.")


def typical_of(outlier: np.ndarray) -> np.ndarray:
    """``StepNumbers.typical`` of these ``outlier`` flags."""
    keep = ~np.asarray(outlier, bool)
    return keep if keep.any() else np.ones(keep.shape[0], bool)


@dataclass
class AnnotationTable:
    """Device time per user annotation path (every prefix of a path is a row)."""

    paths: list                # tuple of names per row, sorted
    inclusive: np.ndarray      # int64 ps
    exclusive: np.ndarray
    ops: np.ndarray
    device_runs: np.ndarray
    scattered: np.ndarray      # bool
    interleaved_with: list     # per row: sorted list of path strings
    per_step_inclusive: np.ndarray   # (n_rows, n_steps) int64 ps
    per_step_exclusive: np.ndarray
    # device ops under no user scope (torch_xla's backward ops, CUDA kernels launched
    # outside every annotation)
    unscoped: int = 0                # ps, summed over devices like the rows
    unscoped_ops: int = 0
    unscoped_per_step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # per row: the user's scope its last name stands for (JAX: transpose(jvp(forward)) →
    # forward); totals per such scope over the whole tree, each op counted once
    user_scope: list = field(default_factory=list)
    scope_names: list = field(default_factory=list)
    scope_inclusive: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    scope_ops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class CompilationTable:
    """One row per outermost graph compilation with a duration (``XLAGraphExecutor::
    Compile``, ``backend_compile_and_load``…; the passes and worker-thread pieces inside
    one are part of it), in time order.  A recompilation is the same function compiled
    again; the first compile of each function is a one-time cost."""

    event: np.ndarray          # int64 trace event
    step: np.ndarray           # int32 index into Diagnosis.steps (−1: before any step)
    start: np.ndarray          # int64 ps
    duration: np.ndarray       # int64 ps
    function: list             # the program compiled ("jit_train_step", a graph), "" unknown
    recompile: np.ndarray      # bool

    def __len__(self) -> int:
        return int(self.event.shape[0])

    @staticmethod
    def empty() -> "CompilationTable":
        z = np.zeros(0, np.int64)
        return CompilationTable(z, z.astype(np.int32), z, z, [], z.astype(bool))


class Direction(enum.IntEnum):
    H2D = 1
    D2H = 2


@dataclass
class TransferTable:
    """One row per user-level host↔device transfer call on the user's threads
    (``.item()``'s ``TransferFromDevice``, JAX's ``np.asarray(jax.Array)``), counted
    once however many runtime threads carry it, in time order."""

    event: np.ndarray          # int64 trace event
    step: np.ndarray           # int32 index into Diagnosis.steps (−1: before any step)
    start: np.ndarray          # int64 ps
    duration: np.ndarray       # int64 ps
    direction: np.ndarray      # int8 Direction

    def __len__(self) -> int:
        return int(self.event.shape[0])

    @staticmethod
    def empty() -> "TransferTable":
        z = np.zeros(0, np.int64)
        return TransferTable(z, z.astype(np.int32), z, z, z.astype(np.int8))


@dataclass
class OpTable:
    """One row per op name on the host (inclusive time) and on the devices (device time:
    kernels, copies, sets), with its count and time over the trace, over the steps and
    over the typical steps (``typical_steps`` of ``steps`` steps: those not flagged
    ``StepNumbers.outlier``, or all of them when every step is).  Built by
    ``ops.op_table``."""

    name: list
    device: np.ndarray         # bool: a device op (else a host op)
    kind: np.ndarray           # int8 EventKind
    count: np.ndarray          # int64 events, whole trace
    time: np.ndarray           # int64 ps
    step_count: np.ndarray     # int64 events that belong to a step
    step_time: np.ndarray      # int64 ps
    typical_count: np.ndarray  # int64 events that belong to a typical step
    typical_time: np.ndarray   # int64 ps
    typical_steps: int
    steps: int

    def __len__(self) -> int:
        return len(self.name)


class OpClass(enum.IntEnum):
    """What a device op group is, for the overlap split."""

    COMPUTE = 0       # kernels and XLA ops that are no collective
    COLLECTIVE = 1    # NCCL/RCCL kernels, XLA all-reduce/all-gather/…
    MEMCPY = 2
    MEMSET = 3


class Overlap(enum.IntEnum):
    """Columns of ``DeviceOpTable.overlap``: union lengths in ps.  COMPUTE +
    COPIES_EXPOSED + COLLECTIVES_EXPOSED = BUSY."""

    BUSY = 0                        # union of all the device's ops
    COMPUTE = 1                     # union of compute ops
    COPIES = 2                      # union of memcpy and memset
    COLLECTIVES = 3                 # union of collectives
    COPIES_UNDER_COMPUTE = 4        # |copies ∩ compute|
    COLLECTIVES_UNDER_COMPUTE = 5   # |collectives ∩ compute|
    COPIES_EXPOSED = 6              # |copies \ compute|
    COLLECTIVES_EXPOSED = 7         # |collectives \ (compute ∪ copies)|


@dataclass
class DeviceOpTable:
    """Device time by op group (``device_ops.device_op_table``): one row per (device,
    group), rows by device then most time first, with sparse per-step cells (by the
    step that launched the ops) and the overlap of compute, copies and collectives."""

    device: np.ndarray          # int32 per row
    name: list                  # group label ("at::native::foo<…>", "Memcpy HtoD", "fusion.3")
    klass: np.ndarray           # int8 OpClass
    count: np.ndarray           # int64 ops
    time: np.ndarray            # int64 ps, summed durations (streams may overlap)
    short_count: np.ndarray     # int64 GPU kernels shorter than latency_ps
    short_time: np.ndarray      # int64 ps
    longest: np.ndarray         # int64 trace event: the longest instance
    longest_ts: np.ndarray      # int64 ps
    longest_dur: np.ndarray     # int64 ps
    longest_track: np.ndarray   # int32 trace track (Diagnosis.track_labels)
    category: list              # hlo_category of the longest instance ("" none)
    host_op: list               # the host op behind most of the row's time ("" none)
    annotation: list            # the user annotation path (" › ") behind most of it ("")
    # per (row, step) cell with ops; of each (step, device) only the STEP_GROUPS groups
    # with the most time (``device_ops``), the others in step_rest*
    step_row: np.ndarray        # int32: the cell's row
    step: np.ndarray            # int32 index into Diagnosis.steps
    step_count: np.ndarray      # int64
    step_time: np.ndarray       # int64 ps
    step_longest: np.ndarray    # int64 trace event
    step_longest_ts: np.ndarray
    step_longest_dur: np.ndarray
    step_longest_track: np.ndarray
    # per (step, device) the groups past the first STEP_GROUPS (most time first), summed
    step_rest: np.ndarray       # (n_steps, n_dev) int64 groups
    step_rest_count: np.ndarray     # (n_steps, n_dev) int64 ops
    step_rest_time: np.ndarray      # (n_steps, n_dev) int64 ps
    typical_count: np.ndarray   # int64 per row: ops over the typical steps (StepNumbers)
    typical_time: np.ndarray    # int64 ps per row, likewise
    overlap: np.ndarray         # (n_dev, len(Overlap)) int64 ps
    step_overlap: np.ndarray    # (n_steps, n_dev, len(Overlap)) int64 ps, by launching step
    short_count_dev: np.ndarray     # (n_dev,) kernels shorter than latency_ps
    short_time_dev: np.ndarray      # (n_dev,) ps
    step_short_count: np.ndarray    # (n_steps, n_dev)
    step_short_time: np.ndarray     # (n_steps, n_dev) ps
    latency_ps: int = 10_000_000

    def __len__(self) -> int:
        return len(self.name)

    @staticmethod
    def empty(n_dev: int, n_steps: int) -> "DeviceOpTable":
        z = np.zeros(0, np.int64)
        i32, nov = z.astype(np.int32), len(Overlap)
        sd = np.zeros((n_steps, n_dev), np.int64)
        return DeviceOpTable(i32, [], z.astype(np.int8), z, z, z, z, z, z, z, i32, [], [], [],
                             i32, i32, z, z, z, z, z, i32, sd, sd.copy(), sd.copy(), z, z,
                             np.zeros((n_dev, nov), np.int64),
                             np.zeros((n_steps, n_dev, nov), np.int64),
                             np.zeros(n_dev, np.int64), np.zeros(n_dev, np.int64),
                             np.zeros((n_steps, n_dev), np.int64),
                             np.zeros((n_steps, n_dev), np.int64))


@dataclass
class CollectiveTable:
    """One row per collective op instance on this host's devices (the first
    ``collectives.MAX_INSTANCES`` in time), in (device, start) order.  Times are ps relative to the
    trace origin (``Diagnosis.source['origin_ps']``)."""

    device: np.ndarray          # int32 index into Diagnosis.devices
    key: np.ndarray             # int32 index into ``keys``
    ordinal: np.ndarray         # int32: k-th op of this key on this device
    start: np.ndarray           # int64 ps: the arrival on this device
    end: np.ndarray             # int64 ps (an async pair's ``-done`` end)
    step: np.ndarray            # int32 index into Diagnosis.steps (−1 none)
    span_start: np.ndarray      # int64 ps: the previous collective's end on the device
    span_idle: np.ndarray       # (n, n_causes) int64 ps: idle in gaps over [span_start, start)
    culprit: np.ndarray         # int32 index into ``names`` (−1): the largest gap's culprit
    keys: list                  # matching keys
    kinds: list                 # per key: all-reduce, all-gather, send-recv, …
    names: list                 # culprit names
    clock: str = ""             # the host's clock identity (its hostname; "" unknown)
    dropped: int = 0            # instances past MAX_INSTANCES

    def __len__(self) -> int:
        return int(self.start.shape[0])

    @staticmethod
    def empty(n_causes: int = len(C.ALL)) -> "CollectiveTable":
        z = np.zeros(0, np.int64)
        i32 = z.astype(np.int32)
        return CollectiveTable(i32, i32, i32, z, z, i32, z, np.zeros((0, n_causes), np.int64),
                               i32, [], [], [])


class Bound(enum.IntEnum):
    """Which roof limits an op group (``EfficiencyTable.row_bound``)."""

    UNKNOWN = -1      # no FLOPs or no bytes, or no peak
    COMPUTE = 0       # intensity at or above the ridge point
    MEMORY = 1        # below it


@dataclass
class GraphSummary:
    """Per device: what the CUDA/HIP graph replays it ran matched in their captures
    (``efficiency.graphs``)."""

    matched: np.ndarray         # (n_dev,) replayed device events matched to a capture launch
    total: np.ndarray           # (n_dev,) replayed device events
    replays: np.ndarray         # (n_dev,) graph replays with device events
    unrecorded: np.ndarray      # (n_dev,) captured launches no replayed event matched,
                                # summed over its replays: device work the trace missed
    capture_files: int          # capture traces read beside the trace (or named)
    captured: int               # capture windows found in them and in the trace


@dataclass
class EfficiencyTable:
    """What the busy time achieves (``efficiency/``): model FLOPs, the peak and MFU per
    device and per (step, device), the MFU waterfall of each window (points of the
    window's time at peak, in the order of ``parts``, adding up to 100), and the roofline
    of every device-op-table row.  NaN marks a figure that is absent (``missing`` says
    why).  FLOPs are float64 (they pass 2**53)."""

    parts: list                    # waterfall part names: causes, small_gaps, peer_wait, …
    flops: np.ndarray              # (n_dev,) model FLOPs, cost-model figures
    flops_estimated: np.ndarray    # (n_dev,) model FLOPs estimated from shapes (custom calls)
    hw_flops: np.ndarray           # (n_dev,) hardware FLOPs (recomputation included)
    bytes: np.ndarray              # (n_dev,) bytes accessed, all memory spaces
    hbm_bytes: np.ndarray          # (n_dev,) of those, in HBM (NaN: no split in the trace)
    onchip_bytes: np.ndarray       # (n_dev,) on chip: CMEM, VMEM (NaN: no split)
    bytes_space: list              # per device: the bytes its roofline counts, "hbm" or "all"
    op_time: np.ndarray            # (n_dev,) int64 ps: summed op durations
    known_time: np.ndarray         # (n_dev,) int64 ps: of those, ops with a figure
    flops_source: list             # per device: where the figures came from ("" none)
    missing: list                  # per device: why a figure is absent ("" nothing)
    peak_flops: np.ndarray         # (n_dev,) FLOP/s, NaN unknown
    peak_bytes: np.ndarray         # (n_dev,) bytes/s, NaN unknown
    peak_dtype: list               # per device: the dtype whose peak is used
    peak_source: list              # per device: trace, datasheet:<row>, option, computed from …
    device_model: list             # per device: the accelerator ("" unknown)
    mfu: np.ndarray                # (n_dev,) over its steps window (DeviceTable.window)
    waterfall: np.ndarray          # (n_dev, n_parts) points, NaN rows: none
    step_flops: np.ndarray         # (n_steps, n_dev) model FLOPs the step launched
    step_mfu: np.ndarray           # (n_steps, n_dev)
    step_waterfall: np.ndarray     # (n_steps, n_dev, n_parts) float32 points
    # roofline per DeviceOpTable row (same order)
    row_flops: np.ndarray          # model FLOPs (estimated included)
    row_hw_flops: np.ndarray       # what the roofline plots: hardware FLOPs
    row_bytes: np.ndarray
    row_hbm_bytes: np.ndarray      # of those, the roofline's HBM bytes (NaN: no split): each
                                   # op's listed HBM bytes, all its bytes where it lists none
    row_bytes_space: np.ndarray    # int8: 1 the roofline counts HBM bytes, 0 all bytes
    row_matmul: np.ndarray         # bool: matmul-class ops hold most of its FLOPs
    row_flops_per_s: np.ndarray    # achieved, over the row's summed op time
    row_bytes_per_s: np.ndarray
    row_intensity: np.ndarray      # FLOPs / byte
    row_attainable: np.ndarray     # min(peak, intensity × bandwidth) FLOP/s
    row_efficiency: np.ndarray     # share of the roofline: the largest utilisation (xprof's)
    row_bound: np.ndarray          # int8 Bound (MEMORY: any memory roof, see row_bound_by)
    row_fp32_time: np.ndarray      # ps of its fp32 matmul-class ops
    # roofline of each device's ops together (xprof's program-level figure)
    intensity: np.ndarray          # (n_dev,)
    attainable: np.ndarray
    roofline_efficiency: np.ndarray
    bound: np.ndarray              # (n_dev,) int8 Bound
    ridge: np.ndarray              # (n_dev,) FLOPs/byte where the roofs meet
    # where the matmuls ran in fp32: the device's fastest lower-precision matrix peak
    fast_peak: np.ndarray = field(default_factory=lambda: np.zeros(0))   # FLOP/s, NaN none
    fast_dtype: list = field(default_factory=list)                       # "tf32", "bf16"…
    # the points the exposed collectives take in each waterfall (peer wait and transfer
    # together): a run's join splits them again (``waterfall.with_peer_wait``)
    coll_points: np.ndarray = field(default_factory=lambda: np.zeros(0))       # (n_dev,)
    step_coll_points: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    # the on-chip roofs (xprof's): per ``efficiency.roofline.RESOURCES`` utilisation =
    # rate ÷ that resource's peak, bound_by the largest (int8 index, −1 unknown); on-chip
    # bytes and roofs per ``opcosts.ONCHIP_RW`` (cmem_read, cmem_write, vmem_read,
    # vmem_write), NaN where the trace has no split or the plane no such roof
    onchip_peak: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))  # bytes/s
    onchip_counted: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), bool))
    onchip_rw: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))    # bytes
    utilisation: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))  # (n_dev, 6)
    bound_by: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    row_onchip_rw: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    row_utilisation: np.ndarray = field(default_factory=lambda: np.zeros((0, 6)))
    row_bound_by: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    # per device: every lower precision whose matrix peak beats its fp32 one ("tf32",
    # "bf16", "fp16"), so a fix names only what the chip has (a V100 has neither TF32
    # nor bf16 tensor cores)
    fast_dtypes: list = field(default_factory=list)
    # per device: ops outside collectives with no cost figure hold ≥ LOWER_BOUND_SHARE of
    # the op time, so the MFU (which counts none of their FLOPs) is a lower bound
    mfu_lower_bound: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # per device: what named a part whose own name does not ("gfx942, 304 CUs, 192 GB";
    # "" where the name says, or nothing does)
    device_identified_by: list = field(default_factory=list)
    # per (device, format of ``format_names``): matmul-class FLOPs and ps, the FLOP/s the
    # format runs at on the device (NaN unknown; the format it is converted to where the
    # part has no units for it, ``format_peak_dtype``) and its part of the MFU
    format_names: list = field(default_factory=list)
    format_flops: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    format_time: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    format_peak: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    format_peak_dtype: list = field(default_factory=list)
    format_mfu: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    # per device: the roofline's bytes (HBM where split) ÷ (window × peak bandwidth), NaN
    # unknown: the memory-bound device's MFU (GUIDE §4 "Memory-bound work"); and whether
    # its matmul-class work together sits below the ridge point (decode)
    bandwidth_utilisation: np.ndarray = field(default_factory=lambda: np.zeros(0))
    matmul_memory_bound: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    # CUDA/HIP graph replays and what of them matched their capture
    # (None: no replay with device events)
    graphs: GraphSummary | None = None

    def part(self, name: str) -> int:
        return self.parts.index(name)


@dataclass
class Finding:
    kind: FindingKind
    title: str
    detail: str
    fix: str
    confidence: str            # "high" | "medium"
    time_lost_ns: int          # over the trace (sums of the cited gaps as reported, in ns)
    time_lost_ns_per_step: int
    steps: list                # step ids it hits
    gaps: np.ndarray           # int32 gap rows it cites (all of them)
    ranges: list = field(default_factory=list)   # [(start ns, end ns)] cited when not gaps
    events: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # cited events
    extra: dict = field(default_factory=dict)    # kind-specific figures (numbers, names)


@dataclass
class Diagnosis:
    source: dict               # path, format, events, devices, origin_ps, hostnames
    threshold_us: float
    kernels_only: bool
    devices: DeviceTable
    steps: StepNumbers
    gaps: GapTable
    detail: HostOps
    annotations: AnnotationTable
    findings: list             # [Finding], most time lost first
    small_total: int           # ps in gaps under the threshold, all devices
    warnings: list
    refs: EventRefs
    track_labels: list         # label of every trace track
    # None only in results made before these tables existed (disk cache)
    compilations: CompilationTable | None = None
    transfers: TransferTable | None = None
    ops: OpTable | None = None
    device_ops: DeviceOpTable | None = None
    # collective op instances on this host's devices (``collectives.py``): what the join
    # across the participants of a run reads
    collectives: CollectiveTable | None = None
    # what the busy time achieves (FLOPs, MFU, waterfall, roofline); None where no op
    # carried a cost figure's inputs, or in old results
    efficiency: EfficiencyTable | None = None

    def nbytes(self) -> int:
        return _nbytes(self)

    def gap_cause_names(self) -> list:
        return [C.ALL[c] for c in self.gaps.cause.tolist()]
