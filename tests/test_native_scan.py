"""The C scanners (tb_perfdiag._native via trace.native_scan) against the reference scanners.

Contract: wherever the C scanner returns a result it equals the reference scanner's
(same keys, values and dtypes; plane metadata compared as parsed XPlane messages),
and on any input it either returns or raises ValueError (the caller then falls back
to the reference).  The one documented difference: Kineto timestamps are always read
exactly from their decimal text, where the reference does so only above 4e12 µs.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import random
import re
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from tb_perfdiag.testing.xspace import pb_int as _fv, pb_len as _fb, varint as _varint
from tb_perfdiag.trace import kineto, xspace
from tb_perfdiag.trace.model import TraceError
from tb_perfdiag.trace.xplane_pb import XEventMetadata, XPlane, XSpace, XStatMetadata

from conftest import IN_CI, SHARED, shared_files

try:
    from tb_perfdiag.trace import native_scan
    _IMPORT_ERROR = None
except ImportError as e:  # the extension is optional
    native_scan = None
    _IMPORT_ERROR = e


@pytest.fixture(autouse=True)
def _native_built():
    if native_scan is None:
        msg = (f"the C extension tb_perfdiag._native is not built ({_IMPORT_ERROR}); "
               f"build it with `python setup.py build_ext --inplace`")
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

_FALLBACK_WARNINGS = ("timestamps could not be matched", "timestamp text disagrees")


# ---------------------------------------------------------------- comparison helpers

def _same(a, b, path="scan"):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a2, b2 = np.asarray(a), np.asarray(b)
        assert a2.dtype == b2.dtype, f"{path}: dtype {a2.dtype} != {b2.dtype}"
        assert a2.shape == b2.shape, f"{path}: shape {a2.shape} != {b2.shape}"
        if a2.dtype.kind == "f":   # bit-exact, NaN payloads included
            a2, b2 = a2.view(np.int64), b2.view(np.int64)
        bad = np.flatnonzero(a2 != b2)
        assert not bad.size, f"{path}: {bad.size} differ, first at {bad[:5]}: " \
                             f"{a2[bad[:5]]} != {b2[bad[:5]]}"
        return
    assert type(a) is type(b), f"{path}: type {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            _same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == b or (math.isnan(a) and math.isnan(b)), f"{path}: {a!r} != {b!r}"
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def assert_same_xspace(ref: dict, nat: dict):
    ref, nat = dict(ref), dict(nat)
    rp, npl = ref.pop("planes"), nat.pop("planes")
    assert len(rp) == len(npl)
    for i, ((rid, rname, rmeta), (nid, nname, nmeta, tables)) in enumerate(zip(rp, npl)):
        _same((rid, rname), (nid, nname), f"planes[{i}]")
        assert type(nmeta) is bytes
        # the C scanner copies the plane's records verbatim (less its lines); upb
        # re-serializes: equal as messages, not necessarily as bytes
        plane = XPlane.FromString(rmeta)
        assert plane == XPlane.FromString(nmeta), f"planes[{i}] metadata"
        # …and reads its metadata maps as protobuf does (the last entry of a key wins)
        ids, raw, shown, stat_names, md_stat_ids = tables
        got = {}
        for k, r, s in zip(np.frombuffer(ids, np.int64).tolist(), raw, shown):
            got[k] = (r, s)
        want = {k: (m.name, m.display_name or m.name) for k, m in plane.event_metadata.items()}
        assert got == want, f"planes[{i}] event metadata"
        # entries with stats of their own: a superset of those the map keeps with stats
        with_stats = set(np.frombuffer(md_stat_ids, np.int64).tolist())
        assert {k for k, m in plane.event_metadata.items() if len(m.stats)} <= with_stats
        assert with_stats <= set(got), f"planes[{i}] metadata with stats"
        assert stat_names == {k: m.name for k, m in plane.stat_metadata.items()}, \
            f"planes[{i}] stat metadata"
    _same(ref, nat)


_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)')


def _ts_text_aligned(raw: bytes) -> bool:
    """Whether the reference's exact-timestamp path (a regex over the whole text, matched
    to events by position) lines up with the events: it does not when a "ts" key is
    escaped, nested in args, or holds a non-number.  Only then is it a valid oracle."""
    try:
        doc = json.loads(raw)
        texts = _TS_TEXT.findall(raw)
        vals = [e["ts"] for e in doc["traceEvents"] if isinstance(e, dict) and "ts" in e]
        return len(texts) == len(vals) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and float(t) == float(v)
            for t, v in zip(texts, vals))
    except (ValueError, KeyError, TypeError, OverflowError):
        return False


def _string_stat_values(cols: dict) -> dict:
    """The string stats as {name: (event idx, each event's value parsed)}: the scanners
    agree on the JSON value, the C one keeping the file's spelling of it (its escapes,
    its numbers) where the reference writes orjson's."""
    texts = cols.pop("stat_strings")
    import orjson
    return {name: (idx, [orjson.loads(texts[i]) for i in ids.tolist()])
            for name, (idx, ids) in cols.pop("string_stats").items()}


def assert_same_kineto(ref: dict, nat: dict, raw: bytes, *, ts_check=True):
    """Equal except for the documented timestamp improvement and string stats' texts."""
    ref, nat = dict(ref), dict(nat)
    if nat["stat_strings"] != ref["stat_strings"]:
        _same(_string_stat_values(ref), _string_stat_values(nat), "string stats")
    r_ts, n_ts = ref.pop("ts_ps"), nat.pop("ts_ps")
    fell_back = [w for w in ref["warnings"] if w.startswith(_FALLBACK_WARNINGS)]
    ref["warnings"] = [w for w in ref["warnings"] if w not in fell_back]
    _same(ref, nat)
    assert n_ts.dtype == np.int64 and n_ts.shape == r_ts.shape
    if not ts_check or not r_ts.size:
        return
    placed = r_ts != kineto.OUT_OF_RANGE      # the reference's "sane" events
    _same(placed, n_ts != kineto.OUT_OF_RANGE, "placed events")
    approx_max = max(np.abs(r_ts[placed] / 1e6 + ref["base_us"]).max(initial=0),
                     abs(ref["base_us"]))
    exact_ref = approx_max > kineto._FLOAT_EXACT_LIMIT_US and not fell_back
    if exact_ref:
        if _ts_text_aligned(raw):
            _same(r_ts, n_ts, "ts_ps")
    else:   # the reference used float64 arithmetic: agree within 1 ns
        diff = np.abs(r_ts.astype(np.float64) - n_ts.astype(np.float64)).max()
        assert diff <= 1000, f"ts_ps differ by {diff} ps from the float reference"


def _xspace_both(raw: bytes, wanted=None):
    """(reference, native); each None where it rejects the input.  ``wanted``: the stats
    kept (the names the fuzz generator draws when None)."""
    wanted = _FUZZ_WANTED if wanted is None else wanted
    try:
        nat = native_scan.scan_xspace(raw, wanted=wanted)
    except ValueError:
        nat = None
    try:
        ref = xspace.scan_python("fuzz.xplane.pb", raw, wanted)
    except TraceError:
        ref = None
    return ref, nat


def _kineto_both(raw: bytes):
    try:
        nat = native_scan.scan_kineto(raw)
    except ValueError:
        nat = None
    try:
        ref = kineto.scan_python("fuzz.json", raw)
        ok = True
    except TraceError:
        ref, ok = None, True
    except Exception:   # the reference itself breaks on exotic input (OverflowError, ...)
        ref, ok = None, False
    return ref, nat, ok


# ---------------------------------------------------------------- real traces

_XSPACE_FILES = shared_files((".xplane.pb",))
_KINETO_FILES = shared_files((".pt.trace.json", ".pt.trace.json.gz", ".json.gz"))
_NO_SHARED = pytest.param(None, marks=pytest.mark.skip(
    reason=f"real traces not available ({SHARED} is absent; they live in ../shared/traces)"))


def _ids(files):
    return [os.path.relpath(f, SHARED) for f in files]


def _read(path: str) -> bytes:
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        return f.read()


@pytest.mark.parametrize("path", _XSPACE_FILES or [_NO_SHARED],
                         ids=_ids(_XSPACE_FILES) if _XSPACE_FILES else None)
def test_real_xspace_equals_reference(path):
    raw = _read(path)
    assert_same_xspace(xspace.scan_python(path, raw), native_scan.scan_xspace(raw))


@pytest.mark.parametrize("path", _KINETO_FILES or [_NO_SHARED],
                         ids=_ids(_KINETO_FILES) if _KINETO_FILES else None)
def test_real_kineto_equals_reference(path):
    raw = _read(path)
    try:
        ref = kineto.scan_python(path, raw)
    except TraceError:
        with pytest.raises(ValueError):
            native_scan.scan_kineto(raw)
        return
    assert_same_kineto(ref, native_scan.scan_kineto(raw), raw)


def test_readers_use_the_native_scanner():
    assert kineto.native_scanner() is native_scan


# ---------------------------------------------------------------- protobuf wire helpers

def _fd(fn, d: float):
    return _varint(fn << 3 | 1) + struct.pack("<d", d)


def _f32(fn, v: int):
    return _varint(fn << 3 | 5) + struct.pack("<I", v & 0xFFFFFFFF)


# ---------------------------------------------------------------- hand-made XSpace

def test_handmade_xspace_edge_cases():
    space = XSpace(hostnames=["host-a", ""], errors=["e1"], warnings=["w1", "ü"])
    plane = space.planes.add(id=-7, name="/device:TPU:0")
    plane.event_metadata[1].CopyFrom(XEventMetadata(id=1, name="fusion.1", display_name="",
                                                    child_id=[2, 3, -1]))  # packed child_id
    plane.event_metadata[2].name = "op ✓"
    plane.stat_metadata[5].CopyFrom(XStatMetadata(id=5, name="hlo_op", description="d"))
    # the stats kept are those whose metadata names a wanted stat: ids in the scanner's
    # table, far past it and negative; id 14 names none, 15 no wanted one
    for i in (6, 7, 8, 9, 10, 11, 12, 13, 2**40, -5):
        plane.stat_metadata[i].name = f"s{i}"
    plane.stat_metadata[15].name = "unwanted"
    plane.stats.add(metadata_id=5, uint64_value=2**64 - 1)
    line = plane.lines.add(id=3, display_id=4, name="XLA Ops", display_name="",
                           timestamp_ns=1_700_000_000_000_000_000, duration_ps=-1)
    line.events.add(metadata_id=1, offset_ps=10, duration_ps=5)                    # no stats
    ev = line.events.add(metadata_id=2, num_occurrences=3, duration_ps=2**63 - 1)   # no offset
    ev.stats.add(metadata_id=5, uint64_value=2**64 - 1)      # wraps to -1
    ev.stats.add(metadata_id=5, uint64_value=2**63)          # wraps to -2**63
    ev.stats.add(metadata_id=6, int64_value=-(2**63))
    ev.stats.add(metadata_id=7, str_value="")                # empty string, explicitly set
    ev.stats.add(metadata_id=8, bytes_value=b"")             # same id as "" above
    ev.stats.add(metadata_id=9, bytes_value=b"\xff\x00")     # bytes need not be UTF-8
    ev.stats.add(metadata_id=10, str_value="héllo")
    ev.stats.add(metadata_id=11, double_value=-0.0)
    ev.stats.add(metadata_id=12, double_value=float("nan"))
    ev.stats.add(metadata_id=13, ref_value=2**64 - 5)
    ev.stats.add(metadata_id=2**40, int64_value=7)           # far from the table
    ev.stats.add(metadata_id=-5, str_value="neg")
    ev.stats.add(metadata_id=14, str_value="not kept")        # no metadata
    ev.stats.add(metadata_id=15, str_value="not kept either")
    ev.stats.add(metadata_id=13)                              # no value: kind 0
    line.events.add()                                        # all defaults
    space.planes.add(name="empty plane")
    raw = space.SerializeToString()

    # hand-written records: unpacked child_id, unknown fields of every wire type, a
    # known field with the wrong wire type (kept as unknown by upb), a oneof whose
    # last value wins, a string overwritten by a uint64, fields out of order
    meta = _fv(1, 9) + _fb(2, b"x") + _fv(6, 1) + _fv(6, 2) + _fb(6, _varint(3) + _varint(4))
    stat_a = _fb(5, b"overwritten") + _fv(3, 42) + _fv(1, 77) + _fv(99, 1)
    stat_b = _fd(2, 1.5) + _fb(5, b"last") + _f32(20, 7) + _fb(1, b"\x05")  # field 1 as len
    stat_c = _fv(1, 5) + _fv(3, 9)       # id 5: named last by no wanted stat here
    event = (_fb(4, stat_a) + _fv(5, 9) + _fv(2, 123) + _fb(4, stat_b) + _fv(1, 2**64 - 2)
             + _fd(30, 2.0) + _fv(3, 1) + _fb(4, stat_c))
    occ_last = _fv(2, 55) + _fv(5, 1) + _fv(1, 1)     # num_occurrences after offset_ps
    line2 = (_fb(4, event) + _fb(4, occ_last) + _fv(11, 0) + _fb(2, b"line2") + _fv(3, 2**63) + _fb(4, b"")
             + _fb(11, "disp ✓".encode()) + _fv(10, 2**64 - 1) + _fb(77, b"\xff"))
    plane2 = (_fb(3, line2) + _fv(1, 2**64 - 3) + _fb(4, _fv(1, 9) + _fb(2, meta))
              + _fv(3, 5)                  # field 3 (lines) as a varint: unknown, kept
              + _fb(2, b"/host:CPU") + _fb(5, _fv(1, 77) + _fb(2, _fb(2, b"step_num")))
              # key 0 (a stat with no id, as stat_b) named in two parts: the last name wins;
              # key 5 is hlo_op on the other plane, and here first s6, then nothing wanted
              + _fb(5, _fb(2, _fb(2, b"hlo_op")) + _fb(2, _fb(2, b"s7")))
              + _fb(5, _fv(1, 5) + _fb(2, _fb(2, b"s6"))) + _fb(5, _fv(1, 5) + _fb(2, _fb(2, b"x")))
              + _fb(6, _fv(1, 77) + _fv(4, 1)) + _fv(1000, 1) + _fb(3, b"")
              # key 9 again: the later entry replaces the first; its value comes in two
              # parts that protobuf merges
              + _fb(4, _fb(2, _fb(2, b"first")) + _fv(1, 9) + _fb(2, _fb(4, b"shown"))))
    raw += _fb(1, plane2) + _fb(4, b"host-b") + _fv(15, 8) + _fd(16, 0.5) + _f32(17, 1)

    wanted = ("hlo_op", "step_num", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13",
              f"s{2**40}", "s-5", "absent")
    ref = xspace.scan_python("handmade", raw, wanted)
    nat = native_scan.scan_xspace(raw, wanted=wanted)
    assert_same_xspace(ref, nat)
    # spot checks that the reference agrees with the intent of the test
    assert nat["strings"] == [b"", b"\xff\x00", "héllo".encode(), b"neg", b"last"]
    assert nat["hostnames"] == ["host-a", "", "host-b"]
    assert nat["ev_offset_ps"].tolist() == [10, 0, 0, 123, 0, 0]
    stats = {k: [a.tolist() for a in v] for k, v in nat["stats"].items()}
    assert list(stats) == ["hlo_op", "step_num", "s6", "s7", "s8", "s9", "s10", "s11",
                           "s12", "s13", f"s{2**40}", "s-5"]
    assert stats["hlo_op"] == [[1, 1], [-1, -(2**63)], [xspace.ST_UINT] * 2]
    assert stats["s7"] == [[1, 3], [0, 4], [xspace.ST_STR] * 2]   # stat_b: its last value
    assert stats["step_num"] == [[3], [42], [xspace.ST_UINT]]
    assert stats[f"s{2**40}"] == [[1], [7], [xspace.ST_INT]]
    assert stats["s13"][2] == [xspace.ST_REF, xspace.ST_NONE]
    assert len(nat["planes"]) == 3 and nat["planes"][2][0] == -3
    ids, raw_names, shown, _, _ = nat["planes"][2][3]
    assert np.frombuffer(ids, np.int64).tolist() == [9, 9]
    assert (raw_names[-1], shown[-1]) == ("first", "shown")


def test_xspace_empty_and_malformed():
    _same(native_scan.scan_xspace(b"")["ev_line"], np.zeros(0, np.int32))
    # (input, whether upb rejects it too)
    cases = [
        (b"\x0a\x05abc", True),                       # length past the end
        (b"\x0a\x02\x08", True),                      # truncated varint inside a plane
        (b"\x08" + b"\xff" * 10 + b"\x01", True),     # 11-byte varint
        (b"\x00\x01", True),                          # field 0
        (b"\x0e", True),                              # wire type 6
        (b"\x0c", True),                              # stray end-group
        (b"\x0b\x0c", False),                         # a group: legal, but left to upb
        (_fb(1, _fb(2, b"\xff")), True),              # plane name not UTF-8
        (_fb(1, _fb(3, _fb(4, _fb(4, _fb(5, b"\xc0\x80"))))), True),  # overlong str_value
        (_fb(1, _fb(4, _fb(2, _fb(2, b"\xed\xa0\x80")))), True),       # surrogate in metadata
        (_fb(1, _fb(4, _fb(2, _fb(6, b"\x80")))), True),                # bad packed child_id
        (_fb(2, b"\xf4\x90\x80\x80"), True),          # error string past U+10FFFF
    ]
    for raw, upb_rejects in cases:
        with pytest.raises(ValueError):
            native_scan.scan_xspace(raw)
        if upb_rejects:
            with pytest.raises(TraceError):
                xspace.scan_python("bad", raw)
        else:
            xspace.scan_python("bad", raw)


# ---------------------------------------------------------------- XSpace fuzz

_i64 = st.integers(-(2**63), 2**63 - 1)
_u64 = st.integers(0, 2**64 - 1)
_text = st.text(max_size=6).map(lambda s: s.encode("utf-8", "surrogatepass"))
# stat metadata ids and names drawn so that stats often name a wanted stat (the scanners
# keep only those), sometimes an unwanted one, sometimes none; ids far from the C
# scanner's table too
_stat_id = st.one_of(st.integers(0, 1), st.integers(-2, 5),
                     st.sampled_from([4095, 4096, 2**40]), _i64)
_FUZZ_WANTED = ("a", "b", "")
_stat_name = st.one_of(st.sampled_from([b"a", b"b"]), st.sampled_from([b"c", b""]), _text)


@st.composite
def _unknown(draw):
    fn = draw(st.sampled_from([12, 13, 31, 99, 2**29 - 1]))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return _fv(fn, draw(_u64))
    if kind == 1:
        return _fb(fn, draw(st.binary(max_size=5)))
    if kind == 2:
        return _fd(fn, draw(st.floats()))
    return _f32(fn, draw(st.integers(0, 2**32 - 1)))


def _msg(draw, fields):
    """Records in a random order, with unknown fields sprinkled in."""
    fields = list(fields) + draw(st.lists(_unknown(), max_size=2))
    return b"".join(draw(st.permutations(fields)) if len(fields) < 8 else fields)


def _opt(draw, rec):
    return [rec] if draw(st.booleans()) else []


@st.composite
def _stat(draw):
    f = _opt(draw, _fv(1, draw(_stat_id)))
    for _ in range(draw(st.integers(0, 2))):
        k = draw(st.integers(2, 7))
        f.append(_fd(2, draw(st.floats())) if k == 2 else
                 _fb(5, draw(_text)) if k == 5 else
                 _fb(6, draw(st.binary(max_size=4))) if k == 6 else
                 _fv(k, draw(_u64)))
    # a value field's order matters (the last one wins): keep it, put extras around
    extra = draw(st.lists(_unknown(), max_size=1))
    return b"".join(extra + f)


@st.composite
def _event(draw):
    f = _opt(draw, _fv(1, draw(_i64))) + _opt(draw, _fv(3, draw(_i64)))
    occ = [_fv(2, draw(_u64)), _fv(5, draw(_u64))]
    f += draw(st.lists(st.sampled_from(occ), max_size=2))
    stats = [_fb(4, s) for s in draw(st.lists(_stat(), max_size=3))]
    return _msg(draw, f) + b"".join(stats)


@st.composite
def _line(draw):
    f = (_opt(draw, _fv(1, draw(_i64))) + _opt(draw, _fv(10, draw(_i64)))
         + _opt(draw, _fb(2, draw(_text))) + _opt(draw, _fb(11, draw(_text)))
         + _opt(draw, _fv(3, draw(_i64))) + _opt(draw, _fv(9, draw(_i64))))
    events = [_fb(4, e) for e in draw(st.lists(_event(), max_size=4))]
    return _msg(draw, f) + b"".join(events)


@st.composite
def _plane(draw):
    f = _opt(draw, _fv(1, draw(_i64))) + _opt(draw, _fb(2, draw(_text)))
    for _ in range(draw(st.integers(0, 2))):
        child = draw(st.lists(_i64, max_size=3))
        packed = draw(st.booleans())
        md = (_fv(1, draw(_i64)) + _fb(2, draw(_text)) + _fb(4, draw(_text))
              + _fb(3, draw(st.binary(max_size=3)))
              + (_fb(6, b"".join(_varint(c) for c in child)) if packed
                 else b"".join(_fv(6, c) for c in child))
              + b"".join(_fb(5, s) for s in draw(st.lists(_stat(), max_size=1))))
        f.append(_fb(4, _fv(1, draw(_i64)) + _fb(2, md)))
    for _ in range(draw(st.integers(0, 3))):
        f.append(_fb(5, _fv(1, draw(_stat_id)) + _fb(2, _fv(1, draw(_i64))
                                                     + _fb(2, draw(_stat_name)))))
    f += [_fb(6, s) for s in draw(st.lists(_stat(), max_size=1))]
    f += [_fb(3, ln) for ln in draw(st.lists(_line(), max_size=3))]
    return _msg(draw, f)


@st.composite
def _space(draw):
    f = [_fb(1, p) for p in draw(st.lists(_plane(), max_size=3))]
    f += [_fb(draw(st.sampled_from([2, 3, 4])), draw(_text)) for _ in range(draw(st.integers(0, 2)))]
    return _msg(draw, f)


@FUZZ
@given(_space())
def test_fuzz_xspace_wellformed_equals_reference(raw):
    ref, nat = _xspace_both(raw)
    assert ref is not None, "generator produced an input upb rejects"
    assert nat is not None, "C scanner rejected a well-formed XSpace"
    event(f"{min(sum(len(v[0]) for v in nat['stats'].values()), 3)} stat rows kept")
    assert_same_xspace(ref, nat)


@st.composite
def _mutated(draw, base):
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.integers(0, 3))
        pos = draw(st.integers(0, len(data)))
        if op == 0 and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == 1:
            del data[pos:]
        elif op == 2:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        else:
            del data[pos:pos + draw(st.integers(1, 8))]
    return bytes(data)


