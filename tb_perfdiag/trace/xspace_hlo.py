"""The HLO of an XSpace's /host:metadata plane joined onto its ops' events: the
framework op, op type, source line and collective opcode of each HLO op."""
from __future__ import annotations

import numpy as np

from .build import small_ids, unique_inverse, unique_rows
from .hlo import FIELDS as HLO_FIELDS, hlo_op_metadata
from .model import Coded


# HLO opcodes of collectives (and their async halves), as XLA names them
COLLECTIVE_OPCODES = frozenset(
    f"{op}{part}" for op in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                             "ragged-all-to-all", "collective-permute", "collective-broadcast")
    for part in ("", "-start", "-done"))


def _hlo_protos(planes) -> dict:
    """{``<module>(<program_id>)``: serialized HloProto} of /host:metadata: kept as bytes
    for the cost rules (``analysis.efficiency.hlo_costs``), parsed only when asked."""
    out = {}
    for _, pname, pm in planes:
        if pname != "/host:metadata":
            continue
        for md in pm.msg.event_metadata.values():
            for st in md.stats:
                if pm.stat_name.get(st.metadata_id) == "Hlo Proto" and st.bytes_value:
                    out[md.name] = st.bytes_value
    return out


def _join_hlo_metadata(planes, stats, strings, n, warnings, protos=None):
    if "hlo_op" not in stats:
        return
    table = {}
    for name, raw in (_hlo_protos(planes) if protos is None else protos).items():
        try:
            table.update(hlo_op_metadata(name, raw))
        except ValueError as e:
            warnings.append(f"unreadable Hlo Proto for {name}: {e}")
    if not table:
        return
    by_program: dict = {}
    evs, op_ids, _ = stats["hlo_op"]
    mod = stats.get("hlo_module")
    prog = stats.get("program_id")
    def at_ops(stat):
        """The stat's value on each HLO-op event (−1 where absent; int64, or the stat's
        own integer column where every HLO op has it), without a dense column over all
        events."""
        out = np.full(evs.shape[0], -1, np.int64)
        if stat is not None and stat[0].size:
            e, v = np.asarray(stat[0]), np.asarray(stat[1])
            if e is evs or (e.shape == evs.shape and np.array_equal(e, evs)):
                # the usual case: on every HLO op (the stat's own column, not a copy:
                # two of 160 MB at 40 M events, at the read's high-water mark)
                return v if v.dtype.kind in "iu" else v.astype(np.int64)
            o = np.argsort(e, kind="stable") if (e[1:] < e[:-1]).any() else None
            if o is not None:
                e, v = e[o], v[o]
            k = np.minimum(np.searchsorted(e, evs), e.shape[0] - 1)
            hit = e[k] == evs
            out[hit] = v[k[hit]]
        return out
    # join per distinct (module, program, op) key, then broadcast
    u, per_op = _distinct_keys(at_ops(mod), at_ops(prog), op_ids)
    empty = strings.intern("")
    names = strings.strings
    get = table.get
    none = ("",) * len(HLO_FIELDS)
    hits = []
    for m_id, p_id, o_id in u.tolist():
        m, o = names[m_id] if m_id >= 0 else "", names[o_id]
        p = p_id % (1 << 64)           # program ids are uint64; stat columns hold int64
        hit = get((m, p, o)) or get((m, None, o))
        if hit is None:
            # TPU ops name no module: their program id and instruction name find it
            if not by_program:
                by_program = {(p, o): v for (_, p, o), v in table.items() if p is not None}
            hit = by_program.get((p, o)) or none
        hits.append(hit)
    for c in ("op_name", "op_type", "source"):
        k = HLO_FIELDS.index(c)
        coded = per_op(strings.intern_many([h[k] for h in hits]))
        keep = (coded.table != empty)[coded.codes]
        if c in stats:
            # an event's own stat (``source`` on TPU ops' metadata) wins over the join
            e0, v0 = np.asarray(stats[c][0]), np.asarray(stats[c][1])
            keep &= ~np.isin(evs, e0)
            if keep.any():
                e = np.concatenate([e0, np.asarray(evs)[keep]])
                o = np.argsort(e, kind="stable")
                stats[c] = (e[o], np.concatenate([v0, coded.full()[keep]])[o], True)
            continue
        if keep.all():
            # the hlo_op events and, as codes, its values themselves: shared in the model
            stats[c] = (evs, coded, True)
        elif keep.any():
            stats[c] = (evs[keep], coded.full()[keep], True)
    # collectives by their HLO opcode (JAX names an all-reduce ``psum.7``), kept on those
    # ops only: a few an iteration, never a column over every op
    k = HLO_FIELDS.index("opcode")
    coll = [h[k] if h[k] in COLLECTIVE_OPCODES else "" for h in hits]
    if any(coll):
        coded = per_op(strings.intern_many(coll))
        keep = (coded.table != empty)[coded.codes]
        stats["hlo_collective"] = (evs[keep], coded.full()[keep], True)


def _distinct_keys(mod: np.ndarray, prog: np.ndarray, op: np.ndarray):
    """Distinct (module, program, op) rows, and a function that takes a value per row to
    the values of every event, held coded (``Coded``).  An HLO op name almost always
    belongs to one (module, program) in a trace: then the op's string id is the key,
    and the codes are the ``hlo_op`` column itself (a table over the ids: no index per
    event); only otherwise are all three columns sorted."""
    op = np.asarray(op)
    small = small_ids(op) if op.size and int(op.min()) >= 0 else None
    if small is not None:
        u_op = small[1]
        if mod.min() == mod.max() and prog.min() == prog.max():
            # one (module, program), the usual case: no check per event
            rows = np.stack([np.full(u_op.shape[0], mod[0]), np.full(u_op.shape[0], prog[0]),
                             u_op.astype(np.int64)], axis=1)
            return rows, lambda per_row: _through_table(u_op, per_row, op)
        u_op, inv = unique_inverse(op)
        # each op's module and program as any of its events has them: the key when every
        # event agrees
        m, p = np.empty(u_op.shape[0], np.int64), np.empty(u_op.shape[0], np.int64)
        m[inv], p[inv] = mod, prog
        if (m[inv] == mod).all() and (p[inv] == prog).all():
            rows = np.stack([m, p, u_op.astype(np.int64)], axis=1)
            return rows, lambda per_row: _through_table(u_op, per_row, op)
        del m, p
    u, inv = unique_rows(np.stack([mod, prog, op.astype(np.int64)], axis=1))
    codes = inv.astype(np.int32)
    return u, lambda per_row: Coded(codes, np.asarray(per_row))


def _through_table(ids: np.ndarray, per_id, x: np.ndarray) -> Coded:
    """``per_id`` (a value per sorted distinct id of ``x``) on every element of ``x``:
    ``x`` itself is the codes, into a table over the ids."""
    per_id = np.asarray(per_id)
    lut = np.zeros(int(ids[-1]) + 1 if ids.size else 0, per_id.dtype)
    lut[ids] = per_id
    return Coded(x, lut)
