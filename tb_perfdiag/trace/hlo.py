"""Reads op metadata out of serialized ``HloProto`` bytes without a generated hlo.proto.

Field numbers: HloProto.hlo_module=1 → HloModuleProto.computations=3 →
HloComputationProto.instructions=2 → HloInstructionProto{name=1, opcode=2,
metadata=7} → OpMetadata{op_type=1, op_name=2, source_file=3, source_line=4}.
"""
from __future__ import annotations

import re

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

_MODULE_NAME = re.compile(r"^(.*)\((-?\d+)\)$")


def message_class(pkg: str, spec: dict, root: str):
    """The upb message class ``root`` of a proto3 file ``pkg`` built at run time from
    ``spec`` ({message: [(field, number, type, message type or None, repeated)]}): only
    the fields read, with no generated code pinning the protobuf runtime's version."""
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name=pkg.replace(".", "/") + ".proto",
                                             package=pkg, syntax="proto3")
    for name, fields_ in spec.items():
        m = fdp.message_type.add(name=name)
        for fname, num, ftype, tname, rep in fields_:
            f = m.field.add(name=fname, number=num, type=ftype,
                            label=F.LABEL_REPEATED if rep else F.LABEL_OPTIONAL)
            if tname:
                f.type_name = f".{pkg}.{tname}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{pkg}.{root}"))


def _hlo_classes():
    """Just the HloProto fields we read, as upb message classes (unknown fields skipped)."""
    F = descriptor_pb2.FieldDescriptorProto
    spec = {
        "HloProto": [("hlo_module", 1, F.TYPE_MESSAGE, "HloModuleProto", False)],
        "HloModuleProto": [("computations", 3, F.TYPE_MESSAGE, "HloComputationProto", True)],
        "HloComputationProto": [("instructions", 2, F.TYPE_MESSAGE, "HloInstructionProto", True)],
        "HloInstructionProto": [("name", 1, F.TYPE_STRING, None, False),
                                ("opcode", 2, F.TYPE_STRING, None, False),
                                ("metadata", 7, F.TYPE_MESSAGE, "OpMetadata", False)],
        "OpMetadata": [("op_type", 1, F.TYPE_STRING, None, False),
                       ("op_name", 2, F.TYPE_STRING, None, False),
                       ("source_file", 3, F.TYPE_STRING, None, False),
                       ("source_line", 4, F.TYPE_INT32, None, False)],
    }
    return message_class("tb_perfdiag.hlo", spec, "HloProto")


HloProto = _hlo_classes()


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def fields(buf: bytes):
    """Yield (field number, wire type, value) of one message; value is bytes for
    length-delimited fields and int otherwise."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = _varint(buf, pos)
        elif wt == 2:
            ln, pos = _varint(buf, pos)
            if pos + ln > end:
                raise ValueError("truncated field")
            v = buf[pos:pos + ln]
            pos += ln
        elif wt == 1:
            v = int.from_bytes(buf[pos:pos + 8], "little")
            pos += 8
        elif wt == 5:
            v = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield num, wt, v


def _instruction(buf: bytes) -> tuple[str, tuple]:
    name, opcode, op_type, op_name, src_file, src_line = "", "", "", "", "", 0
    for num, wt, v in fields(buf):
        if num == 1 and wt == 2:
            name = v.decode("utf-8", "replace")
        elif num == 2 and wt == 2 and not opcode:
            opcode = v.decode("utf-8", "replace")
        elif num == 7 and wt == 2:
            for n2, w2, v2 in fields(v):
                if w2 == 2 and n2 == 1:
                    op_type = v2.decode("utf-8", "replace")
                elif w2 == 2 and n2 == 2:
                    op_name = v2.decode("utf-8", "replace")
                elif w2 == 2 and n2 == 3:
                    src_file = v2.decode("utf-8", "replace")
                elif n2 == 4 and w2 == 0:
                    src_line = v2
    return name, (op_name, op_type, f"{src_file}:{src_line}" if src_file else "", opcode)


# what hlo_op_metadata holds per instruction, in this order
FIELDS = ("op_name", "op_type", "source", "opcode")


def hlo_op_metadata(metadata_name: str, hlo_proto: bytes) -> dict:
    """{(module, program_id, op name): (op_name, op_type, source, opcode)} for one module
    (see ``FIELDS``; "" where the instruction has none).

    ``metadata_name`` is the /host:metadata event name, ``<module>(<program_id>)``.
    """
    m = _MODULE_NAME.match(metadata_name)
    module, program = (m.group(1), int(m.group(2))) if m else (metadata_name, None)
    out = {}
    try:
        msg = HloProto.FromString(hlo_proto)
    except DecodeError:
        msg = None
    if msg is not None:
        for comp in msg.hlo_module.computations:
            for ins in comp.instructions:
                meta = ins.metadata
                src = meta.source_file
                out[(module, program, ins.name)] = (
                    meta.op_name, meta.op_type, f"{src}:{meta.source_line}" if src else "",
                    ins.opcode)
        return out
    # a proto upb refuses (wrong wire types in fields we do not model): walk it by hand
    for num, wt, mod in fields(hlo_proto):
        if num != 1 or wt != 2:
            continue
        for n2, w2, comp in fields(mod):
            if n2 != 3 or w2 != 2:
                continue
            for n3, w3, ins in fields(comp):
                if n3 == 2 and w3 == 2:
                    name, md = _instruction(ins)
                    out[(module, program, name)] = md
    return out