def _check_xspace_never_wrong(raw, wanted=None):
    ref, nat = _xspace_both(raw, wanted)
    event("native accepted" if nat is not None else "native rejected")
    if nat is not None:
        assert ref is not None, "C scanner accepted an XSpace the reference rejects"
        assert_same_xspace(ref, nat)


@FUZZ
@given(_mutated(_space()))
def test_fuzz_xspace_mutated_never_wrong(raw):
    _check_xspace_never_wrong(raw)


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_xspace_random_bytes(raw):
    _check_xspace_never_wrong(raw)


_REAL_XSPACE = None


def _real_xspace() -> bytes:
    global _REAL_XSPACE
    if _REAL_XSPACE is None:
        files = sorted(shared_files((".xplane.pb",)), key=os.path.getsize)
        if not files:
            pytest.skip(f"real traces not available ({SHARED} is absent)")
        _REAL_XSPACE = _read(files[0])
    return _REAL_XSPACE


def _edited(data, original: bytes, inserts) -> bytes:
    """1–3 random edits of a real file: overwrite a byte, truncate, or insert."""
    raw = bytearray(original)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        op = data.draw(st.integers(0, 2))
        if op == 0:
            raw[pos] = data.draw(st.integers(0, 255))
        elif op == 1:
            del raw[pos:]
            if not raw:
                break
        else:
            raw[pos:pos] = data.draw(inserts)
    return bytes(raw)

