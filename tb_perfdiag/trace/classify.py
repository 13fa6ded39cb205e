"""Name rules that decide an event's kind, shared by both readers.

Rules run once per distinct name (never per event): readers classify the interned
name table and index the result with the name column.
"""
from __future__ import annotations

import re

from .model import EventKind as K

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")

_SYNC = re.compile(r"(Synchronize|StreamSync|DeviceSync|EventSync|BlockUntilReady|"
                   r"block_until_ready|AwaitBuffersReady|BlockHostUntilReady|"
                   r"PjRtBuffer::Await|PjRtStreamExecutorBuffer::Await)", re.I)
_ALLOC = re.compile(r"^(cu|cuda|hip|hipExt)(Mem)?(Malloc|Free|Alloc|HostAlloc|HostFree|"
                    r"MallocHost|FreeHost|MallocAsync|FreeAsync|MallocManaged|"
                    r"MallocWithFlags|MallocPitch|Malloc3D|AllocHost)\w*$|empty_cache|emptyCache",
                    re.I)
_GRAPH_CAPTURE = re.compile(r"^(cu|cuda|hip)(StreamBeginCapture|StreamEndCapture|"
                            r"GraphInstantiate|ThreadExchangeStreamCaptureMode)\w*$|"
                            r"CUDAGraph::capture|capture_begin|capture_end", re.I)
# a Python frame of the input pipeline (its callees inherit data loading by nesting)
_DATA_FRAME = re.compile(r"(torch/utils/data/|tensorflow/python/data/|tf\.data|"
                         r"torchvision/datasets/|/datasets?/|DataLoader|"
                         r"_next_data|collate)", re.I)
# record_function annotations PyTorch itself writes, which 2021 traces file as operators
_FRAMEWORK_ANNOTATION = re.compile(r"^(Optimizer\.\w+#|[A-Za-z_][\w.]*#[\w.]+$|## .* ##$)")
# allocation ops: their own time is the caching allocator getting memory
_ALLOC_OP = re.compile(r"^aten::(empty|empty_strided|empty_like|new_empty|new_empty_strided)$")
# a thread waiting while another thread does the work (autograd's engine threads)
_THREAD_WAIT = re.compile(r"run_backward|Engine::execute\b|engine_run_backward")
# host ops that block until the device hands back a value (.item(), float(tensor))
_BLOCKING_OP = re.compile(r"^aten::(_local_scalar_dense|is_nonzero)$")
_LAUNCH = re.compile(r"^(cu|cuda|hip|mtia)\w*(Launch|Memcpy|Memset|GraphLaunch)", re.I)
_DATA = re.compile(r"(enumerate\(DataLoader\)|DataLoader|data_?load|dataloader|"
                   r"_next_data|get_batch|input_pipeline|prefetch)", re.I)
# tf.data: the consumer's side (IteratorGetNext and the iterator tree it walks, whatever
# dataset op is outermost) is the input pipeline, and so is what it runs
_TF_DATA = re.compile(r"^(IteratorGetNext\w*|EagerLocalExecute: (IteratorGetNext\w*|"
                      r"MultiDeviceIteratorGetNextFromShard)|Iterator::\w|"
                      r"MultiDeviceIteratorGetNextFromShard)")
# tf.data's own thread pools and iterator threads run nothing but the input pipeline
_TF_DATA_THREAD = re.compile(r"^tf_data_")
# tf.data's plumbing: iterators, their producer loops and the function executor wait for
# the work below them (their self time is waiting or overhead), so a pipeline's slow
# stage is the op they run (PyFunc, DecodePng, ResizeBicubic, …), never one of them
_TF_DATA_PLUMBING = re.compile(r"^(Iterator::|IteratorGetNext|\w*Produce$|"
                               r"ExecutorState::Process$|ExecutorDoneCallback$|"
                               r"InstantiatedCapturedFunction::Run|FunctionRun$|"
                               r"ThreadpoolListener::)")
_COLLECTIVE_HOST = re.compile(r"^(c10d::|nccl:|record_param_comms|ProcessGroup)", re.I)
_COMPILE = re.compile(r"(Compile|backend_compile|jit_compile|XlaCompile|compile_and_load|"
                      r"RunHloPasses|RunBackend)", re.I)
# "H2D Dispatch": the TPU runtime staging a program's inputs on its worker threads
_H2D = re.compile(r"(TransferToDevice|TransferToServer|BufferFromHost|device_put|"
                  r"TransferLiteralToDevice|CopyToDevice|^H2D Dispatch$)", re.I)
# JAX's np.asarray(jax.Array) (also under float(x)) is the user's blocking read
_D2H = re.compile(r"(TransferFromDevice|TransferFromServer|ToLiteral|_local_scalar_dense|"
                  r"CopyToHost|TransferLiteralFromDevice|device_get|"
                  r"^np\.asarray\(jax\.Array\)$)", re.I)
_EXECUTE = re.compile(r"(ExecuteComputation|ExecuteReplicated|PjRtLoadedExecutable::Execute|"
                      r"ThunkExecutor::Execute|ExecuteHelper|PjRtStreamExecutorLoadedExecutable|"
                      r"TpuExecutable|ExecuteSharded|ExecuteOnLocalDevices)", re.I)


# CUDA/HIP runtime and driver API names (XSpace has no categories to say so)
_RUNTIME_API = re.compile(r"^(cu|cuda|hip|hipExt)[A-Z]\w*$")
_IDLE = re.compile(r"^ThreadpoolListener::(StartRegion|StopRegion|Record)$")


