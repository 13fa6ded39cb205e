"""The model's compact strings behave as the list they replace."""
from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_perfdiag.trace import strings as S
from tb_perfdiag.trace.strings import Strings, contains_text, joined, strings_nbytes, take

_TEXT = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff", "\0", "\n"]),
                max_size=6)
# few characters: probes that are prefixes, suffixes and joins of the strings are common
_NARROW = st.text(alphabet=st.sampled_from(["a", "b", "é", "\0", "\ud800", "\U0001f600"]),
                  max_size=4)


def _same(items: list, got: Strings) -> None:
    assert len(got) == len(items)
    assert list(got) == items
    assert [got[i] for i in range(len(items))] == items
    assert [got[-i] for i in range(1, len(items) + 1)] == [items[-i] for i in range(1, len(items) + 1)]
    for sl in (slice(None), slice(1, None), slice(None, -1), slice(None, None, 2),
               slice(None, None, -1), slice(2, 1)):
        assert got[sl] == items[sl]
    assert got == items and got == Strings(items)
    for s in set(items):
        assert got.index(s) == items.index(s)
        assert s in got


@settings(max_examples=150, deadline=None)
@given(st.lists(_TEXT, max_size=40), st.sampled_from([1, 2, 3, 1 << 16]))
def test_like_a_list(items, block):
    old = S._BLOCK
    S._BLOCK = block       # blocks of one, two, three strings and one block of all
    try:
        got = Strings(items)
    finally:
        S._BLOCK = old
    _same(items, got)
    back = pickle.loads(pickle.dumps(got))
    _same(items, back)
    ids = [i for i in range(len(items)) for _ in range(i % 3)]
    assert got.take(ids) == take(items, ids) == [items[i] for i in ids]
    for stop in (None, 0, 1, 3, 100):
        want = None if any("\n" in x for x in items[:stop]) else "\n".join(items[:stop])
        assert got.joined(stop) == joined(items, stop) == want


@settings(max_examples=150, deadline=None)
@given(st.lists(_NARROW, max_size=12), _NARROW)
def test_search_never_matches_across_strings(items, probe):
    got = Strings(items)
    assert (probe in got) == (probe in items)
    if probe in items:
        assert got.index(probe) == items.index(probe)
    else:
        with pytest.raises(ValueError):
            got.index(probe)
    assert got.contains_text(probe) == any(probe in s for s in items)
    assert contains_text(got, probe) == contains_text(items, probe) == any(probe in s for s in items)


def test_bounds_and_types():
    got = Strings(["ab", "c", "", "ab"])
    with pytest.raises(IndexError):
        got[4]
    with pytest.raises(IndexError):
        got[-5]
    assert got[np.int32(1)] == "c" and got[np.int64(-1)] == "ab"
    assert Strings(["ab", "a"]).index("a") == 1 and "a" not in Strings(["ab", "ba"])
    assert got.index("ab") == 0 and got.index("ab", 1) == 3 and got.index("") == 2
    with pytest.raises(ValueError):
        got.index("bc")              # "ab" + "c" in the buffer, but no string is "bc"
    with pytest.raises(ValueError):
        got.index("ab", 1, 3)
    assert 5 not in got and not got.contains_text("bc") and got.contains_text("b")
    assert got != ["ab", "c", "", "x"] and got != ["ab"]
    assert len(Strings()) == 0 and list(Strings()) == [] and not Strings().contains_text("")


def test_holds_its_bytes_compactly():
    items = [f"/workspace/train.py:{i}" for i in range(200_000)]
    got = Strings(items)
    listed = sys.getsizeof(items) + sum(sys.getsizeof(s) for s in items)
    assert 0 <= sys.getsizeof(got) - strings_nbytes(got) < 200   # a cache's measure
    assert strings_nbytes(got) == sum(len(s) for s in items) + 4 * (len(items) + 1)
    assert strings_nbytes(got) * 2.5 < listed


def test_freeze_empties_the_table_and_every_alias():
    from tb_perfdiag.trace.build import StringTable
    table = StringTable()
    ids = table.intern_many(["a", "b", "a", "é"])
    alias = table.strings
    frozen = table.freeze()
    assert frozen == ["a", "b", "é"]
    assert [frozen[i] for i in ids] == ["a", "b", "a", "é"]
    assert alias == [] and table._index == {}


@pytest.mark.parametrize("fmt", ["kineto", "xspace"])
def test_readers_give_compact_strings(fmt):
    from tb_perfdiag.testing import TraceBuilder
    b = TraceBuilder(fmt)
    py = b.thread("python")
    op = b.op(py, "aten::mm", 0, 10)
    t = b.build()
    assert isinstance(t.strings, Strings)
    assert t.event_name(op.index) == "aten::mm"
    assert t.strings.index("aten::mm") == int(t.name[op.index])


@pytest.mark.parametrize("names, want", [
    (["aten__convolution", "x"], "pytorch_xla"), (["x", "jit(train_step)"], "jax"),
    (["a\n__inference_f", "b"], "xla"), (["b", "__inference_f_12"], "tensorflow"),
    (["XjaxY"], "xla"), (["rejit(x)"], "xla")])
def test_the_framework_is_found_in_the_joined_names_as_in_each(names, want):
    """The framework test searches the names as one text, a line each: the same answer
    as a search of each name, with ``^`` at each name's start, and never across two."""
    from types import SimpleNamespace
    from tb_perfdiag.analysis.attribution import culprits as CU
    for strings in (names, Strings(names)):
        t = SimpleNamespace(format="xspace", strings=strings, track_name=["python"])
        got = CU.framework(t)
        assert got == {"pytorch_xla": CU.PYTORCH_XLA, "jax": CU.JAX,
                       "tensorflow": CU.TENSORFLOW, "xla": CU.XLA}[want], (strings, got)