@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.data())
def test_fuzz_xspace_real_file_mutated(data):
    _check_xspace_never_wrong(_edited(data, _real_xspace(), st.binary(min_size=1, max_size=4)),
                              xspace.STATS)


# ---------------------------------------------------------------- Kineto: hand-made

def _doc(events, **meta) -> bytes:
    return json.dumps({**meta, "traceEvents": events}).encode()


def _both_equal(raw: bytes):
    ref = kineto.scan_python("t.json", raw)
    nat = native_scan.scan_kineto(raw)
    assert_same_kineto(ref, nat, raw)
    return ref, nat


def _exact_ps(text: str, base_us: int) -> int:
    whole, _, frac = text.partition(".")
    v = abs(int(whole)) * 10**6 + int((frac + "000000")[:6])
    return (-v if whole.startswith("-") else v) - base_us * 10**6


@pytest.mark.parametrize("texts", [
    ["1669783687464181.123", "1669783687464181", "1669783687464182.999999", "1669783687464181.5"],
    ["1712198939370925.321", "1712198939370925.3219999", "1712198939370926"],   # > 6 decimals
    ["0.001", "1234.567", "3.000001", "2.5"],              # the reference uses floats here
    ["-5.25", "-0.5", "7"],                                # negative timestamps
    ["999999999999.999", "1000000000000.001"],
])
def test_kineto_timestamps_are_exact(texts):
    raw = ("{\"traceEvents\": [" + ",".join(
        f'{{"ph": "X", "name": "e", "pid": 1, "tid": 1, "ts": {t}, "dur": 1.5}}' for t in texts)
        + "]}").encode()
    ref = kineto.scan_python("t.json", raw)
    nat = native_scan.scan_kineto(raw)
    assert_same_kineto(ref, nat, raw)
    base = math.floor(min(float(t) for t in texts))
    assert nat["base_us"] == base
    assert nat["ts_ps"].tolist() == [_exact_ps(t, base) for t in texts]
    assert nat["dur_ps"].tolist() == [1_500_000] * len(texts)


