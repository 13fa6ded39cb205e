"""Capture notes: what about the capture itself bends the figures, each said with what it
does to them (devices that ran only copies, device work outside every step, steps with
no device work, graph launches whose kernels are missing, device clocks ahead of their
launches, a last step cut by the capture's end, records the profiler said it dropped or
device tracing it stopped early).  Pure: numbers in, sentences out; the
renderers show them as ``warnings``."""
from __future__ import annotations

import numpy as np

from ...units import duration_ps
from ...trace.model import EventKind as K, Trace, isin_few
from ..result import DeviceTable, StepNumbers
from .windows import AFTER_LAST, BEFORE_FIRST

_BLOCK = 1 << 20
# a device op that starts this much before the host call that launched it: the clocks
# disagree (a real launch precedes its op by the launch latency)
CLOCK_SLACK_PS = 1_000_000
# what the note on graph launches without their kernels says (a run's trust reads it)
GRAPHS_UNDER_RECORDED = "graph launches have no device work in the trace"


_ms = duration_ps          # the one unit rule (units.py)


def _ids(ids: list, most: int = 8) -> str:
    more = f" and {len(ids) - most} more" if len(ids) > most else ""
    return ", ".join(str(i) for i in ids[:most]) + more


def kernels_per_device(trace: Trace, n_dev: int) -> np.ndarray:
    """Kernels on each device's tracks, counted a block of a track at a time."""
    out = np.zeros(n_dev, np.int64)
    tracks = np.flatnonzero(trace.track_device >= 0)
    for t, (lo, hi) in zip(tracks.tolist(), trace.track_slices(tracks)):
        for a in range(lo, hi, _BLOCK):
            out[trace.track_device[t]] += int(np.count_nonzero(
                trace.kind[a:min(a + _BLOCK, hi)] == K.KERNEL))
    return out


def capture_notes(trace: Trace, devices: DeviceTable, steps: StepNumbers,
                  origin: np.ndarray, threshold_ps: int) -> list:
    """The notes on this capture, most consequential first."""
    out = []
    on = np.flatnonzero(devices.ops > 0)
    kern = kernels_per_device(trace, len(devices))
    for d in on.tolist():
        if kern[d] == 0:
            out.append(f"{devices.name[d]} ran only copies ({int(devices.ops[d])} memcpy/"
                       f"memset, no kernel): its duty cycle and idle are copy traffic, not "
                       f"compute; compare it with the devices that compute with care")
    n = len(steps)
    whole = steps.source == "whole_trace"
    if n and not whole:
        for d in on.tolist():
            inside = int(steps.busy[:, d].sum())
            outside = int(devices.busy[d]) - inside
            if outside >= threshold_ps:
                out.append(f"{devices.name[d]}: {_ms(outside)} of its {_ms(devices.busy[d])} "
                           f"busy time ran outside every step: it counts in the device's "
                           f"duty cycle, in no step's")
        none = (steps.ids[~(steps.busy[:, on] > 0).any(axis=1)].tolist()
                if on.size else [])
        if none and on.size:
            out.append(f"{len(none)} of {n} steps ran no device work (step(s) {_ids(none)}): "
                       f"their duty cycle is 0 and their idle is the whole step")
        end = trace.last_end() if trace.n_events else 0
        if n >= 2 and int(steps.host_end[-1]) >= end - 1_000_000:
            lengths = steps.host_end - steps.host_start
            if lengths[-1] < 0.75 * float(np.median(lengths[:-1])):
                out.append(f"the last step ({int(steps.ids[-1])}) ends where the capture "
                           f"ends and is shorter than the others: it was likely cut; its "
                           f"figures are partial")
    out += _graph_launches(trace, origin)
    out += _clock_ahead(trace, devices, origin)
    return _losses(trace, devices) + out


def _graph_launches(trace: Trace, origin: np.ndarray) -> list:
    """Graph launches that no device op in the trace traces back to."""
    launches = np.flatnonzero(trace.kind == K.LAUNCH)
    if launches.size == 0:
        return []
    names = np.unique(trace.name[launches])
    graph = [int(x) for x in names.tolist() if "graphlaunch" in trace.strings[x].lower()]
    if not graph:
        return []
    gl = launches[isin_few(trace.name[launches], graph)]
    dev = np.flatnonzero(trace.is_device_activity())
    src = origin[dev]
    fed = np.isin(gl, src[src >= 0])
    empty = int((~fed).sum())
    from ..efficiency.graphs import under_recorded_notes
    more = under_recorded_notes(trace)
    if not empty:
        return more
    return [f"{empty} of {gl.size} {GRAPHS_UNDER_RECORDED} (the "
            f"profiler did not record the graphs' kernels): device work the trace did not "
            f"see; the device looks idle while they ran, and that idle is not the host's"] + more


