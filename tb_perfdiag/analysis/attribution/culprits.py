"""Who to blame, in the user's terms: the trace's framework, the innermost frame of the
user's own code above an op, the op chain below it, and what kind of sync a blocking
call is.  Names are normalised so that one culprit is one finding (no object
addresses, no step numbers, no recursion)."""
from __future__ import annotations

import re
import sys

import numpy as np

from ...trace.build import distinct
from ...trace.classify import frame_name
from ...trace.model import EventKind as K, Trace
from ...trace.strings import contains_text, joined
from ..device_time.by_op import fold_kernel_name

PYTORCH, PYTORCH_XLA, JAX, TENSORFLOW, XLA = "pytorch", "pytorch_xla", "jax", "tensorflow", "xla"

_TORCH_XLA = re.compile(r"XLAGraphExecutor|StepMarker|PjRtComputationClient|SyncTensorsGraph|"
                        r"^aten__|torch_xla|tf_pytorchxla")
_JAX = re.compile(r"^PjitFunction|backend_compile|pxla|^jit\(|jax\.|\$api\.py|jaxlib")
_TF = re.compile(r"^__inference_|EagerKernelExecute|EagerExecute|tf_Compute|"
                 r"ExecutorState::Process|FunctionRun|tf\.data|Iterator::")
# the same, searched over names joined a line each ("^" at each name's start)
_BY_LINE = {rx: re.compile(rx.pattern, re.M) for rx in (_TORCH_XLA, _JAX, _TF)}


def framework(trace: Trace) -> str:
    """The framework that wrote the trace, from its format and names."""
    if trace.format == "kineto":
        return PYTORCH
    # the names searched as one text, a line each (no string decoded on its own)
    text = joined(trace.strings, 200_000)
    names = trace.strings[:200_000] if text is None else []
    tracks = list(trace.track_name)
    for rx, fw in ((_TORCH_XLA, PYTORCH_XLA), (_JAX, JAX), (_TF, TENSORFLOW)):
        if (text is not None and _BY_LINE[rx].search(text)) or \
                any(rx.search(n) for n in names) or any(rx.search(n) for n in tracks):
            return fw
    return XLA


# ---- what the trace already does ----
_COMPILED = ("CompiledFunction", "Torch-Compiled Region", "CompiledFxGraph")
_WORKERS = ("_MultiProcessingDataLoaderIter",)
_WORKER_TRACKS = re.compile(r"pt_data_worker|DataLoader worker|dataloader_worker", re.I)


def applied_fixes(trace: Trace) -> frozenset:
    """The fixes a finding could offer that this trace already applies, so that it
    offers the next step instead: "compiled" (torch.compile: AOTAutograd's
    ``CompiledFunction``/``CompiledFunctionBackward``), "graphs" (CUDA-graph replays),
    "workers" (a multi-process DataLoader, or its worker threads), "pinned" (every
    host→device copy is from pinned memory), "jitted" (JAX ``PjitFunction`` dispatches,
    TensorFlow's ``tf.function`` graphs)."""
    S = trace.strings
    out = set()
    if any(contains_text(S, x) for x in _COMPILED):
        out.add("compiled")
    if any(contains_text(S, x) for x in _WORKERS) or any(
            _WORKER_TRACKS.search(n) for n in trace.track_name):
        out.add("workers")
    if contains_text(S, "PjitFunction(") or contains_text(S, "__inference_"):
        out.add("jitted")
    launches = trace.kind == K.LAUNCH
    if launches.any() and any("graphlaunch" in S[int(x)].lower()
                              for x in distinct(trace.name[launches]).tolist()):
        out.add("graphs")
    mem = [S[int(x)] for x in distinct(trace.name[trace.kind == K.MEMCPY]).tolist()]
    h2d = [m for m in mem if "HtoD" in m or "H2D" in m]
    if h2d and all("Pinned" in m for m in h2d):
        out.add("pinned")
    return frozenset(out)