# a Python frame of JAX's / TensorFlow's python tracer: "$file.py:123 func"
_TRACER_FRAME = re.compile(r"^\$[^ :]+\.py:\d+ ")


# Inductor names each compiled graph's call by its code's hash (``## Call CompiledFxGraph
# fjs75i4j… ##``): a name no user knows and one that changes with every edit of the model
_COMPILED_FX_CALL = re.compile(r"^## Call (CompiledFxGraph)\b.*##$")


def frame_name(name: str) -> str:
    """A compiled region's call by its frame (``CompiledFxGraph``), not by its hash; any
    other name as it is."""
    m = _COMPILED_FX_CALL.match(name) if name.startswith("## Call ") else None
    return m.group(1) if m else name


def host_kind(name: str, category: str = "") -> K:
    """Kind of a host-side event from its name and (Kineto) category."""
    if not category and _TRACER_FRAME.match(name):
        category = "python_function"
    if STEP_NAME.match(name):
        return K.STEP
    if _IDLE.match(name):
        return K.IDLE
    cat = category.lower()
    if cat in ("python_function", "python"):
        # frames of the input pipeline before anything else: their callees (decode,
        # resize, collate) are data loading too
        if _THREAD_WAIT.search(name):
            return K.WAIT
        return K.DATA if _DATA_FRAME.search(name) or _DATA.search(name) else K.PYTHON
    if cat in ("cuda_runtime", "cuda_driver", "runtime", "mtia_runtime", "hip_runtime") or \
            (not cat and _RUNTIME_API.match(name)):
        if _SYNC.search(name):
            return K.SYNC
        if _ALLOC.search(name):
            return K.ALLOC
        if _GRAPH_CAPTURE.search(name):
            return K.GRAPH_CAPTURE
        if _LAUNCH.search(name):
            return K.LAUNCH
        return K.RUNTIME
    if cat in ("user_annotation",):
        return K.DATA if _DATA.search(name) else K.ANNOTATION
    if _DATA.search(name) or _TF_DATA.match(name):
        return K.DATA
    if _COLLECTIVE_HOST.search(name):
        return K.COLLECTIVE
    if cat in ("cpu_op", "operator"):
        if _THREAD_WAIT.search(name):
            return K.WAIT
        if _BLOCKING_OP.match(name):
            return K.TRANSFER_D2H
        if _ALLOC_OP.match(name):
            return K.ALLOC
        if _FRAMEWORK_ANNOTATION.match(name) and "::" not in name:
            return K.ANNOTATION
        return K.CPU_OP
    if _GRAPH_CAPTURE.search(name):
        return K.GRAPH_CAPTURE
    # XLA host threads: names of runtime work
    if _COMPILE.search(name):
        return K.COMPILE
    if _D2H.search(name):
        return K.TRANSFER_D2H
    if _H2D.search(name):
        return K.TRANSFER_H2D
    if _EXECUTE.search(name):
        return K.EXECUTE
    if _SYNC.search(name):
        return K.SYNC
    return K.OTHER


_RUNTIME_EXECUTE = re.compile(r"Executable::ExecuteAsyncOnStream$")


def is_runtime_execute(name: str) -> bool:
    """The XLA runtime's own call that runs a compiled program on a stream."""
    return bool(_RUNTIME_EXECUTE.search(name))


def is_input_pipeline_thread(line_name: str) -> bool:
    """A host thread that only runs the input pipeline (tf.data's pools)."""
    return bool(_TF_DATA_THREAD.match(line_name))


def is_pipeline_plumbing(name: str) -> bool:
    """tf.data's iterators, producer loops and executor frames: not a stage of its own."""
    return bool(_TF_DATA_PLUMBING.match(name))


def iterator_stage(name: str) -> str:
    """'MapAndBatch' from 'Iterator::Root::MapAndBatch' or 'Iterator::MapAndBatch' ('')."""
    return name.rsplit("::", 1)[-1] if name.startswith("Iterator::") else ""


def memcpy_kind(name: str) -> str:
    """'h2d' | 'd2h' | 'd2d' | 'p2p' | '' from a memcpy event or transfer name."""
    n = name.lower()
    if "htod" in n or "h2d" in n or "host_to_device" in n or "hosttodevice" in n:
        return "h2d"
    if "dtoh" in n or "d2h" in n or "device_to_host" in n or "devicetohost" in n:
        return "d2h"
    if "dtod" in n or "d2d" in n or "devicetodevice" in n:
        return "d2d"
    if "ptop" in n or "p2p" in n or "peer" in n:
        return "p2p"
    return ""


# A collective, by its name (GUIDE §4): NCCL/RCCL kernels, XLA's collective ops in either
# spelling, TPU Megascale ops.  The one definition: the device-time table, the gap split,
# the findings and each host's collectives table all ask this.
COLLECTIVE_NAME = re.compile(r"[nr]ccl|all-?reduce|all-?gather|reduce-?scatter|all-?to-?all|"
                             r"collective-permute|megascale", re.I)
# substrings one of which every collective's lower-cased name holds (a cheap test before
# the regex over many names)
COLLECTIVE_HINTS = ("ccl", "all-", "allreduce", "allgather", "scatter", "alltoall",
                    "collective", "megascale")


def is_collective_kernel(name: str) -> bool:
    return COLLECTIVE_NAME.search(name) is not None
