"""XSpace (``*.xplane.pb``) bytes from plain Python values, and a ``Trace`` from them
without a file.

``XSpaceWriter`` adds planes; the ``PlaneBuilder`` of each plane interns event and stat
metadata (ids are plane-local, numbered from 1 in order of first use), adds lines and
events and sets stats.  A stat is ``(name, type, value)`` with type ``i`` int64, ``u``
uint64, ``d`` double, ``s`` str, ``b`` bytes or ``r`` ref (the value is the name of
another stat metadata entry); ``stat_list`` also takes a dict and infers the type.

    >>> w = XSpaceWriter()
    >>> gpu = w.plane("/device:GPU:0", id=1)
    >>> line = gpu.line(7, "Stream #7", timestamp_ns=0)
    >>> gpu.event(line, "gemm", offset_ps=0, duration_ps=5_000_000,
    ...           stats=[("correlation_id", "u", 1)])
    >>> load_xspace(w).devices[0].name
    'GPU 0'

The wire-format helpers (``varint``, ``pb_len``…) write messages by hand where a
message class is too slow or absent (the Hlo Proto, lines streamed in chunks).
"""
from __future__ import annotations

from ..trace import xspace as _reader
from ..trace.xplane_pb import MemoryAccessBreakdown, XLine, XPlane, XSpace

__all__ = ["XSpace", "XPlane", "XLine", "Ref", "U64", "stat_list", "PlaneBuilder",
           "XSpaceWriter", "load_xspace", "hlo_proto", "varint", "pb_len", "pb_str", "pb_int"]


class Ref(str):
    """A ref-valued stat (``XStat.ref_value``): ``{"hlo_module": Ref("jit_step")}``."""


class U64(int):
    """A uint64-valued stat: ``{"devcap_num_sms": U64(108)}``."""


def stat_list(stats) -> list:
    """``[(name, type, value)]`` from a dict (type from the value: ``Ref`` → r, ``U64`` →
    u, int → i, float → d, str → s, bytes → b) or from such a list already.

    >>> stat_list({"step_num": 3, "hlo_module": Ref("m"), "tf_op": "dense"})
    [('step_num', 'i', 3), ('hlo_module', 'r', 'm'), ('tf_op', 's', 'dense')]
    """
    if not isinstance(stats, dict):
        return list(stats or ())
    out = []
    for name, v in stats.items():
        typ = ("r" if isinstance(v, Ref) else "s" if isinstance(v, str) else
               "b" if isinstance(v, bytes) else "u" if isinstance(v, U64) else
               "d" if isinstance(v, float) else "i")
        out.append((name, typ, v))
    return out


# ---- protobuf wire format by hand ------------------------------------------------------