# ---- user frames ----
_KINETO_FRAME = re.compile(r"^(?P<file>.+?\.py)\((?P<line>\d+)\): (?P<func>.+)$")
_JAX_FRAME = re.compile(r"^\$(?P<file>[^ :]+\.py):(?P<line>\d+) (?P<func>.+)$")
_LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|^<|^(torch|torchvision|"
                      r"torch_xla|torchaudio|numpy|jax|jaxlib|flax|optax|tensorflow|keras|"
                      r"tqdm|transformers|accelerate|lightning|pytorch_lightning)/")
# JAX's python tracer writes bare file names: its own modules are known by name
_JAX_MODULES = {"api", "pjit", "pxla", "dispatch", "compiler", "core", "linear_util",
                "traceback_util", "api_util", "tree_util", "xla_bridge", "mlir", "lax",
                "ad", "partial_eval", "batching", "config", "util", "sharding_impls",
                "source_info_util", "dtypes", "array", "profiler", "_linalg", "fromnumeric",
                "numeric", "shape_base", "lax_numpy", "ufuncs", "reductions", "interpreters",
                "xla", "jax_jit", "random", "prng", "stages", "monitoring", "pickle_util",
                "op_shardings", "layout", "sharding", "mesh", "utils", "functions"}
_STDLIB = set(getattr(sys, "stdlib_module_names", ()))
_ADDRESS = re.compile(r" (object )?at 0x[0-9a-fA-F]+")
_STEP_NUM = re.compile(r"^(ProfilerStep)#\d+$")
# a C++ signature: template arguments or a parameter list after a qualified name
_SIGNATURE = re.compile(r"^void |\w::\w[\w:]*(<|\()|^\w+\(.*[*,].*\)$")


def clean(name: str) -> str:
    """A name as a finding shows it: no object address, no step number, a C++ signature
    folded as "Device time by op" folds it (``void Eigen::internal::EigenMetaKernel<
    Eigen::TensorEvaluator<…>, long>(…, long)`` → ``Eigen::internal::EigenMetaKernel<…>``)."""
    return readable(_STEP_NUM.sub(r"\1", _ADDRESS.sub("", name)))


def readable(name: str) -> str:
    """``name`` with a C++ signature's template and parameter lists folded (as "Device
    time by op" folds kernels), a compiled region's call by its frame (``CompiledFxGraph``,
    not its hash); any other name as it is."""
    name = frame_name(name)
    if _SIGNATURE.search(name) and not _KINETO_FRAME.match(name) and \
            not _JAX_FRAME.match(name):
        return fold_kernel_name(name)
    return name


def user_frame(name: str) -> str | None:
    """'file.py:line func' when ``name`` is a Python frame of the user's own code."""
    m = _KINETO_FRAME.match(name) or _JAX_FRAME.match(name)
    if not m:
        return None
    path = m.group("file")
    if _LIBRARY.search(path):
        return None
    top = path.split("/", 1)[0]
    base = path.rsplit("/", 1)[-1][:-3]
    if top[:-3] in _STDLIB or top in _STDLIB or (base in _STDLIB and "/" not in path):
        return None
    if name.startswith("$") and base in _JAX_MODULES:
        return None
    return f"{path}:{m.group('line')} {m.group('func')}"


_FRAME_KINDS = (int(K.PYTHON), int(K.DATA))
_ANNOTATION_KINDS = (int(K.ANNOTATION), int(K.DATA))