@pytest.mark.parametrize("events", [
    # (ts, dur): clock garbage far from the median time is not placed (OUT_OF_RANGE, dur 0)
    [(1669783687464181.5, 1), (1e30, 1), (1669783687464182, 2e12), (1669783687464183, 5)],
    [(5, 1), (2e12, 1), (3, 1)],
    [(5, 1e12), (6, -1e12), (7, 999999999999.9)],      # no event is sane but the last
    [(1, 2e12)],                                        # no event is sane at all
    [(0, 1), (10, 1), (1e12 + 4, 1), (1e12 + 6, 1)],    # even count: mean of the middle two
    [(0, 1), (999999999999.5, 1), (3, 1)],              # all within the span: all placed
    [(0, 1), (1e12, 1), (1e12, 1)],                     # exactly the span apart: the median's
])
def test_kineto_unplaceable_times_follow_the_reference(events):
    raw = _doc([{"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": t, "dur": d}
                for i, (t, d) in enumerate(events)])
    ref, nat = _both_equal(raw)
    _same(ref["dur_ps"], nat["dur_ps"])
    assert (nat["ts_ps"] == kineto.OUT_OF_RANGE).tolist() == \
        (ref["ts_ps"] == kineto.OUT_OF_RANGE).tolist()


def test_kineto_exponent_timestamps_follow_the_reference():
    texts = ["1.669783687464181e15", "1669783687464182.5", "16697836874641835E-1"]
    raw = ("{\"traceEvents\": [" + ",".join(
        f'{{"ph": "X", "name": "e", "pid": 1, "tid": 1, "ts": {t}}}' for t in texts)
        + "]}").encode()
    ref, nat = _both_equal(raw)
    _same(ref["ts_ps"], nat["ts_ps"])


@given(st.lists(st.tuples(st.integers(16, 19), st.integers(0, 10**9 - 1)), min_size=1,
                max_size=40))
@FUZZ
def test_kineto_long_significands_round_like_python(nums):
    """Numbers of 16 to 19 significant digits (epoch microseconds with nanosecond decimals
    have 16) are read as Python reads them, whether they take the exact fast path (a
    significand of at most 2**53) or the slow one.  Timestamps in exponent form show it
    to the last bit: they are placed from their float64 value, as the reference does."""
    # 16 to 19 digits, all near 1.712e15 µs (so that every one is placed)
    texts = [f"1712198939{rest:09d}"[:digits] + f"e-{digits - 16}" for digits, rest in nums]
    raw = ("{\"traceEvents\": [" + ",".join(
        f'{{"ph": "X", "name": "e", "pid": 1, "tid": 1, "ts": {t}, "dur": {t[:-4]}e-12, '
        f'"args": {{"correlation": {t}}}}}' for t in texts) + "]}").encode()
    ref, nat = _both_equal(raw)
    _same(ref["ts_ps"], nat["ts_ps"])
    assert nat["stats"]["correlation"][1].tolist() == [round(float(t)) for t in texts]


@given(st.sampled_from(["", "1", "17121989", "1712198939370"]),
       st.lists(st.tuples(st.booleans(), st.text("0123456789", min_size=0, max_size=7),
                          st.one_of(st.none(), st.text("0123456789", min_size=1, max_size=8))),
                min_size=1, max_size=30))
@FUZZ
def test_kineto_decimal_timestamps_read_once_like_python(lead, parts):
    """Timestamps written as decimals (signs, leading zeros, integers, 0 to 8 decimals,
    up to 16 whole digits as epoch microseconds have) are read exactly from their text,
    and as the reference reads them (exactly above 4e12 µs, as floats below), whether
    the digits are read once (at most 19 digits, 6 decimals, a significand within
    2**53) or by the general path."""
    texts = []
    for neg, digits, frac in parts:
        whole = (lead + digits)[:16].lstrip("0") or "0"     # epoch µs have 16 digits
        texts.append(("-" if neg else "") + whole + ("" if frac is None else "." + frac))
    raw = ("{\"traceEvents\": [" + ",".join(
        f'{{"ph": "X", "name": "e", "pid": 1, "tid": 1, "ts": {t}, "dur": 1}}' for t in texts)
        + "]}").encode()
    _both_equal(raw)           # the float reference within a nanosecond, the same events placed
    nat = native_scan.scan_kineto(raw)
    placed = [t for t, got in zip(texts, nat["ts_ps"].tolist()) if got != kineto.OUT_OF_RANGE]
    assert nat["base_us"] == (math.floor(min(float(t) for t in placed)) if placed else 0)
    for t, got in zip(texts, nat["ts_ps"].tolist()):
        assert got == kineto.OUT_OF_RANGE or got == _exact_ps(t, nat["base_us"]), t


def test_kineto_semantics_match_reference():
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": 5}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": []},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 10, "dur": 2,
         "args": {"External id": 7, "external id": 8, "correlation": 2.5, "Ev Idx": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 1.0, "tid": 2, "ts": 11.5,
         "args": {"External id": None, "external id": 9, "correlation": 3, "device": 0,
                  "stream": 7, "bytes": True}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": True, "tid": 2.0, "ts": 12, "dur": 0.0005,
         "args": {"correlation": "x", "device": [1], "stream": {"a": 1}}},
        {"ph": "X", "cat": "", "name": None, "pid": "Spans", "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": "Trace", "name": "t", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "X", "cat": None, "pid": "Traces", "tid": 1, "ts": 1},
        {"ph": "X", "cat": 0, "name": 12, "pid": None, "tid": None, "ts": 13},
        {"ph": "X", "cat": True, "name": True, "pid": "p", "tid": "stream 7", "ts": 14},
        {"ph": "X", "cat": [], "name": False, "pid": -0.0, "tid": 1.5, "ts": 15},
        {"ph": "X", "cat": {}, "name": "é😀\n\t\"\\/\u2028", "pid": 0, "tid": 1.5, "ts": 16},
        {"ph": "X", "cat": 0.0, "name": "", "pid": 2**63 - 1, "tid": -(2**63), "ts": 17},
        # malformed: counted in "bad"
        {"ph": "X", "name": "no ts", "pid": 1, "tid": 1},
        {"ph": "X", "name": "bool ts", "pid": 1, "tid": 1, "ts": True},
        {"ph": "X", "name": "str dur", "pid": 1, "tid": 1, "ts": 1, "dur": "5"},
        {"ph": "X", "name": "null dur", "pid": 1, "tid": 1, "ts": 1, "dur": None},
        {"ph": "X", "name": "dict pid", "pid": {}, "tid": 1, "ts": 1},
        {"ph": "X", "name": "list tid", "pid": 1, "tid": [], "ts": 1},
        {"ph": "X", "cat": "Trace", "name": "bad and Trace", "pid": 1, "tid": 1, "ts": "x"},
        [1, 2], "string event", 3, None, {},
        {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": 1},
        {"ph": 5, "name": "numeric ph", "pid": 1, "tid": 1, "ts": 1},
        {"name": "no ph", "pid": 1, "tid": 1, "ts": 1},
    ]
    raw = _doc(events, schemaVersion=1, deviceProperties=[{"id": 0, "name": "A100"}],
               distributedInfo={"rank": 0}, displayTimeUnit="ns", baseTimeNanoseconds=17,
               other={"traceEvents": 1})
    ref, nat = _both_equal(raw)
    assert nat["track_keys"][0] == (1, 2) and type(nat["track_keys"][0][0]) is int
    assert nat["thread_name"] == {(1, 2): "5", (1, 3): ""}
    assert nat["warnings"] == ["11 malformed events skipped (missing or non-numeric ts/dur/pid)"]
    assert nat["n_raw"] == len(events)
    # the same document with escaped keys, unusual spacing and duplicate keys
    text = raw.decode()
    dup = text.replace('{"ph": "X", "cat": "cpu_op"',
                       '{"ph": "M", "ph": "X", "cat": 5, "cat": "cpu_op"', 1)
    assert dup != text
    text = dup.replace('"ph"', '"\\u0070h"').replace(", ", " ,\r\n\t")
    _, nat2 = _both_equal(text.encode())
    _same(nat["name_ids"], nat2["name_ids"])


