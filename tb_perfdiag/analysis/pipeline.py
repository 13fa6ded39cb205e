"""The analysis as a declared pipeline: each stage says what it needs, what it makes, what
it frees after, whether it may run on the second core and where the progress bar stands
as it begins; one runner keeps the values, starts side stages and waits for them where
their place in the list is, frees what a stage drops, and hands back what was made.

Why declared: the analysis holds tens of columns per event at its peak (40 M events:
GBs), so *when* a value is dropped and *which* stages run side by side decide its memory;
written as one function, that order lived in ``del`` statements between 110 locals.  Here
``check`` proves, without running anything, that every input is made before it is read and
not yet freed, and that every output is made exactly once.

A side stage (``beside=True``) with ``start_after`` set starts on the second core as soon
as that stage is done, when the trace is small enough for two stages' memory side by side
(``paired``); it is waited for at its own place in the list.  Unpaired, it runs inline at
its place (``serial`` if given: the same outputs without the work only worth doing beside).
"""
from __future__ import annotations

from contextlib import ExitStack
from functools import partial
from dataclasses import dataclass
from typing import Callable

from ..beside import Beside


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable                   # called with its ``needs`` as keywords
    needs: tuple = ()
    makes: tuple = ()               # its result, unpacked in this order (one name: as is)
    frees: tuple = ()               # dropped from the values once it ran
    progress: tuple | None = None   # (fraction, what) told as it begins
    beside: bool = False            # may run on the second core
    start_after: str | None = None  # paired: started once this stage is done
    serial: Callable | None = None  # unpaired: run instead of ``run``


class PipelineError(ValueError):
    pass


def check(stages: list, given: tuple, result: tuple) -> None:
    """Raises ``PipelineError`` unless every stage's inputs are made (or given) before it
    reads them — for a side stage, before it starts — and not yet freed, every value is
    made once, and ``result`` is made and not freed by the end."""
    made = {g: "given" for g in given}
    freed: set = set()
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise PipelineError("two stages of one name")
    for i, s in enumerate(stages):
        start = i
        if s.start_after is not None:
            if s.start_after not in names[:i]:
                raise PipelineError(f"{s.name} starts after {s.start_after}, which is not "
                                    f"an earlier stage")
            start = names.index(s.start_after) + 1
        for n in s.needs:
            if n not in made:
                raise PipelineError(f"{s.name} needs {n}, made by no earlier stage")
            if n in freed:
                raise PipelineError(f"{s.name} needs {n}, freed before it")
            if made[n] != "given" and names.index(made[n]) >= start:
                raise PipelineError(f"{s.name} starts before {made[n]} makes {n}")
        for n in s.makes:
            if n in made:
                raise PipelineError(f"{n} made twice ({made[n]}, {s.name})")
            made[n] = s.name
        for n in s.frees:
            if n not in made or n in freed:
                raise PipelineError(f"{s.name} frees {n}, which is not held")
            freed.add(n)
    for n in result:
        if n not in made or n in freed:
            raise PipelineError(f"the result's {n} is not held at the end")


def _unpack(s: Stage, got) -> dict:
    if len(s.makes) == 1:
        return {s.makes[0]: got}
    if len(s.makes) != len(got):
        raise PipelineError(f"{s.name} made {len(got)} values for {len(s.makes)} names")
    return dict(zip(s.makes, got))


def run(stages: list, values: dict, paired: bool, progress, beside: ExitStack) -> dict:
    """Runs ``stages`` over ``values`` (the given inputs); returns the values held at the
    end.  ``beside``: the side stages' jobs are waited for however the run ends."""
    jobs: dict = {}
    starts: dict = {}
    for s in stages:
        if paired and s.beside and s.start_after is not None:
            starts.setdefault(s.start_after, []).append(s)
    for s in stages:
        if s.progress is not None:
            progress.stage(*s.progress)
        if s.name in jobs:
            got = jobs.pop(s.name).result()
        else:
            fn = s.run if paired or s.serial is None else s.serial
            got = fn(**{n: values[n] for n in s.needs})
        values.update(_unpack(s, got))
        for n in s.frees:
            del values[n]
        for side in starts.get(s.name, ()):
            jobs[side.name] = beside.enter_context(
                Beside(partial(side.run, **{n: values[n] for n in side.needs})))
    return values
