"""XSpace message classes built at run time from a hand-written descriptor.

Generated ``*_pb2`` modules pin the protobuf runtime major version; building the
descriptor here works on every protobuf from 6.31 through 7.x.  Field numbers are
those of ``tsl/profiler/protobuf/xplane.proto``.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PKG = "tb_perfdiag.xplane"
_F = descriptor_pb2.FieldDescriptorProto

# (name, number, type, label, type_name or None, oneof index or None)
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
_I64, _U64, _DBL, _STR, _BYTES, _MSG = (
    _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_DOUBLE, _F.TYPE_STRING, _F.TYPE_BYTES, _F.TYPE_MESSAGE)

_MESSAGES = {
    "XSpace": [("planes", 1, _MSG, _REP, "XPlane", None),
               ("errors", 2, _STR, _REP, None, None),
               ("warnings", 3, _STR, _REP, None, None),
               ("hostnames", 4, _STR, _REP, None, None)],
    "XPlane": [("id", 1, _I64, _OPT, None, None),
               ("name", 2, _STR, _OPT, None, None),
               ("lines", 3, _MSG, _REP, "XLine", None),
               ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
               ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
               ("stats", 6, _MSG, _REP, "XStat", None)],
    "XLine": [("id", 1, _I64, _OPT, None, None),
              ("display_id", 10, _I64, _OPT, None, None),
              ("name", 2, _STR, _OPT, None, None),
              ("display_name", 11, _STR, _OPT, None, None),
              ("timestamp_ns", 3, _I64, _OPT, None, None),
              ("duration_ps", 9, _I64, _OPT, None, None),
              ("events", 4, _MSG, _REP, "XEvent", None)],
    "XEvent": [("metadata_id", 1, _I64, _OPT, None, None),
               ("offset_ps", 2, _I64, _OPT, None, 0),
               ("num_occurrences", 5, _I64, _OPT, None, 0),
               ("duration_ps", 3, _I64, _OPT, None, None),
               ("stats", 4, _MSG, _REP, "XStat", None)],
    "XStat": [("metadata_id", 1, _I64, _OPT, None, None),
              ("double_value", 2, _DBL, _OPT, None, 0),
              ("uint64_value", 3, _U64, _OPT, None, 0),
              ("int64_value", 4, _I64, _OPT, None, 0),
              ("str_value", 5, _STR, _OPT, None, 0),
              ("bytes_value", 6, _BYTES, _OPT, None, 0),
              ("ref_value", 7, _U64, _OPT, None, 0)],
    "XEventMetadata": [("id", 1, _I64, _OPT, None, None),
                       ("name", 2, _STR, _OPT, None, None),
                       ("display_name", 4, _STR, _OPT, None, None),
                       ("metadata", 3, _BYTES, _OPT, None, None),
                       ("stats", 5, _MSG, _REP, "XStat", None),
                       ("child_id", 6, _I64, _REP, None, None)],
    "XStatMetadata": [("id", 1, _I64, _OPT, None, None),
                      ("name", 2, _STR, _OPT, None, None),
                      ("description", 3, _STR, _OPT, None, None)],
    # an op's ``memory_access_breakdown`` stat (bytes): xprof's ``OpMetrics.
    # MemoryAccessBreakdown`` (op_metrics.proto).  ``operation_type`` (READ 1, WRITE 2)
    # is an enum there and ``memory_space`` (HBM 1, CMEM 2, VMEM 3) a uint64: both
    # varints, read here as uint64
    "MemoryAccessBreakdown": [("memory_accessed", 1, _MSG, _REP, "MemoryAccessed", None)],
    "MemoryAccessed": [("operation_type", 1, _U64, _OPT, None, None),
                       ("memory_space", 2, _U64, _OPT, None, None),
                       ("bytes_accessed", 3, _U64, _OPT, None, None)],
}
_ONEOFS = {"XEvent": ["data"], "XStat": ["value"]}
_MAP_ENTRIES = {"XPlane": [("EventMetadataEntry", "XEventMetadata"),
                           ("StatMetadataEntry", "XStatMetadata")]}


def _add_fields(msg: descriptor_pb2.DescriptorProto, fields) -> None:
    for name, number, ftype, label, type_name, oneof in fields:
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{_PKG}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof


def _build_file() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(name="tb_perfdiag/xplane.proto", package=_PKG,
                                             syntax="proto3")
    for name, fields in _MESSAGES.items():
        msg = fdp.message_type.add(name=name)
        _add_fields(msg, fields)
        for oneof in _ONEOFS.get(name, []):
            msg.oneof_decl.add(name=oneof)
        for entry_name, value_type in _MAP_ENTRIES.get(name, []):
            entry = msg.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            _add_fields(entry, [("key", 1, _I64, _OPT, None, None),
                                ("value", 2, _MSG, _OPT, value_type, None)])
    return fdp


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_build_file())


def _cls(name: str):
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName(f"{_PKG}.{name}"))


XSpace = _cls("XSpace")
XPlane = _cls("XPlane")
XLine = _cls("XLine")
XEvent = _cls("XEvent")
XStat = _cls("XStat")
XEventMetadata = _cls("XEventMetadata")
XStatMetadata = _cls("XStatMetadata")
MemoryAccessBreakdown = _cls("MemoryAccessBreakdown")