def test_kineto_shape_args_are_string_stats_shared_per_text():
    """An op's ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (arrays) are string
    stats: their JSON text, one per distinct value, in first-seen order; ``flops`` a
    number.  A value that is no array is none; of a key written twice, the last."""
    shape = {"Input Dims": [[32, 3, 224, 224], [64, 3, 7, 7], []],
             "Input type": ["float", "float", ""], "Concrete Inputs": ["", "", "[2, 2]"]}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 1,
         "dur": 5, "args": dict(shape, flops=236027904)},
        {"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": 2,
         "dur": 1, "args": {"Input Dims": [[32, 64, 112, 112]], "Input type": None,
                            "Concrete Inputs": "not a list"}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 3,
         "dur": 5, "args": shape},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 4, "dur": 1,
         "args": {"Input Dims": {"a": [1]}}},
    ]
    ref, nat = _both_equal(_doc(events))
    assert nat["stat_strings"] == ref["stat_strings"] == [
        "[[32,3,224,224],[64,3,7,7],[]]", '["float","float",""]', '["","","[2, 2]"]',
        "[[32,64,112,112]]"]
    got = {k: [a.tolist() for a in v] for k, v in nat["string_stats"].items()}
    assert got == {"input_dims": [[0, 1, 2], [0, 3, 0]], "input_type": [[0, 2], [1, 1]],
                   "concrete_inputs": [[0, 2], [2, 2]]}
    assert [a.tolist() for a in nat["stats"]["flops"]] == [[0], [236027904]]
    # the file's own spacing, escapes and a key twice: the same values
    text = ('{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, '
            '"args": {"Input Dims": [1], "Concrete Inputs": [ "\\u00e9\\"]\\\\" ,\n'
            '\t"x y" ], "Input Dims": [ [ 2 ] , [ ] ]}}]}')
    ref, nat = _both_equal(text.encode())
    assert nat["stat_strings"] == ["[[2],[]]", '["\\u00e9\\"]\\\\","x y"]']
    assert ref["stat_strings"] == ["[[2],[]]", '["é\\"]\\\\","x y"]']


def test_kineto_nonascii_escapes_ascii_only_output():
    events = [{"ph": "X", "name": n, "cat": c, "pid": 1, "tid": t, "ts": i}
              for i, (n, c, t) in enumerate([("é😀", "ü", "t😀"), ("\x00\x1f", "c", "x"),
                                             ("\ud7ff\ue000\uffff", "\U0010ffff", 2)])]
    for ensure_ascii in (True, False):
        raw = json.dumps({"traceEvents": events}, ensure_ascii=ensure_ascii).encode()
        _both_equal(raw)


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"\xef\xbb\xbf{\"traceEvents\": []}", b"[]", b"{}", b'{"traceEvents": {}}',
    b'{"traceEvents": [1,]}', b'{"traceEvents": [], }', b'{"traceEvents": [NaN]}',
    b'{"traceEvents": [Infinity]}', b'{"traceEvents": [1e400]}', b'{"traceEvents": [-1e309]}',
    b'{"traceEvents": ["\\ud800"]}', b'{"traceEvents": ["\\udc00"]}', b'{"traceEvents": ["\\x"]}',
    b'{"traceEvents": ["\x01"]}', b'{"traceEvents": ["\xff"]}', b'{"traceEvents": ["\xed\xa0\x80"]}',
    b'{"traceEvents": ["\xc0\x80"]}', b'{"traceEvents": [01]}', b'{"traceEvents": [1.]}',
    b'{"traceEvents": [.5]}', b'{"traceEvents": [-]}', b'{"traceEvents": [1e]}',
    b'{"traceEvents": [tru]}', b'{"traceEvents": []} x', b'{"traceEvents": []}\x00',
    b'{"traceEvents": [{"ts": 1 "dur": 2}]}', b'{"traceEvents": [{"ts": 1,}]}',
    b'{"traceEvents": [{"ts" 1}]}', b'{"traceEvents": [{1: 1}]}', b'{"traceEvents": [',
    b'{"traceEvents": [{"args": {"External id": 1, }}]}',
    b'{"traceEvents": []' + b', "a": ' + b"[" * 1100 + b"]" * 1100 + b"}",
    b'{"traceEvents": [{"args": {"x": ' + b"[" * 200000 + b"}}]}",
    b'\x0c{"traceEvents": []}',
])
def test_kineto_invalid_json_raises_valueerror(raw):
    with pytest.raises(ValueError):
        native_scan.scan_kineto(raw)
    with pytest.raises(TraceError):
        kineto.scan_python("bad.json", raw)


# numbers where nobody reads them (an unread arg, an unknown event key, a bare element)
# are checked without their value: the same numbers must pass and fail as where they
# are read
_SKIPPED_NUMBER_SPOTS = ('{"traceEvents": [{"ph": "X", "ts": 1, "pid": 1, "tid": 1, '
                         '"args": {"registers": %s}}]}',
                         '{"traceEvents": [{"ph": "X", "ts": 1, "pid": 1, "tid": 1, '
                         '"grid": [1, %s]}]}',
                         '{"traceEvents": [%s]}',
                         '{"traceEvents": [], "other": {"x": %s}}')


@pytest.mark.parametrize("text", [
    "0", "-0", "7", "-12", "1.5", "-0.25e-3", "1E+2", "9" * 19, "9" * 20, "9" * 25,
    "1e308", "1.7976931348623157e308", "1e-400", "0.000e999", "9" * 21 + "e287",
    "1" + "0" * 300, "-1" + "0" * 300 + ".5",
])
def test_kineto_numbers_nobody_reads_are_accepted_as_orjson_does(text):
    for spot in _SKIPPED_NUMBER_SPOTS:
        _both_equal((spot % text).encode())


@pytest.mark.parametrize("text", [
    "1e400", "-1e309", "9" * 21 + "e288", "1" + "0" * 309, "1" + "0" * 309 + ".0",
    "01", "-", "1.", ".5", "1e", "1e+", "-a", "+1", "0x1",
])
def test_kineto_numbers_nobody_reads_are_refused_as_orjson_does(text):
    for spot in _SKIPPED_NUMBER_SPOTS:
        raw = (spot % text).encode()
        with pytest.raises(ValueError):
            native_scan.scan_kineto(raw)
        with pytest.raises(TraceError):
            kineto.scan_python("bad.json", raw)


def test_kineto_keys_like_the_usual_ones_are_told_apart():
    """The usual event keys are read by comparing bytes; keys that start like them, are
    cut short, or spell them with escapes are read as the reference reads them."""
    ev = ('{"ph": "X", "name": "real", "pid": 1, "tid": 2, "ts": 5, "dur": 3, '
          '"cat": "c", "args": {"correlation": 7}')
    near = ['"p": 1', '"phx": "M"', '"pidd": 9', '"tsx": 1', '"t": 1', '"durr": 9',
            '"cats": "x"', '"names": "x"', '"nam": "x"', '"argss": {"correlation": 8}',
            '"arg": 1', '"\\u0070h": "X"', '"n\\u0061me": "escaped"', '"ts\\"": 1']
    for k in near:
        for doc in (ev + ", " + k + "}", "{" + k + ", " + ev[1:] + "}"):
            _both_equal(('{"traceEvents": [' + doc + "]}").encode())
    # the keys in the last bytes of the text: fewer than the eight compared
    _both_equal(b'{"traceEvents": [{"ts": 1, "pid": 1, "tid": 1, "name": "n", "ph": "X"}]}')


def test_kineto_fallback_cases_raise_valueerror():
    """Inputs the C scanner hands back to the reference (which accepts them)."""
    for events in ([{"ph": "X", "name": 1.5, "pid": 1, "tid": 1, "ts": 1}],
                   [{"ph": "X", "name": [1], "pid": 1, "tid": 1, "ts": 1}],
                   [{"ph": "X", "name": "n", "pid": 2**64 - 1, "tid": 1, "ts": 1}],
                   [{"ph": "X", "name": "n", "pid": 1, "tid": 1, "ts": 1,
                     "args": {"device": 2**63}}]):
        raw = _doc(events)
        kineto.scan_python("t.json", raw)
        with pytest.raises(ValueError):
            native_scan.scan_kineto(raw)
    raw = b'{"traceEvents": [], "traceEvents": []}'
    kineto.scan_python("t.json", raw)
    with pytest.raises(ValueError):
        native_scan.scan_kineto(raw)


def test_kineto_accepts_buffers():
    raw = _doc([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 5}])
    for buf in (bytearray(raw), memoryview(raw)):
        _same(native_scan.scan_kineto(buf)["ts_ps"], native_scan.scan_kineto(raw)["ts_ps"])


# ---------------------------------------------------------------- scanning beside other threads

def _big_xspace(n: int) -> bytes:
    """One plane, one line, ``n`` events with a stat each (repeated wire bytes: fast)."""
    event = _fb(4, _fv(1, 1) + _fv(2, 10) + _fv(3, 5) + _fb(4, _fv(1, 5) + _fv(3, 7)))
    line = _fv(1, 1) + _fb(2, b"XLA Ops") + event * n
    plane = (_fv(1, 1) + _fb(2, b"/device:TPU:0") + _fb(3, line)
             + _fb(4, _fv(1, 1) + _fb(2, _fv(1, 1) + _fb(2, b"fusion")))
             + _fb(5, _fv(1, 5) + _fb(2, _fv(1, 5) + _fb(2, b"correlation_id"))))
    return _fb(1, plane)