class Culprits:
    """Per culprit event: where it sits in the user's code and the op chain below."""

    def __init__(self, trace: Trace):
        self.t = trace
        self._memo: dict = {}          # (name ids, kinds) of a chain → description
        self._by_event: dict = {}      # primed event → its chain id
        self._made: dict = {}          # chain id → description, as first asked for
        # per prime: (first chain id, chain rows with the step set aside, their
        # descriptions once made, the row of each chain, its step's name id or −1)
        self._aside: list = []
        self._clean: dict = {}
        # primed events (sorted) and the distinct chain (name, kind per frame) of each
        self._ev = np.zeros(0, np.int64)
        self._chain_id = np.zeros(0, np.int64)
        self._chain_rows: list = []    # (first chain id, its rows of codes) per prime
        self._n_chains = 0
        # per primed chain: (its chain with the step set aside, numbered over all primes)
        # << 32 | 1 + the number of its step's cleaned name (0: none set aside)
        self._desc_id = np.zeros(0, np.int64)
        self._n_aside = 0
        self._clean_no: dict = {}

    def _name(self, i: int) -> str:
        got = self._clean.get(i)
        if got is None:
            got = self._clean[i] = clean(self.t.strings[i])
        return got

    def prime(self, events) -> None:
        """Ready many events to be described: their chains as rows of a matrix, each
        distinct chain described once, when first asked for (100 k culprits on a 2 M-event
        trace share a few hundred)."""
        t = self.t
        ev = distinct(np.asarray(events, np.int64))
        ev = ev[ev >= 0]
        if ev.size == 0:
            return
        cols, cur = [], ev
        while (cur >= 0).any():
            ok = cur >= 0
            c = np.maximum(cur, 0)
            cols.append(np.where(ok, t.name[c].astype(np.int64) * 64 + t.kind[c], -1))
            cur = np.where(ok, t.parent[c], -1)
        rows = np.stack(cols[::-1], axis=1)                 # outermost first, −1 padded
        from ...trace.build import unique_rows
        u, inv = unique_rows(rows)
        del rows
        # a chain under ProfilerStep#N differs from step to step by that name alone: each
        # chain is worked out once with its one step frame's name set aside (a 20 M-event
        # trace: 90 k distinct chains, 3.8 k without the step names), then the name is put
        # back.  Chains with two step frames, or another frame named like the step, are
        # worked out whole.
        is_step = (u >= 0) & (u % 64 == int(K.STEP))
        one = is_step.sum(axis=1) == 1
        step_at = np.argmax(is_step, axis=1)
        step_name = np.where(one, u[np.arange(u.shape[0]), step_at] // 64, -1)
        same = ((u // 64) == step_name[:, None]) & (u >= 0)
        one &= same.sum(axis=1) == 1
        del is_step, same
        aside = u.copy()
        aside[one, step_at[one]] = -2 * 64 + int(K.STEP)    # name −2: not a string id
        ua, inv_a = unique_rows(aside)
        del aside
        # described when first asked for: most chains are never shown (a 2 M-event trace
        # primes 9 k chains of which findings ask for half)
        step_of = np.where(one, step_name, -1)
        self._aside.append((self._n_chains, ua.tolist(), [None] * ua.shape[0],
                            inv_a.reshape(-1).tolist(), step_of.tolist()))
        names = distinct(step_of[step_of >= 0])
        no = np.array([self._clean_no.setdefault(self._name(i), len(self._clean_no) + 1)
                       for i in names.tolist()], np.int64)
        cleaned = np.zeros(step_of.shape[0], np.int64)
        cleaned[step_of >= 0] = no[np.searchsorted(names, step_of[step_of >= 0])]
        self._desc_id = np.concatenate((self._desc_id, (
            (inv_a.reshape(-1).astype(np.int64) + self._n_aside) << 32) | cleaned))
        self._n_aside += ua.shape[0]
        ids = inv.reshape(-1) + self._n_chains
        self._by_event.update(zip(ev.tolist(), ids.tolist()))
        self._ev, self._chain_id = ev, ids
        self._chain_rows.append((self._n_chains, u))
        self._n_chains += u.shape[0]

    def _chain(self, row: list, holder: str | None = None) -> tuple:
        """The description of one chain of (name × 64 + kind) codes, −1 padded; a name
        of −2 is ``holder``."""
        code = [x for x in row if x >= 0 or x // 64 == -2]
        key = (tuple(x // 64 for x in code), tuple(x % 64 for x in code))
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._describe(
                [holder if i == -2 else self._name(i) for i in key[0]], list(key[1]))
        return got

    def chain_ids(self, events) -> np.ndarray:
        """Per event of the last ``prime``: the id of its distinct chain (events with one
        id have one description); −1 for −1, and a distinct negative id (below −1) for
        an event that was not primed."""
        e = np.asarray(events, np.int64)
        k = np.minimum(np.searchsorted(self._ev, e), max(self._ev.shape[0] - 1, 0))
        hit = (e >= 0) & (self._ev.shape[0] > 0)
        if self._ev.shape[0]:
            hit &= self._ev[k] == e
        return np.where(hit, self._chain_id[k] if self._ev.shape[0] else 0,
                        np.where(e >= 0, -2 - e, -1))

    def description_ids(self, chain_ids) -> np.ndarray:
        """Per id of ``chain_ids``: an id that two primed chains share when their
        descriptions are one by construction, the same chain once its step frame's name
        is set aside and the same step name once cleaned (ProfilerStep#7 and #8 are one
        ``ProfilerStep``); an id below 0 is given back as it is."""
        c = np.asarray(chain_ids, np.int64)
        return np.where(c >= 0, self._desc_id[np.maximum(c, 0)] if self._desc_id.size else 0,
                        c)

    def chain_names(self, chain_id: int) -> list:
        """The names of a primed chain as the trace writes them, outermost first."""
        for first, rows in reversed(self._chain_rows):
            if chain_id >= first:
                return [self.t.strings[x // 64] for x in rows[chain_id - first].tolist()
                        if x >= 0]
        raise IndexError(chain_id)

    def _primed(self, cid: int) -> tuple:
        """The description of primed chain ``cid``: its chain with the step frame's name
        set aside, worked out once, then the name put back."""
        got = self._made.get(cid)
        if got is not None:
            return got
        first, rows, made, row_of, step = next(x for x in reversed(self._aside)
                                               if cid >= x[0])
        holder = "\0step\0"
        a = row_of[cid - first]
        if made[a] is None:
            made[a] = self._chain(rows[a], holder)
        where, ops, chain = made[a]
        name_id = step[cid - first]
        if name_id >= 0:
            name = self._name(name_id)
            put = (lambda x: name if x == holder else x)  # noqa: E731
            where, ops, chain = put(where), tuple(map(put, ops)), tuple(map(put, chain))
        got = self._made[cid] = (where, ops, chain)
        return got

    def describe(self, e: int) -> tuple:
        """(where, ops, chain) of event ``e``: the innermost user frame (else the innermost
        user annotation) above it, the op names from there down to ``e`` (recursion
        collapsed), and the whole cleaned chain.  Chains repeat from step to step: each
        distinct one is worked out once."""
        cid = self._by_event.get(e)
        if cid is not None:
            return self._primed(cid)
        t = self.t
        chain = t.chain(e) if e >= 0 else []
        key = (tuple(t.name[chain].tolist()), tuple(t.kind[chain].tolist())) if chain else ((), ())
        got = self._memo.get(key)
        if got is None:
            got = self._memo[key] = self._describe([self._name(i) for i in key[0]],
                                                   list(key[1]))
        return got

    @staticmethod
    def _describe(names: list, kinds: list) -> tuple:
        where, cut = None, -1
        for j in range(len(names) - 1, -1, -1):
            if kinds[j] in _FRAME_KINDS:
                uf = user_frame(names[j])
                if uf:
                    where, cut = uf, j
                    break
        if where is None:
            for j in range(len(names) - 1, -1, -1):
                if kinds[j] in _ANNOTATION_KINDS or (kinds[j] == int(K.STEP)
                                                     and j == len(names) - 1):
                    where, cut = names[j], j
                    break
        ops = []
        for j in range(cut + 1, len(names)):
            if kinds[j] == int(K.PYTHON) or (ops and ops[-1] == names[j]):
                continue
            ops.append(names[j])
        return (where, tuple(ops[-4:]), tuple(
            n for k, n in enumerate(names) if not (k and names[k - 1] == n)))


# ---- what a blocking call is ----
SYNC_KINDS = (
    ("nonzero", re.compile(r"^aten::nonzero")),
    ("unique", re.compile(r"^aten::(_unique|unique)")),
    ("mask", re.compile(r"^aten::(masked_select|index)$")),
    ("is_nonzero", re.compile(r"^aten::is_nonzero$")),
    ("item", re.compile(r"^aten::(item|_local_scalar_dense)$")),
    ("xla_transfer", re.compile(r"TransferFromDevice|ToLiteral|TransferLiteralFromDevice")),
    ("jax_transfer", re.compile(r"PjRtBuffer::Await|np\.asarray|device_get|CopyToHost")),
    ("block_until_ready", re.compile(r"BlockHostUntilReady|block_until_ready|AwaitBuffersReady",
                                     re.I)),
    ("copy", re.compile(r"^aten::(to|_to_copy|copy_)$")),
    ("event_sync", re.compile(r"EventSynchronize", re.I)),
    ("stream_sync", re.compile(r"(Stream|Device|Ctx)Synchronize|Synchronize", re.I)),
    ("memcpy", re.compile(r"[Mm]emcpy")),
)
SYNC_LABELS = {"nonzero": "torch.nonzero", "unique": "torch.unique",
               "mask": "boolean-mask indexing", "is_nonzero": "`if tensor:` (is_nonzero)",
               "item": ".item() device→host read", "xla_transfer": "device→host transfer",
               "jax_transfer": "device→host read of a jax.Array",
               "block_until_ready": "block_until_ready", "event_sync": "event synchronize",
               "stream_sync": "explicit synchronize", "d2h_copy": "device→host copy",
               "pageable_d2h": "device→host copy to pageable memory",
               "pageable_h2d": "host→device copy from pageable memory",
               "memcpy": "synchronous copy", "": "a host–device sync"}


def sync_kind(trace: Trace, ctx, chain_events: list) -> str:
    """What a blocking call (its chain, outermost first) is: the most specific op wins;
    a copy is named by its direction and whether the host memory was pageable."""
    names = [trace.strings[int(trace.name[i])] for i in chain_events]
    kind, at = chain_sync_kind(names)
    return _copy_kind(trace, ctx, chain_events[at]) if kind == "copy" else kind


def chain_sync_kind(names: list) -> tuple:
    """(kind, index of the innermost frame that names it) from a chain's names alone;
    kind "copy" still needs the copy's own launches to say which copy it is."""
    for kind, rx in SYNC_KINDS:
        hit = [i for i, n in enumerate(names) if rx.search(n)]
        if hit:
            return kind, hit[-1]
    return "", -1


def _copy_kind(trace: Trace, ctx, op: int) -> str:
    """d2h_copy / pageable_d2h / pageable_h2d from the memcpy the copy op issued."""
    lo, hi = trace.track_slices([trace.track[op]])[0]
    end = trace.end_of(op)
    sub = lo + np.flatnonzero((trace.ts[lo:hi] >= trace.ts[op]) & (trace.ts[lo:hi] < end))
    launches = sub[ctx.launch_memcpy[sub] > 0]
    if launches.size == 0:
        return "d2h_copy"
    direction = int(ctx.launch_memcpy[launches[0]])
    copies = ctx.memcpy_of.with_code()
    dev = copies[np.isin(ctx.origin[copies], launches)]
    pageable = any("pageable" in trace.strings[int(trace.name[d])].lower() for d in dev[:4])
    if direction == 1:
        return "pageable_h2d" if pageable else "h2d_copy"
    return "pageable_d2h" if pageable else "d2h_copy"
