"""Kineto (``*.pt.trace.json``) bytes from plain event dicts, and a ``Trace`` from them
without a file.

Events are dicts as in a real trace: ``ph``, ``cat``, ``name``, ``pid``, ``tid``, ``ts``
and ``dur`` in µs, ``args`` (``correlation``, ``External id``, ``device``, ``stream``…).
A ``ts``/``dur`` given as ``Ns(n)`` (integer nanoseconds) is written as µs with three
decimals, exactly as Kineto writes them; ints and floats are written as given.

    >>> from tb_perfdiag.testing.kineto import load_kineto
    >>> trace = load_kineto([
    ...     {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
    ...      "ts": 0, "dur": 50},
    ...     {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10,
    ...      "dur": 30, "args": {"device": 0, "stream": 7}}])
    >>> [d.name for d in trace.devices]
    ['GPU 0']
"""
from __future__ import annotations

import io
import json

from ..trace import kineto as _reader

_J = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))

# cbid of the CUDA runtime calls in real traces
CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaStreamSynchronize": 131,
        "cudaMemsetAsync": 51, "cudaStreamIsCapturing": 317, "cudaEventRecord": 135,
        "cudaStreamWaitEvent": 147, "cudaGetDevice": 17, "cudaEventQuery": 138}

# ``deviceProperties`` entry of an A100, as PyTorch 2.x writes it
A100 = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85051572224,
        "computeMajor": 8, "computeMinor": 0, "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
        "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
        "sharedMemPerMultiprocessor": 167936, "numSms": 108, "sharedMemPerBlockOptin": 166912}


class Ns(int):
    """A time in integer nanoseconds, written as µs with nanosecond decimals.

    >>> encode({"ts": Ns(1500)})
    '{"ts":1.500}'
    """


def fts(ns: int) -> str:
    """µs with nanosecond decimals, as Kineto writes them: ``fts(1500) == "1.500"``."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def encode(event: dict) -> str:
    """One event as compact JSON, keys in the given order; ``Ns`` values as µs.

    >>> encode({"ph": "X", "name": "aten::mm", "ts": Ns(2000), "dur": 3})
    '{"ph":"X","name":"aten::mm","ts":2.000,"dur":3}'
    """
    return "{" + ",".join(f"{_J.encode(k)}:{fts(v) if isinstance(v, Ns) else _J.encode(v)}"
                          for k, v in event.items()) + "}"


def process_events(pid, name: str, label: str, sort_index: int, ts=Ns(0)) -> list:
    """The ``M`` events that name a process: its name, its label ("CPU", "GPU 0"), its
    sort index.

    >>> [e["name"] for e in process_events(0, "python", "GPU 0", 16777216)]
    ['process_name', 'process_labels', 'process_sort_index']
    """
    head = {"ph": "M", "name": "", "ts": ts, "pid": pid, "tid": 0}
    return [dict(head, name="process_name", args={"name": name}),
            dict(head, name="process_labels", args={"labels": label}),
            dict(head, name="process_sort_index", args={"sort_index": sort_index})]


def thread_events(pid, tid, name: str, sort_index: int, ts=Ns(0)) -> list:
    """The ``M`` events that name a thread (or a GPU stream: ``name="stream 7 "``).

    >>> thread_events(1, 2, "python main", 2)[0]["args"]
    {'name': 'python main'}
    """
    head = {"ph": "M", "name": "", "ts": ts, "pid": pid, "tid": tid}
    return [dict(head, name="thread_name", args={"name": name}),
            dict(head, name="thread_sort_index", args={"sort_index": sort_index})]


def footer_events(t0_ns: int, span_ns: int) -> list:
    """The profiler's own events at the end of a trace: its span and window markers.

    >>> footer_events(0, 1000)[0]["cat"]
    'Trace'
    """
    t0 = Ns(t0_ns)
    return [{"ph": "X", "cat": "Trace", "ts": t0, "dur": Ns(span_ns), "pid": "Spans",
             "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)",
             "args": {"Op count": 0}},
            {"name": "process_sort_index", "ph": "M", "ts": t0, "pid": "Spans", "tid": 0,
             "args": {"sort_index": 536870912}},
            {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
             "tid": "Trace PyTorch Profiler", "ts": t0},
            {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
             "ts": Ns(t0_ns + span_ns)}]


class KinetoJsonWriter:
    """Streams one trace into a binary file object: the top-level keys of ``header``,
    then ``traceEvents`` (one per line, written chunk by chunk), then ``traceName``.

    >>> f = io.BytesIO()
    >>> w = KinetoJsonWriter(f, {"schemaVersion": 1})
    >>> w.write([{"ph": "X", "name": "a", "ts": 0, "dur": 1}])
    >>> w.close()
    >>> f.getvalue()
    b'{"schemaVersion":1,"traceEvents":[\\n{"ph":"X","name":"a","ts":0,"dur":1}\\n]}\\n'
    """

    def __init__(self, f, header: dict):
        self.f = f
        self.first = True
        head = _J.encode(header)[:-1] + "," if header else "{"
        f.write((head + '"traceEvents":[\n').encode())

    def write(self, events):
        """Events as dicts or already encoded strings."""
        if not events:
            return
        s = ",\n".join(e if isinstance(e, str) else encode(e) for e in events)
        if not self.first:
            s = ",\n" + s
        self.first = False
        self.f.write(s.encode())

    def close(self, trace_name: str | None = None):
        tail = "\n]" + (f',\n"traceName":{_J.encode(trace_name)}' if trace_name is not None
                        else "")
        self.f.write((tail + "}\n").encode())


def kineto_bytes(events, trace_name: str | None = None, **header) -> bytes:
    """The bytes of a trace: ``header`` keys (``deviceProperties``,
    ``baseTimeNanoseconds``, ``distributedInfo``…) then ``traceEvents``.

    >>> kineto_bytes([], schemaVersion=1)
    b'{"schemaVersion":1,"traceEvents":[\\n\\n]}\\n'
    """
    f = io.BytesIO()
    w = KinetoJsonWriter(f, header)
    w.write(list(events))
    w.close(trace_name)
    return f.getvalue()


def load_kineto(events, path: str = "memory.pt.trace.json", **header):
    """A ``Trace`` read by the real Kineto reader from these events, without a file.

    >>> t = load_kineto([{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1,
    ...                   "tid": 1, "ts": 0, "dur": 5}])
    >>> t.n_events, t.event_name(0)
    (1, 'aten::add')
    """
    return _reader.read(path, kineto_bytes(events, **header))