def _big_kineto(n: int) -> bytes:
    ev = b'{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1.5,"dur":1,' \
         b'"args":{"correlation":3}},'
    return b'{"traceEvents":[' + ev * n + b'{"ph":"M","name":"process_name","pid":0,' \
           b'"args":{"name":"GPU 0"}}]}'


@pytest.mark.parametrize("fmt", ["xspace", "kineto"])
def test_scan_lets_other_threads_run_and_publishes_its_position(fmt):
    """A progress poll (another thread, as the server's) is answered while a large file
    is scanned, and sees the bar move through the scan."""
    import threading
    from tb_perfdiag.progress import Progress
    raw, scan = (_big_xspace(3_000_000), native_scan.scan_xspace) if fmt == "xspace" else \
        (_big_kineto(1_500_000), native_scan.scan_kineto)
    progress = Progress()
    progress.format(fmt)
    progress.phase("scanning")
    out = {}
    worker = threading.Thread(target=lambda: out.setdefault("cols", scan(raw, progress)))
    seen = []
    worker.start()
    while worker.is_alive():
        seen.append(progress.snapshot()["fraction"])
    worker.join()
    inside = sorted(set(f for f in seen[1:-1]))
    assert len(inside) >= 3, f"polls during the scan saw only {inside}"
    assert seen == sorted(seen)
    n = 3_000_000 if fmt == "xspace" else 1_500_000
    assert out["cols"]["ev_dur_ps" if fmt == "xspace" else "dur_ps"].shape[0] == n
    # the counter ends at the whole file, and the columns equal a scan without one
    after = progress.snapshot()["fraction"]
    progress.phase("building")
    assert after == pytest.approx(progress.snapshot()["fraction"], abs=1e-3)
    plain = scan(raw)
    for k in ("ev_dur_ps", "stats") if fmt == "xspace" else ("dur_ps", "ts_ps"):
        _same(out["cols"][k], plain[k])


def test_scan_fails_cleanly_beside_other_threads():
    """Errors found while the GIL is released raise ValueError as before."""
    import threading
    raw = _big_xspace(500_000)
    errors = []

    def bad():
        try:
            native_scan.scan_xspace(raw[:-3])
        except ValueError as e:
            errors.append(str(e))
    threads = [threading.Thread(target=bad) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 4 and all("native XSpace scan" in e for e in errors)
    with pytest.raises(TypeError, match="aligned int64"):
        native_scan._native.scan_xspace(raw, bytearray(4), ())
    for wanted in (["a"], ("a", 1), ("x",) * 65):
        with pytest.raises(TypeError, match="stat"):
            native_scan._native.scan_xspace(raw, None, wanted)
    with pytest.raises(BufferError):
        native_scan._native.scan_kineto(b"{}", b"\0" * 8)      # not writable


# ---------------------------------------------------------------- Kineto fuzz

class _Raw(str):
    """A number written verbatim into the JSON text."""


def _dump(v, ascii_: bool, lines: str | None = None) -> str:
    """JSON text; ``lines`` (an indent): Kineto's layout, an element of a list a line
    after that indent, and an object that is a member's value on a line of its own (a
    '{' that opens a line but starts no event)."""
    if isinstance(v, _Raw):
        return str(v)
    if isinstance(v, dict):
        return "{" + ", ".join(
            _dump(k, ascii_) + ": " + ("\n" + lines if lines is not None and isinstance(x, dict)
                                      else "")
            + _dump(x, ascii_, lines) for k, x in v.items()) + "}"
    if isinstance(v, list):
        if lines is None:
            return "[" + ",".join(_dump(x, ascii_, lines) for x in v) + "]"
        return "[\n" + lines + (",\n" + lines).join(_dump(x, ascii_, lines) for x in v) + "\n]"
    return json.dumps(v, ensure_ascii=ascii_)


_num_text = st.builds(
    lambda sign, whole, frac, exp: _Raw(f"{sign}{whole}{'.' + frac if frac else ''}{exp}"),
    st.sampled_from(["", "", "-"]),
    st.one_of(st.integers(0, 10**4), st.integers(10**15, 2 * 10**15), st.integers(0, 10**13)),
    st.text("0123456789", max_size=10),
    st.sampled_from(["", "", "", "e0", "E+2", "e-3"]))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**65), 2**65), _num_text,
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=6).filter(lambda s: "ts" not in s))
_value = st.recursive(_scalar, lambda ch: st.lists(ch, max_size=3)
                      | st.dictionaries(st.sampled_from(["a", "b", "x y", "é"]), ch, max_size=3),
                      max_leaves=5)
_key_or_id = st.one_of(st.integers(-3, 3), st.sampled_from(
    [0.0, 1.0, 1.5, -0.0, True, False, None, "1", "Spans", "Traces", "stream 7", "é"]),
    st.just({}), st.just([]))
_stat_val = st.one_of(st.none(), st.booleans(), st.integers(-(2**62), 2**62),
                      st.floats(-1e15, 1e15), st.text(max_size=3), st.just([]))


@st.composite
def _kevent(draw):
    e = {}
    opts = {
        "ph": st.sampled_from(["X", "X", "X", "X", "M", "i", None, 1]),
        "name": st.one_of(st.sampled_from(["process_name", "thread_name", "process_labels"]),
                          st.text(max_size=5).filter(lambda s: "ts" not in s), st.none(),
                          st.integers(-3, 10**20), st.booleans()),
        "cat": st.sampled_from(["cpu_op", "kernel", "Trace", "", None, 0, 1, True, False, 0.0,
                                [], {}, "é"]),
        "pid": _key_or_id, "tid": _key_or_id,
        "ts": st.one_of(_num_text, st.integers(0, 2**53), st.floats(0, 1e12)),
        "dur": st.one_of(_num_text, st.integers(0, 10**6), st.floats(0, 1e6), st.none(),
                         st.text(max_size=2)),
        "args": st.one_of(st.dictionaries(st.sampled_from(
            ["correlation", "External id", "external id", "device", "stream", "bytes",
             "flops", "Input Dims", "Input type", "Concrete Inputs", "name", "labels",
             "other"]), st.one_of(_stat_val, st.lists(_value, max_size=3)), max_size=4),
            _value),
        "junk": _value,
    }
    for k in draw(st.permutations(list(opts))):
        if draw(st.integers(0, 9)) < 7:
            e[k] = draw(opts[k])
    return e


@st.composite
def _kdoc(draw):
    events = draw(st.lists(st.one_of(_kevent(), _kevent(), _kevent(), _scalar), max_size=8))
    meta = draw(st.dictionaries(st.sampled_from(
        ["schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit", "x"]),
        _value, max_size=2))
    body = dict(meta)
    body["traceEvents"] = events
    return _dump(body, draw(st.booleans()), draw(st.sampled_from([None, "", "  ", "\t"]))).encode()


@FUZZ
@given(_kdoc())
def test_fuzz_kineto_generated_equals_reference(raw):
    ref, nat, ok = _kineto_both(raw)
    assume(ok)
    event("native accepted" if nat is not None else "native fell back")
    if nat is not None:
        assert ref is not None, "C scanner accepted JSON the reference rejects"
        assert_same_kineto(ref, nat, raw)


_KINETO_SEED = (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", '
                b'"name": "aten::mm", "pid": 1, "tid": 2, "ts": 1669783687464181.123, '
                b'"dur": 1.5, "args": {"External id": 3, "correlation": 7, "x": [1, {"y": '
                b'"\\u00e9\\ud83d\\ude00"}]}}, {"ph": "M", "name": "thread_name", "pid": 1, '
                b'"tid": 2, "args": {"name": "main"}}, {"ph": "X", "cat": "kernel", "name": '
                b'"k\\n", "pid": 0, "tid": "stream 7", "ts": 1669783687464182, "dur": 0.25, '
                b'"args": {"device": 0, "stream": 7.0, "bytes": -1e2}}], "displayTimeUnit": "ns"}')


def _check_kineto_never_wrong(raw):
    ref, nat, ok = _kineto_both(raw)
    event("native accepted" if nat is not None else "native rejected")
    if nat is not None and ok:
        assert ref is not None, "C scanner accepted JSON the reference rejects"
        # a mutation can break the reference's text/event timestamp matching: the
        # timestamp check is in assert_same_kineto's hands
        assert_same_kineto(ref, nat, raw)


@FUZZ
@given(_mutated(st.one_of(st.just(_KINETO_SEED), _kdoc())))
def test_fuzz_kineto_mutated_never_wrong(raw):
    _check_kineto_never_wrong(raw)


@FUZZ
@given(st.binary(max_size=64))
def test_fuzz_kineto_random_bytes(raw):
    _check_kineto_never_wrong(b'{"traceEvents": [' + raw)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.data())