def _clock_ahead(trace: Trace, devices: DeviceTable, origin: np.ndarray) -> list:
    """Devices whose ops start before the host calls that launched them."""
    out = []
    for d in np.flatnonzero(devices.ops > 0).tolist():
        ops = trace.activity_of(d)
        # a block of ops at a time: at 20 M ops the launches' and ops' times and their
        # differences over all of them were 0.2 GB on top of the analysis' peak (40 M-event
        # XSpace: 3,032 MB where it had been 2,856)
        launched = early = 0
        most = None
        for i in range(0, ops.shape[0], _BLOCK):
            o = ops[i:i + _BLOCK]
            src = origin[o]
            ok = src >= 0
            if not ok.any():
                continue
            lead = trace.ts[src[ok]].astype(np.int64, copy=False) - \
                trace.ts[o[ok]].astype(np.int64, copy=False)
            launched += int(ok.sum())
            early += int(np.count_nonzero(lead > CLOCK_SLACK_PS))
            top = int(lead.max())
            most = top if most is None else max(most, top)
        if early:
            out.append(f"{devices.name[d]}: {early} of its {launched} "
                       f"launched ops start before the host call that launched them (by up "
                       f"to {_ms(most)}): its clock is offset from the host's, so "
                       f"waits measured against host calls are off by as much")
    return out


def _losses(trace: Trace, devices: DeviceTable) -> list:
    """What the profiler said it lost while recording (``Trace.metadata["losses"]``, read
    from its own log by the reader): first, since it bends every figure."""
    lost = trace.metadata.get("losses")
    if not lost:
        return []
    out = []
    n, why = int(lost.get("dropped") or 0), [str(w) for w in lost.get("why") or []]
    if n or not lost.get("stopped_early"):
        what = f"{n:,} records" if n else "records"
        because = f" ({'; '.join(why)})" if why else ""
        out.append(f"the profiler dropped {what} while recording{because}: device ops, "
                   f"copies or the launch calls behind them are missing from the trace, so "
                   f"the device looks idle where they ran — idle may be overstated and "
                   f"duty cycle understated, and some gaps' causes are wrong; a larger "
                   f"profiler buffer or a shorter capture keeps them")
    if lost.get("stopped_early"):
        limit = f" ({lost['limit']} buffers)" if lost.get("limit") else ""
        on = np.flatnonzero(devices.ops > 0)
        last = ""
        if on.size and trace.n_events:
            end, hi = trace.last_end(), int(devices.hi[on].max())
            if end > hi:
                last = (f"; no device op ends after {_ms(hi)} of the {_ms(end)} capture, so "
                        f"the last {_ms(end - hi)} shows the devices idle whatever they did")
        out.append(f"the profiler stopped recording device activity before the capture "
                   f"ended: its GPU buffer limit was reached{limit}{last}; steps after the "
                   f"stop have no device work in the trace and their idle is not real — "
                   f"raise the limit or capture fewer steps")
    return out


def startup_note(devices: DeviceTable, steps: StepNumbers, kinds: list) -> str | None:
    """How much of the capture start-up takes (on the device it idles most), what it is
    (``kinds``: the start-up findings' subjects) and which figures leave it out."""
    from .. import causes as C
    i = C.ALL.index(C.STARTUP)
    if devices.idle_by_cause.shape[1] <= i:
        return None
    st = devices.idle_by_cause[:, i]
    if not (st > 0).any():
        return None
    d = int(np.argmax(st))
    a, b = devices.window(d)
    w = max(b - a, 1)
    what = f": {'; '.join(kinds)} —" if kinds else ""
    if steps.source == "whole_trace":
        left = ("the capture is one window: its duty cycle and idle show it as start-up, "
                "and the findings count it once, never per step")
    else:
        left = ("the typical step, the duty cycle over the steps and the findings' per-step "
                "costs leave it out; the capture's whole-window figures (idle by cause, the "
                "steps that hold it) show it as start-up")
    return (f"start-up{what} takes {_ms(int(st[d]))} of the {_ms(w)} capture on "
            f"{devices.name[d]} ({100 * int(st[d]) / w:.0f}%): paid once per run, not by "
            f"the loop; {left}")


def outside_step_gaps(devices: DeviceTable, gap_device: np.ndarray, gap_step: np.ndarray,
                      gap_len: np.ndarray, source: str) -> list:
    """The gaps that lie in no step (``steps.gap_steps``: before the device's first step
    window, after its last): their idle is in no step's figures and the findings count it
    outside every step.  Per side, the device with the most (idle is never summed over
    devices)."""
    if source == "whole_trace" or not gap_step.size:
        return []
    out = []
    for code, where in ((BEFORE_FIRST, "before the first step"),
                        (AFTER_LAST, "after the last step")):
        sel = gap_step == code
        if not sel.any():
            continue
        per = np.bincount(gap_device[sel], weights=gap_len[sel], minlength=len(devices))
        d = int(np.argmax(per))
        on = int(np.count_nonzero(per))
        out.append(f"{int(sel.sum())} gap(s) lie {where} ({_ms(per[d])} of idle on "
                   f"{devices.name[d]}" + (f", the most of {on} devices" if on > 1 else "")
                   + "): they are in no step's figures, and findings count them outside "
                   "every step")
    return out