def varint(n: int) -> bytes:
    """Base-128 varint; a negative int64 as its two's complement (ten bytes)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_len(num: int, payload: bytes) -> bytes:
    """A length-delimited field (message, string, bytes) number ``num``."""
    return varint((num << 3) | 2) + varint(len(payload)) + payload


def pb_str(num: int, s: str) -> bytes:
    return pb_len(num, s.encode())


def pb_int(num: int, v: int) -> bytes:
    return varint(num << 3) + varint(v)


def hlo_proto(module: str, instructions) -> bytes:
    """A minimal serialized HloProto: hlo_module{name, entry_computation_name,
    computations[{name, instructions[{name, opcode, metadata{op_type, op_name,
    source_file, source_line}}]}]}.  ``instructions``: (name, opcode, op_type, op_name,
    source file, source line); empty strings are left out.

    >>> from tb_perfdiag.trace.hlo import hlo_op_metadata
    >>> raw = hlo_proto("m", [("fusion.1", "fusion", "dot", "train/dense", "", 0)])
    >>> hlo_op_metadata("m(1)", raw)[("m", 1, "fusion.1")]
    ('train/dense', 'dot', '', 'fusion')
    """
    ins = []            # joined once: += on bytes is quadratic in 100k-op modules
    for name, opcode, op_type, op_name, src, line in instructions:
        md = b""
        if op_type:
            md += pb_str(1, op_type)
        if op_name:
            md += pb_str(2, op_name)
        if src:
            md += pb_str(3, src) + pb_int(4, line)
        ins.append(pb_len(2, pb_str(1, name) + pb_str(2, opcode) + (pb_len(7, md) if md else b"")))
    comp = pb_str(1, "main.1") + b"".join(ins)
    mod = pb_str(1, module) + pb_str(2, "main.1") + pb_len(3, comp)
    return pb_len(1, mod)


# ---- message building ------------------------------------------------------------------

class PlaneBuilder:
    """Interns event/stat metadata of one XPlane, adds lines and events, sets stats.

    >>> pb = PlaneBuilder(XPlane(name="/host:CPU"))
    >>> ln = pb.line(1, "python", timestamp_ns=0, display_name="python")
    >>> pb.event(ln, "train_step", 0, 10**9, stats={"step_num": 1, "_r": 1})
    >>> sorted(m.name for m in pb.pl.stat_metadata.values())
    ['_r', 'step_num']
    """

    def __init__(self, plane):
        self.pl = plane
        self.smd: dict = {}
        self.emd: dict = {}

    @staticmethod
    def _new(ids: dict, entries, name: str):
        """A new metadata entry for ``name`` with the next plane-local id."""
        i = ids[name] = len(ids) + 1
        m = entries[i]
        m.id = i
        m.name = name
        return m

    def sid(self, name: str) -> int:
        """The plane-local id of stat metadata ``name``."""
        i = self.smd.get(name)
        return i if i is not None else self._new(self.smd, self.pl.stat_metadata, name).id

    def set_stat(self, st, name, typ, val):
        st.metadata_id = self.sid(name)
        if typ == "i":
            st.int64_value = int(val)
        elif typ == "u":
            st.uint64_value = int(val)
        elif typ == "d":
            st.double_value = float(val)
        elif typ == "s":
            st.str_value = val
        elif typ == "b":
            st.bytes_value = val
        elif typ == "r":
            st.ref_value = self.sid(val)
        else:
            raise ValueError(typ)

    def eid(self, name: str, display: str = "", md_stats=()) -> int:
        """The plane-local id of event metadata ``name``; ``display`` and ``md_stats``
        are set when it is new."""
        i = self.emd.get(name)
        if i is not None:
            return i
        m = self._new(self.emd, self.pl.event_metadata, name)
        if display:
            m.display_name = display
        for st in stat_list(md_stats):
            self.set_stat(m.stats.add(), *st)
        return m.id

    def stats(self, container, stats):
        """Append ``stats`` (dict or triples) to a repeated XStat field."""
        for st in stat_list(stats):
            self.set_stat(container.add(), *st)

    def line(self, id: int, name: str, timestamp_ns: int, display_name: str = ""):
        """A new XLine of this plane."""
        ln = self.pl.lines.add()
        ln.id = id
        ln.name = name
        if display_name:
            ln.display_name = display_name
        ln.timestamp_ns = timestamp_ns
        return ln

    def event(self, line, name: str, offset_ps: int, duration_ps: int, stats=(),
              display: str = "", md_stats=()):
        """An XEvent on ``line``; its metadata (display name, metadata stats) is set on
        the first use of ``name``."""
        x = line.events.add()
        x.metadata_id = self.eid(name, display, md_stats)
        x.offset_ps = offset_ps
        x.duration_ps = duration_ps
        self.stats(x.stats, stats)


class XSpaceWriter:
    """An XSpace built plane by plane.

    >>> w = XSpaceWriter()
    >>> env = w.plane("Task Environment", stats=[("profile_start_time", "u", 10**18)])
    >>> w.to_bytes(hostnames=["host0"])[:1]
    b'\\n'
    """

    def __init__(self):
        self.space = XSpace()

    def plane(self, name: str, id: int = 0, stats=()) -> PlaneBuilder:
        pl = self.space.planes.add()
        pl.id = id
        pl.name = name
        pb = PlaneBuilder(pl)
        pb.stats(pl.stats, stats)
        return pb

    def to_bytes(self, hostnames=()) -> bytes:
        del self.space.hostnames[:]
        self.space.hostnames.extend(hostnames)
        return self.space.SerializeToString(deterministic=True)


def memory_breakdown(*accesses) -> bytes:
    """A TPU op's ``memory_access_breakdown`` stat: (operation type (1 read, 2 write),
    memory space (1 HBM, 2 CMEM, 3 VMEM), bytes) per access, serialized."""
    m = MemoryAccessBreakdown()
    for op, space, n in accesses:
        a = m.memory_accessed.add()
        a.operation_type, a.memory_space, a.bytes_accessed = op, space, n
    return m.SerializeToString()


def load_xspace(space, path: str = "memory.xplane.pb", hostnames=("localhost",)):
    """A ``Trace`` read by the real XSpace reader, without a file; ``space`` is bytes, an
    ``XSpace`` message or an ``XSpaceWriter``.

    >>> w = XSpaceWriter()
    >>> pb = w.plane("/host:CPU")
    >>> pb.event(pb.line(1, "python", 0), "work", 0, 10**6)
    >>> load_xspace(w).event_name(0)
    'work'
    """
    if isinstance(space, XSpaceWriter):
        space = space.to_bytes(hostnames)
    elif not isinstance(space, (bytes, bytearray)):
        space = space.SerializeToString(deterministic=True)
    return _reader.read(path, bytes(space))