def test_fuzz_kineto_real_file_mutated(data):
    files = sorted(shared_files((".json.gz",)), key=os.path.getsize)
    if not files:
        pytest.skip(f"real traces not available ({SHARED} is absent)")
    inserts = st.sampled_from([b'"', b"\\", b"{", b"]", b",", b"\xc3", b"\xff", b"1e999", b"-",
                               b"\\u", b" "])
    _check_kineto_never_wrong(_edited(data, _read(files[0]), inserts))


# ---------------------------------------------------------------- Kineto: chunk boundaries
#
# Both scanners read a file as a stream of chunks (``native_scan.KinetoStream``,
# ``kineto.PythonStream``): a chunk may end anywhere, inside any token.  Fed in chunks,
# each gives exactly what it gives for the whole text, and refuses what it refuses.

def _pieces(raw: bytes, cuts) -> list:
    """``raw`` cut at the sorted positions ``cuts``."""
    edges = [0, *sorted(set(c for c in cuts if 0 < c < len(raw))), len(raw)]
    return [raw[a:b] for a, b in zip(edges, edges[1:])]


def _native_chunked(raw: bytes, cuts):
    st_ = native_scan.KinetoStream()
    try:
        for piece in _pieces(raw, cuts):
            st_.feed(piece)
        return st_.finish()
    except ValueError:
        return None


def _native_many(raw: bytes, cuts):
    """Fed through ``feed_many``: stretches between event starts walked on threads."""
    st_ = native_scan.KinetoStream()
    try:
        st_.feed_many(iter(_pieces(raw, cuts)), workers=2)
        return st_.finish()
    except ValueError:
        return None


def _native_whole(raw: bytes):
    try:
        return native_scan.scan_kineto(raw)
    except ValueError:
        return None


def _python_chunked(raw: bytes, cuts):
    st_ = kineto.PythonStream("t.json")
    try:
        for piece in _pieces(raw, cuts):
            st_.feed(piece)
        return st_.finish()
    except TraceError as e:
        return e.reason


def _python_whole(raw: bytes):
    try:
        return kineto.scan_python("t.json", raw)
    except TraceError as e:
        return e.reason


def _assert_chunked_equal(raw: bytes, cuts, whole_nat, whole_ref):
    for nat in (_native_chunked(raw, cuts), _native_many(raw, cuts)):
        assert (nat is None) == (whole_nat is None), f"native refusal differs, cuts {cuts}"
        if nat is not None:
            _same(whole_nat, nat)
    ref = _python_chunked(raw, cuts)
    if isinstance(whole_ref, str):   # refused whole: refused in chunks
        assert isinstance(ref, str) and ref.startswith(whole_ref[:12]), (cuts, ref, whole_ref)
    else:
        assert not isinstance(ref, str), f"refused in chunks only ({ref}), cuts {cuts}"
        _same(whole_ref, ref)


# every token kind: strings with escapes (\n, \", \\, \u00e9, a surrogate pair) and raw
# multi-byte UTF-8 (2, 3, 4 bytes), integers, fractions, exponents, negative numbers,
# true/false/null, nested objects and arrays, empty containers, metadata before and after
_EVERY_TOKEN = (
    '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "H100 \\"SXM\\"", '
    '"mem": 8.5e10}], "traceEvents": [ {"ph": "M", "name": "process_name", "pid": 1, '
    '"args": {"name": "py\\\\thon é"}}, {"ph": "X", "cat": "cpu_op", "name": '
    '"aten::mm \\u00e9\\ud83d\\ude00 ≤ 😀", "pid": 1, "tid": 2, "ts": 1669783687464181.125, '
    '"dur": -0.0e+0, "args": {"External id": 3, "correlation": 70000000000, "x": [true, '
    'false, null, {}, [], {"y": [1, [2, {"z": -3.25E-2}]]}], "Input Dims": [ [32, 3] ,\n'
    ' [], [[1, 2]]], "Input type": ["float","", "c10::Half"], "Concrete Inputs": ["", '
    '"[1, 1]", "a \\"]q[\\" \\\\ \\u00e9 \\/"], "flops": 12}}, 7, "s", null, {}, '
    '{"ph": "X", "cat": "kernel", "name": "k\\n\\t", "pid": 0, "tid": "stream 7", '
    '"ts": 1669783687464182, "dur": 0.25, "args": {"device": 0, "stream": 7.0, '
    '"bytes": -1e2}} ], "baseTimeNanoseconds": 1700000000000000000, '
    '"displayTimeUnit": "ns"}').encode()


@pytest.mark.parametrize("raw", [_EVERY_TOKEN, _KINETO_SEED], ids=["every-token", "seed"])
def test_kineto_chunked_equals_whole_at_every_boundary(raw):
    """One cut at every byte, then two cuts at every pair of nearby bytes: a chunk
    boundary inside every token kind, in every position of it."""
    whole_nat, whole_ref = _native_whole(raw), _python_whole(raw)
    assert whole_nat is not None and not isinstance(whole_ref, str)
    for k in range(len(raw) + 1):
        _assert_chunked_equal(raw, [k], whole_nat, whole_ref)
    for k in range(0, len(raw), 7):
        for j in (1, 2, 3, 5, 11):
            _assert_chunked_equal(raw, [k, k + j], whole_nat, whole_ref)


def test_kineto_chunked_one_byte_at_a_time():
    for raw in (_EVERY_TOKEN, _KINETO_SEED):
        _assert_chunked_equal(raw, range(len(raw)), _native_whole(raw), _python_whole(raw))


_cuts = st.lists(st.integers(0, 4096), max_size=12)


@FUZZ
@given(_kdoc(), _cuts)
def test_fuzz_kineto_chunked_equals_whole(raw, cuts):
    whole_ref = _python_whole(raw) if _kineto_both(raw)[2] else None
    assume(whole_ref is not None)
    _assert_chunked_equal(raw, [c % (len(raw) + 1) for c in cuts], _native_whole(raw),
                          whole_ref)


@FUZZ
@given(_mutated(st.one_of(st.just(_KINETO_SEED), st.just(_EVERY_TOKEN), _kdoc())), _cuts)
def test_fuzz_kineto_mutated_chunked_equals_whole(raw, cuts):
    """Broken text: refused in chunks exactly where refused whole."""
    ok = _kineto_both(raw)[2]
    assume(ok)
    _assert_chunked_equal(raw, [c % (len(raw) + 1) for c in cuts], _native_whole(raw),
                          _python_whole(raw))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(1, 1 << 16))
def test_kineto_real_file_chunked_equals_whole(size):
    files = sorted(shared_files((".json.gz",)), key=os.path.getsize)
    if not files:
        pytest.skip(f"real traces not available ({SHARED} is absent)")
    raw = _read(files[0])
    cuts = range(size, len(raw), size)
    _assert_chunked_equal(raw, cuts, _native_whole(raw), _python_whole(raw))


def _lines_doc(n: int, false_starts: bool, indent: str | None = "") -> bytes:
    """A Kineto-layout document (an event a line, after ``indent``) whose later lines
    bring names, categories and threads the earlier ones have not, metadata events in
    the middle, stats (a float among them; shapes as string stats), elements that are no
    events, and (``false_starts``) args objects on lines of their own and lists of objects in args."""
    lines = []
    for i in range(n):
        if i % 37 == 5:
            lines.append(json.dumps({"ph": "M", "name": "thread_name", "pid": 1, "tid": i,
                                     "args": {"name": f"worker {i}"}}))
            continue
        if i % 53 == 7:
            lines.append("[1, 2]" if i % 2 else "null")
            continue
        args = {"External id": i, "correlation": i * 3}
        if i % 11 == 0:
            args["bytes"] = i + 0.5
        if i % 4 == 0:                  # shapes: texts shared, later lines bring new ones
            args["Input Dims"] = [[i // 100, 2], []]
            args["Input type"] = ["float", "" if i % 8 else "Int"]
            args["Concrete Inputs"] = ["", f"[{i // 50}, 1]"]
            args["flops"] = i * 1000
        if false_starts and i % 5 == 0:
            args["shapes"] = [{"dims": [i, 2]}, {"dims": [3]}]    # ", {" inside an event
        e = {"ph": "X", "cat": f"cat{i // 90}", "name": f"op{i % 7}_{i // 60}",
             "pid": 1, "tid": i // 40, "ts": 1669783687464181.125 + i, "dur": 0.5}
        text = json.dumps(e)[:-1] + ', "args": ' \
            + ("\n" + (indent or "") if false_starts and i % 3 else "") + json.dumps(args) + "}"
        lines.append(text)
    if indent is None:                  # all on one line
        return ('{"schemaVersion": 1, "traceEvents": [' + ",".join(lines)
                + '], "displayTimeUnit": "ns"}').encode()
    return ('{"schemaVersion": 1, "traceEvents": [\n' + indent + (",\n" + indent).join(lines)
            + '\n], "displayTimeUnit": "ns"}').encode()


@pytest.mark.parametrize("indent", [None, "", "  ", "\t "],
                         ids=["one-line", "flush", "libkineto", "tab"])
@pytest.mark.parametrize("false_starts", [False, True], ids=["events", "args-on-own-lines"])
def test_kineto_stretches_walked_ahead_are_taken_whole_and_agree(monkeypatch, false_starts,
                                                                  indent):
    """``feed_many`` gives what the whole text gives, for chunks of many sizes; the
    stretches between event starts (a '{' opening a line, after any indent) are taken
    whole (not walked again by the stream), and a '{' that opens a line inside an event
    is walked by the stream instead."""
    raw = _lines_doc(400, false_starts, indent)
    whole = _native_whole(raw)
    assert whole is not None and whole["n_raw"] == 400
    walked, taken = [], []
    real = native_scan._native

    class Counting:
        def __getattr__(self, k):
            return getattr(real, k)

        @staticmethod
        def kineto_part(*a):
            walked.append(real.kineto_part(*a))
            return walked[-1]

        @staticmethod
        def kineto_absorb(stream, part):
            taken.append(real.kineto_absorb(stream, part))
            return taken[-1]

    monkeypatch.setattr(native_scan, "_native", Counting())
    for size in (1, 97, 500, 2000, 1 << 20):
        walked.clear()
        taken.clear()
        got = _native_many(raw, range(size, len(raw), size))
        assert got is not None, size
        _same(whole, got)
        if size < 500:
            continue
        if false_starts:      # stretches that start or end inside an event are walked again
            assert size == 1 << 20 or None in walked, size
        else:
            assert walked and None not in walked and taken == [True] * len(walked), size


def _stretch_by_regex(chunk: bytes) -> tuple:
    """``_stretch`` as its definition reads: the first and the last ``_OPENS`` match."""
    found = list(native_scan._OPENS.finditer(chunk))
    return (found[0].end() - 1, found[-1].end() - 1) if found else (0, 0)


def test_kineto_stretch_bounds_agree_with_the_pattern():
    """The stretch a chunk is walked ahead over (its first and last event start, the
    last found from the end) is where the pattern's first and last matches put it: in
    windows of every layout, and where the search from the end gives way to the pattern
    (braces that open no event, long runs of blanks, no event start at all)."""
    rng = random.Random(24)
    docs = [_lines_doc(300, fs, ind) for fs in (False, True) for ind in (None, "", "  ", "\t ")]
    for raw in docs:
        for _ in range(300):
            a = rng.randrange(len(raw))
            b = min(len(raw), a + rng.choice((1, 7, 60, 300, 2000, 20000)))
            chunk = raw[a:b]
            assert native_scan._stretch(chunk) == _stretch_by_regex(chunk), (a, b)
    nested = b'{"a": ' + b'{"b": ' * 100 + b"1" + b"}" * 100 + b"}"
    crafted = [
        b"", b"{", b",{", b"[ \t\r\n{", b'"x": {"y": 1}', b'},\n  {"ph": "X"}, {"a": {}}',
        b'}, {"ph": "X", "args": ' + nested,                       # 100 braces after it
        b'}, {"ph": "X"}' + b" " * 100 + b"{",                      # blanks, no opener
        b'}, {"ph": "X"},' + b" " * 100 + b'{"ph": "X"}',           # blanks after a comma
        b'[' + b" " * 70 + b'{' + b' ' * 5 + b',{',
        b'}, {"ph": "X", "args": {"shapes": [{"d": [1]}, {"d": [2]}]}}',
    ]
    for chunk in crafted:
        for cut in range(len(chunk) + 1):
            for part in (chunk[cut:], chunk[:cut]):
                assert native_scan._stretch(part) == _stretch_by_regex(part), part
    # blank runs longer than each window the search from an event start back to its
    # opener strips, up to chunks of nothing else; more braces that open no event than
    # the searches from either end try before the pattern decides
    long_runs = [b" " * 5000, b" \n\t\r" * 20000, b" " * (1 << 20)]
    braces = b'"x": {"y": 1}, ' * 100
    for run in long_runs:
        for chunk in (run, b"[" + run + b"{", b"," + run + b"{" + run, b"{" + run + b"[",
                      b'}, {"ph": "X"},' + run + b'{"ph": "X"}' + run + b",",
                      b"[" + braces + run + b", {" + braces + run + b"[{" + braces,
                      braces + run + braces):
            assert native_scan._stretch(chunk) == _stretch_by_regex(chunk), chunk[:40]


def test_kineto_blank_runs_of_any_length_read_as_the_reference_reads_them():
    """JSON's four blanks in runs of every length up to past several machine words, at
    every alignment, between every token: the same columns as the reference, whole, in
    chunks and walked ahead; a byte that is not a JSON blank (a form feed, a vertical
    tab, a NUL, a non-breaking space, a lone UTF-8 byte) at any place of a long run is
    refused by both."""
    blanks = b" \n\r\t"
    rng = random.Random(48)
    for n in list(range(0, 41)) + [63, 64, 65, 1000, 4099]:
        run = bytes(rng.choice(blanks) for _ in range(n))
        lead = b" " * (n % 8)                       # every alignment of the run
        raw = (lead + b'{' + run + b'"traceEvents"' + run + b':' + run + b'[' + run
               + run.join([b'{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}',
                           b'{"ph"' + run + b':' + run + b'"X", "name": "b", "pid": 1, '
                           b'"tid": 1, "ts": 5,' + run + b'"dur": 1}']).replace(b"}{", b"},{")
               + run + b']' + run + b'}' + run)
        raw = raw.replace(b"}" + run + b"{", b"}" + run + b"," + run + b"{")
        whole_nat, whole_ref = _native_whole(raw), _python_whole(raw)
        assert whole_nat is not None and not isinstance(whole_ref, str), (n, whole_ref)
        assert whole_nat["n_raw"] == 2
        _same(whole_ref, whole_nat)
        _assert_chunked_equal(raw, range(7, len(raw), 97), whole_nat, whole_ref)
    for run in (b" " * 64, b"\n" * 64, b"\r" * 64, b"\t" * 64, b" \n  \t\r  " * 8):
        for bad in (b"\x0c", b"\x0b", b"\x00", b"\xa0", b"\xc2\xa0", b"\x80", b"x"):
            for at in range(0, len(run) + 1):
                raw = (b'{"traceEvents": [' + run[:at] + bad + run[at:]
                       + b'{"ph": "X", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}')
                assert _native_whole(raw) is None, (run[:2], bad, at)
                assert isinstance(_python_whole(raw), str), (run[:2], bad, at)
    long_run = b" " * 3000 + b"\n\t " * 3000      # past each window either scanner strips
    for bad in (b"\x0c", b"\x0b", b"\x00", b"\xa0"):
        for at in (0, 15, 16, 17, 63, 64, 65, 4159, 4160, 4161, 3000, 3001, 12287, len(long_run)):
            raw = (b'{"traceEvents": [' + long_run[:at] + bad + long_run[at:]
                   + b'{"ph": "X", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}')
            assert _native_whole(raw) is None, (bad, at)
            assert isinstance(_python_whole(raw), str), (bad, at)


def test_kineto_walks_ahead_stop_with_the_file_that_fails():
    """A read that fails part way (a file over the budget, a broken gzip) ends
    ``feed_many`` with that failure, its threads stopped."""
    import threading
    raw = _lines_doc(400, False)

    def chunks():
        yield raw[:3000]
        yield raw[3000:6000]
        raise TraceError("t.json", "over the budget")
    st_ = native_scan.KinetoStream()
    with pytest.raises(TraceError, match="over the budget"):
        st_.feed_many(chunks(), workers=2)
    assert not [t for t in threading.enumerate() if t.name.startswith("tb-perfdiag-scan")]


def test_scan_columns_own_their_memory_and_outlive_the_scan():
    """A column the scanner hands over is a writable buffer of exactly its bytes that
    stays valid while an array views it, after the scan's dict and the input are gone;
    columns that grew through many doublings (a mapping moved by mremap) keep their
    values."""
    import gc
    native_scan = pytest.importorskip("tb_perfdiag.trace.native_scan")
    n = 300_000                      # the columns grow well past their first 64 KiB
    raw = _big_kineto(n)
    cols = native_scan._native.scan_kineto(raw)
    dur = cols["dur_ps"]
    assert len(dur) == len(memoryview(dur)) == memoryview(dur).nbytes
    a = np.frombuffer(dur, np.int64)
    assert a.flags.writeable and a.shape[0] >= n
    want = a.copy()
    del cols, dur, raw
    gc.collect()
    junk = [np.ones(1 << 20) for _ in range(8)]      # reuse of freed memory would show
    np.testing.assert_array_equal(a, want)
    a[:] = 7                                          # writable, and nobody else's
    assert int(a.sum()) == 7 * a.shape[0]
    del junk
