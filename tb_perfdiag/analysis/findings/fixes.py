"""What to change: one table of (finding kind, culprit, framework) → fix text.

Lookup falls back from the exact culprit to any culprit of the kind, and from the
trace's framework to the generic text ("*"), so a fix is always written for the
framework the trace came from and never names another framework's API."""
from __future__ import annotations

import re

from ..attribution.culprits import JAX, PYTORCH, PYTORCH_XLA, TENSORFLOW

_NUM_WORKERS = ("Load batches in background workers: DataLoader(num_workers>0, pin_memory=True, "
                "persistent_workers=True, prefetch_factor=2 or more), and move heavy "
                "preprocessing (decode, resize, augmentation) into the dataset so it runs in "
                "the workers.")

# the same without what pinned copies already do
_NUM_WORKERS_PINNED = ("Load batches in background workers: DataLoader(num_workers>0, "
                       "persistent_workers=True, prefetch_factor=2 or more; the copies are "
                       "already pinned), and move heavy preprocessing (decode, resize, "
                       "augmentation) into the dataset so it runs in the workers.")

FIXES = {
    # ---- host syncs ----
    ("host_sync", "nonzero", PYTORCH):
        "torch.nonzero (and ops built on it) copies the number of results to the host before "
        "it can size its output. Keep shapes static: torch.where(mask, x, 0) or multiply by the "
        "mask instead of selecting indices.",
    ("host_sync", "unique", PYTORCH):
        "torch.unique waits for the device to size its output. Count on the device with a "
        "fixed size instead (torch.bincount(x, minlength=K), or sort and compare neighbours) and "
        "keep the result as a tensor.",
    ("host_sync", "mask", PYTORCH):
        "x[mask] has a data-dependent size, so the host must wait for the mask. Use "
        "torch.where(mask, x, 0) or a masked reduction; for losses, ignore_index or "
        "reduction='none' times the mask.",
    ("host_sync", "is_nonzero", PYTORCH):
        "`if tensor:` / bool(tensor) copies the value to the host and waits for the queue. "
        "Compute the condition on the device (torch.where) or check it every N steps.",
    ("host_sync", "item", PYTORCH):
        "Every .item(), float(tensor) or print(tensor) copies to the host and waits for all "
        "queued work. Accumulate metrics as tensors on the device and read them every N steps.",
    ("host_sync", "d2h_copy", PYTORCH):
        "A .cpu() / .to('cpu') waits for all queued work. Copy into a pinned buffer with "
        "non_blocking=True and wait on a torch.cuda.Event only where the value is used, or move "
        "the copy out of the step.",
    ("host_sync", "pageable_d2h", PYTORCH):
        "A device→host copy into pageable memory blocks until the queue drains. Copy into "
        "pinned memory (tensor.pin_memory()) with non_blocking=True and synchronize on an "
        "event only where the value is needed.",
    ("host_sync", "pageable_h2d", PYTORCH):
        "A host→device copy from pageable memory makes the host stage the data while it "
        "waits. Pin the source (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy "
        "with non_blocking=True.",
    ("host_sync", "stream_sync", PYTORCH):
        "An explicit torch.cuda.synchronize() (or stream.synchronize()) empties the queue. "
        "Remove it outside timing code, or wait on a torch.cuda.Event for just the work you "
        "need.",
    ("host_sync", "event_sync", PYTORCH):
        "event.synchronize() blocks the host until the device reaches the event; order work "
        "on the device with stream.wait_event() instead, or wait as late as possible.",
    ("host_sync", "*", PYTORCH):
        "The host waited for the device here. Read results from the device less often, and "
        "only after the next step's work is queued.",
    ("host_sync", "xla_transfer", PYTORCH_XLA):
        "loss.item() / tensor.cpu() makes XLA execute the pending graph and copy its result "
        "to the host (TransferFromDevice). Keep metrics on the device and read them every N "
        "steps (xm.add_step_closure); the TransferFromDevice count in "
        "torch_xla.debug.metrics shows how often it happens.",
    ("host_sync", "*", PYTORCH_XLA):
        "Reading a value on the host forces the pending XLA graph to run and waits for it. "
        "Keep values on the device and read them every N steps (xm.add_step_closure).",
    ("host_sync", "jax_transfer", JAX):
        "np.asarray(x), float(x) or x.item() on a jax.Array waits for the computation and "
        "copies to the host. Keep values as jax.Arrays and read them every N steps, or start "
        "the copy early with x.copy_to_host_async() after dispatching the next step.",
    ("host_sync", "block_until_ready", JAX):
        "block_until_ready() waits for the device to finish; keep it for timing code, out of "
        "the training loop.",
    ("host_sync", "*", JAX):
        "The host waited for a jax.Array. Read values less often and only after the next "
        "step is dispatched (JAX dispatches asynchronously).",
    ("host_sync", "*", TENSORFLOW):
        "tensor.numpy(), float(tensor), int(tensor) or tf.print in the step copies to the "
        "host and waits for the device. Keep metrics as tensors (tf.keras.metrics or a "
        "tf.Variable accumulator), read them every N steps, or log with tf.summary.",
    ("host_sync", "*", "*"):
        "The host waited for the device here. Read device results less often, and only after "
        "the next step's work is dispatched.",
    # ---- input ----
    ("input_bound", "main_thread", PYTORCH):
        "The DataLoader runs on the main thread (num_workers=0): loading and preprocessing "
        "happen while the accelerator waits. " + _NUM_WORKERS,
    ("input_bound", "*", PYTORCH):
        "Data loading is not keeping up with the device. " + _NUM_WORKERS,
    ("input_bound", "pinned", PYTORCH):
        "Data loading is not keeping up with the device. " + _NUM_WORKERS_PINNED,
    # the DataLoader already has worker processes: the next step is more of them, or less
    # work per sample
    ("input_bound", "workers", PYTORCH):
        "The DataLoader already loads in worker processes and still cannot keep up: raise "
        "num_workers (up to the free CPU cores) and prefetch_factor, keep the workers alive "
        "(persistent_workers=True), and make each sample cheaper: decode and augment on the "
        "device (torchvision.transforms.v2 on GPU tensors, DALI) or precompute it.",
    ("input_bound", "*", PYTORCH_XLA):
        "Wrap the loader in torch_xla's MpDeviceLoader (pl.MpDeviceLoader(loader, device)) so "
        "batches are loaded and transferred while the device runs, with "
        "DataLoader(num_workers>0).",
    ("input_bound", "*", JAX):
        "Prepare and transfer the next batch while the current step runs: a prefetching "
        "input pipeline (tf.data or grain with prefetch) and jax.device_put of the next batch "
        "ahead of use; keep preprocessing out of the step.",
    ("input_bound", "py_function", TENSORFLOW):
        "The tf.data pipeline waits on a Python function (tf.numpy_function / "
        "tf.py_function), which holds the GIL and runs one call at a time. Rewrite the "
        "decode with TensorFlow ops (tf.io.decode_*, tf.image.*) so it runs in parallel; "
        "meanwhile use .map(..., num_parallel_calls=tf.data.AUTOTUNE), .cache() after "
        "the expensive map if the data fits, and end with .prefetch(tf.data.AUTOTUNE).",
    ("input_bound", "tf_ops", TENSORFLOW):
        "The tf.data pipeline cannot keep up with the step. Parallelise the slow stage "
        "(.map(..., num_parallel_calls=tf.data.AUTOTUNE), .interleave(..., "
        "num_parallel_calls=tf.data.AUTOTUNE) over files), .cache() what does not change "
        "between epochs, batch before cheap per-element maps (vectorised map), and end with "
        ".prefetch(tf.data.AUTOTUNE) so the next batch is made during the step.",
    ("input_bound", "*", TENSORFLOW):
        "Build the input with tf.data: .map(..., num_parallel_calls=tf.data.AUTOTUNE), "
        ".interleave over files, .cache() and .prefetch(tf.data.AUTOTUNE) so batches are "
        "ready before the step needs them; move Python decode into TF ops.",
    ("input_bound", "*", "*"):
        "The device waits for input: prepare the next batch in parallel with the step and "
        "prefetch it to the device.",
    # ---- compilation ----
    ("recompilation", "*", PYTORCH_XLA):
        "Each new input shape compiles a new graph. Keep shapes static (pad or bucket batch "
        "and sequence sizes, drop_last=True), keep Python scalars out of the graph, and watch "
        "the CompileTime metric (torch_xla.debug.metrics) stay flat after the first steps.",
    ("recompilation", "*", JAX):
        "jax.jit compiles again for every new input shape, dtype or static argument. Pad or "
        "bucket shapes, pass static arguments consistently, and create jitted functions once, "
        "outside the loop.",
    ("recompilation", "*", PYTORCH):
        "torch.compile recompiles when a guard fails (new shapes, new Python values). Mark "
        "dynamic dimensions (torch._dynamo.mark_dynamic) or pad to fixed sizes; "
        "TORCH_LOGS=recompiles says why.",
    ("recompilation", "*", TENSORFLOW):
        "tf.function retraces (and jit_compile=True compiles again) for every new input "
        "shape, dtype or Python argument: give it an input_signature with None for the "
        "varying dimensions or reduce_retracing=True, pad or bucket shapes "
        "(drop_remainder=True in batch), and pass tensors, not Python numbers.",
    ("recompilation", "*", "*"):
        "A program compiled again with new shapes: keep input shapes static (pad or bucket).",
    ("compilation", "*", "*"):
        "A first, one-time compilation: later steps reuse the program. Profile after warm-up "
        "to see the steady state; cache compiled programs across runs if start-up matters.",
    # ---- transfers ----
    ("h2d_transfer", "*", PYTORCH):
        "The host stages host→device copies while the device waits. Pin the memory "
        "(DataLoader(pin_memory=True) or tensor.pin_memory()) and copy with "
        "non_blocking=True, ideally ahead of use on a side stream.",
    ("h2d_transfer", "pinned", PYTORCH):
        "The copies are already from pinned memory: issue them ahead of use with "
        "non_blocking=True (prefetch the next batch to the device on a side stream while "
        "this step runs) and copy fewer, larger buffers.",
    ("h2d_transfer", "*", PYTORCH_XLA):
        "Input transfers are not overlapped with execution: use MpDeviceLoader, which "
        "transfers the next batch while the device runs.",
    ("h2d_transfer", "*", JAX):
        "Transfer the next batch with jax.device_put while the current step runs, instead of "
        "passing host arrays to the jitted function.",
    ("h2d_transfer", "*", TENSORFLOW):
        "Prefetch to the device: tf.data's prefetch_to_device / prefetch(AUTOTUNE).",
    ("h2d_transfer", "*", "*"):
        "Transfer inputs ahead of use so the copy overlaps the previous step.",
    # ---- allocator, capture, launches, runtime ----
    ("allocator", "*", PYTORCH):
        "cudaMalloc/cudaFree (hipMalloc/hipFree on ROCm) inside the step: the caching "
        "allocator gives memory back to the driver and asks for it again (changing shapes, "
        "fragmentation, torch.cuda.empty_cache()). Keep shapes stable, never call "
        "empty_cache() in the loop, and try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "(PYTORCH_HIP_ALLOC_CONF on ROCm).",
    ("allocator", "*", JAX):
        "Device allocations inside the step: let XLA keep its memory pool "
        "(XLA_PYTHON_CLIENT_PREALLOCATE, XLA_PYTHON_CLIENT_MEM_FRACTION) and keep shapes stable.",
    ("allocator", "*", "*"):
        "Device memory is allocated and freed inside the step: keep shapes stable and reuse "
        "buffers.",
    ("graph_capture", "*", "*"):
        "CUDA-graph capture and instantiation are one-time costs: this idle is warm-up, not the "
        "steady state. Profile after warm-up (a profiler schedule with warmup steps).",
    ("launch_bound", "graphs", PYTORCH):
        "Many kernels are shorter than their launch. Fuse small ops (torch.compile), use "
        "foreach/fused optimizers (foreach=True, fused=True) and larger batches; the graph "
        "replays already here cut launches only for what they capture.",
    # already under torch.compile (AOTAutograd's CompiledFunction): the next steps are
    # CUDA graphs and larger compiled regions
    ("launch_bound", "compiled", PYTORCH):
        "The step already runs under torch.compile, yet its kernels are shorter than their "
        "launch: replay it as a CUDA graph (torch.compile(mode='reduce-overhead')), make the "
        "compiled regions larger (fewer graph breaks: TORCH_LOGS=graph_breaks, "
        "fullgraph=True), use fused optimizers (fused=True) and larger batches.",
    ("launch_bound", "compiled_graphs", PYTORCH):
        "The step already runs compiled and replays CUDA graphs: the kernels launched outside "
        "the graphs are the ones left (graph breaks: TORCH_LOGS=graph_breaks; the optimizer "
        "step outside the compiled region); larger batches lengthen the kernels.",
    ("launch_bound", "*", PYTORCH):
        "Many kernels are shorter than their launch. Fuse small ops (torch.compile), replay "
        "the step as a CUDA graph (torch.cuda.graphs or torch.compile(mode='reduce-overhead')), "
        "use foreach/fused optimizers and larger batches.",
    ("launch_bound", "*", JAX):
        "Many tiny dispatches: jit the whole step rather than small functions, and replace "
        "Python loops of small calls with lax.scan / vmap.",
    ("launch_bound", "jitted", JAX):
        "The program is already jitted, yet its device ops are shorter than their dispatch: "
        "run several steps per call (lax.scan or fori_loop over the steps), give each call "
        "more work (vmap, larger batches), and keep host callbacks out of the program.",
    ("launch_bound", "jitted", TENSORFLOW):
        "The step already runs as a tf.function: fuse its small ops with jit_compile=True "
        "(XLA) and, in Keras, raise steps_per_execution so one call runs several steps.",
    ("launch_bound", "*", TENSORFLOW):
        "Many tiny ops, each dispatched on its own: wrap the step in tf.function (with "
        "jit_compile=True to fuse them) and, in Keras, raise steps_per_execution.",
    ("launch_bound", "*", PYTORCH_XLA):
        "Many small executions: let XLA fuse the step (one mark_step per step, no host reads "
        "in between).",
    ("launch_bound", "*", "*"):
        "Many device ops are shorter than the cost of issuing them: fuse them into larger ones.",
    # ---- start-up: paid once per run, never by the loop ----
    ("startup", "runtime", PYTORCH):
        "The first CUDA calls of the process create its context and load the kernels' "
        "modules (lazily, on first use, under CUDA_MODULE_LOADING=LAZY): a cost of every "
        "job, not of the loop. Start the profiler after a warm-up step: "
        "torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, "
        "active=3)) with prof.step() each iteration, so the capture shows the steady state.",
    ("startup", "profiler", PYTORCH):
        "This is the profiler starting and stopping, not your code. Profile steady-state "
        "steps: torch.profiler.schedule(wait=1, warmup=1, active=3) with prof.step() each "
        "iteration leaves the start and the export out of the steps.",
    ("startup", "*", PYTORCH):
        "cuDNN/cuBLAS handles and the first iteration's autotuning (cudnn.benchmark) are "
        "paid once. Start the profiler after a warm-up step: "
        "torch.profiler.schedule(wait=1, warmup=1, active=3).",
    ("startup", "profiler", JAX):
        "This is the profiler starting and stopping (jax.profiler.start_trace/stop_trace), "
        "not your code, and nothing to jit. Call start_trace after a warm-up step (or wrap "
        "only steady-state steps in jax.profiler.trace) so the capture shows the loop.",
    ("startup", "*", JAX):
        "Device start-up (context creation, module loading, autotuning) is paid once per "
        "process. Run a warm-up step before jax.profiler.start_trace (or wrap only "
        "steady-state steps in jax.profiler.trace).",
    ("startup", "profiler", TENSORFLOW):
        "This is the profiler starting and stopping (tf.profiler.experimental.start/stop), "
        "not your model. Start it after warm-up steps (the Keras TensorBoard callback's "
        "profile_batch=(10, 15)) so the capture shows the steady state.",
    ("startup", "*", TENSORFLOW):
        "Device start-up (context creation, library handles, autotuning) is paid once per "
        "process. Profile after warm-up steps: tf.profiler.experimental.start after a few "
        "steps, or the Keras TensorBoard callback's profile_batch=(10, 15).",
    ("startup", "*", PYTORCH_XLA):
        "Start-up (the profiler server starting, device initialisation) is paid once. "
        "Capture with xp.trace (or xp.start_trace) after warm-up steps, once the program "
        "is compiled, so the capture shows the steady state.",
    ("startup", "*", "*"):
        "Start-up (the profiler starting, device context creation, module loading) is paid "
        "once per run. Start the profiler after a warm-up step so the capture shows the "
        "steady state.",
    ("runtime_call", "*", "*"):
        "Runtime calls (stream or event creation, module loading, occupancy queries) inside "
        "the step: create streams and events once, outside the loop, and warm kernels up "
        "before profiling.",
    # ---- host work ----
    ("host_compute", "graphs", PYTORCH):
        "The host is busy between launches: move Python work out of the step, vectorise "
        "per-element loops, and capture more of the step in the CUDA graphs it already "
        "replays.",
    ("host_compute", "*", PYTORCH):
        "The host is busy between launches: move Python work out of the step (precompute, "
        "vectorise per-element loops) and cut per-op overhead with torch.compile or CUDA "
        "graphs.",
    ("host_compute", "compiled", PYTORCH):
        "The step already runs under torch.compile (CompiledFunction): the host time is what "
        "runs outside and between its compiled regions. Replay it as a CUDA graph "
        "(torch.compile(mode='reduce-overhead')), make the compiled regions larger (fewer "
        "graph breaks: TORCH_LOGS=graph_breaks, fullgraph=True), and move Python work out "
        "of the step.",
    ("host_compute", "compiled_graphs", PYTORCH):
        "The step already runs compiled and replays CUDA graphs: the host time is what stays "
        "outside them. Capture more of the step (fewer graph breaks: "
        "TORCH_LOGS=graph_breaks; the optimizer inside the compiled region) and move Python "
        "work out of the step.",
    ("host_compute", "*", PYTORCH_XLA):
        "Host work between executions: keep Python-side work out of the step; the lazy "
        "tensor traces every op on the host, so fewer, larger ops help.",
    ("host_compute", "*", JAX):
        "Host work between dispatches: jit the whole step and keep Python-side work out of "
        "the loop.",
    ("host_compute", "jitted", JAX):
        "The step is already jitted: the host time is Python around the jitted call. Keep "
        "Python work (logging, metric reads, batch preparation) out of the loop, dispatch "
        "the next step before reading this one's results (JAX dispatches asynchronously), "
        "and run several steps per call (lax.scan) where dispatch itself dominates.",
    ("host_compute", "jitted", TENSORFLOW):
        "The step already runs as a tf.function: the host time goes to Python around it. "
        "Keep Python work out of the loop, compile the function with jit_compile=True, and "
        "in Keras raise steps_per_execution so one call runs several steps.",
    ("host_compute", "*", TENSORFLOW):
        "The host is busy between device work, typically eager op-by-op execution: wrap "
        "the step in tf.function (jit_compile=True to fuse it with XLA), keep Python work "
        "out of it, and in Keras raise steps_per_execution so one call runs several steps.",
    ("host_compute", "*", "*"):
        "The host is busy between device work: move host work out of the step.",
    ("graph_building", "*", PYTORCH_XLA):
        "Building and dispatching the XLA graph on the host (StepMarker, SyncTensorsGraph) "
        "keeps the device idle each step. Fewer Python ops per step help; torch_xla.compile / "
        "the dynamo bridge caches the traced graph so it is not rebuilt every step.",
    ("untraced", "*", PYTORCH):
        "The host shows no op here (self time of an annotation, or no events at all). "
        "Profile with with_stack=True to see the Python frames, and look for sleeps, I/O, "
        "logging or another process.",
    ("untraced", "*", JAX):
        "The host shows nothing here. Profile with the Python tracer on "
        "(jax.profiler.ProfileOptions python_tracer_level=1) to see the Python frames.",
    ("untraced", "*", TENSORFLOW):
        "The host shows nothing here. Profile with the Python tracer on "
        "(tf.profiler.experimental.ProfilerOptions(python_tracer_level=1)) to see the "
        "Python frames, and look for sleeps, I/O or logging.",
    ("untraced", "*", "*"):
        "The host shows nothing here: profile with Python stacks and all threads, and look "
        "for sleeps, I/O or another process.",
    # ---- the device side ----
    ("device_wait", "*", PYTORCH):
        "The device already had the next op and did not run it: it waited on a stream or "
        "event dependency, behind a long op on another stream, or it was running behind the "
        "host. This is not host overhead: look at cross-stream waits (wait_event, "
        "record_stream) and at what the other streams run meanwhile.",
    ("device_wait", "*", "*"):
        "The device already had the next op and did not run it (a dependency on other device "
        "work, or the device running behind the host); this idle is not host overhead.",
    ("collective_wait", "*", PYTORCH):
        "The device waited at a collective for its peers: balance work across ranks (uneven "
        "shards or batch sizes), find the straggler rank, and overlap communication with "
        "compute (DDP bucket_cap_mb, FSDP prefetching).",
    ("collective_wait", "*", JAX):
        "The device waited at a collective for the other devices: balance the sharding and "
        "look for a straggler.",
    ("collective_wait", "*", TENSORFLOW):
        "The device waited at an all-reduce for the other replicas: balance the work per "
        "replica (global batch divisible by the replicas, same shapes), look for a "
        "straggler, and let the strategy overlap gradients' all-reduce with the backward "
        "pass (tf.distribute.MirroredStrategy with NCCL cross-device ops).",
    ("collective_wait", "*", "*"):
        "The device waited at a collective for its peers: balance the work across devices.",
    ("device_skew", "*", "*"):
        "Balance the work per device (shard sizes, padding, data split): the others wait for "
        "the busiest one at every collective.",
    ("serialized_devices", "*", "*"):
        "Launch work on all devices before waiting on any (no per-device sync in a loop); "
        "use one process per device or asynchronous dispatch.",
    ("excessive_memcpy", "*", PYTORCH):
        "Avoid .to(device)/.cpu() round trips inside the step, keep tensors on the device, "
        "and use pinned memory for the copies that remain.",
    ("excessive_memcpy", "*", "*"):
        "Keep data on the device between steps; copy only what changes.",
    ("d2h_transfer", "*", PYTORCH_XLA):
        "Every host read of a device value waits for the graph: keep values on the device and "
        "read them every N steps (xm.add_step_closure).",
    ("d2h_transfer", "*", JAX):
        "Every host read of a jax.Array waits for the computation: read values every N steps.",
    ("d2h_transfer", "*", PYTORCH):
        "Every .item()/.cpu() waits for the device: read values every N steps.",
    ("d2h_transfer", "*", TENSORFLOW):
        "Every .numpy(), float(tensor) or tf.print of a device tensor waits for the device: "
        "keep values on the device and read them every N steps.",
    ("d2h_transfer", "*", "*"):
        "Every host read of a device value waits for the device: read values less often.",
    # ---- busy time badly spent (findings/efficiency.py) ----
    ("slow_matmul", "*", "*"):
        "Small or unaligned shapes leave the matrix units idle: make the "
        "matmul dimensions multiples of 8 (16-bit), 16 (8-bit) or 128 (TPU), pad vocabularies "
        "and hidden sizes, and batch small matmuls together (larger batch, bmm instead of a "
        "loop).",
    ("unfused_elementwise", "*", PYTORCH):
        "Fuse the elementwise chains: torch.compile(model) "
        "turns runs of pointwise kernels into one kernel each (or use fused optimizers: "
        "torch.optim.AdamW(fused=True), and fused layers such as apex/Transformer Engine).",
    ("unfused_elementwise", "*", "*"):
        "Fuse the elementwise chains (a compiler such as "
        "torch.compile or XLA, or fused kernels for the layer).",
    ("unfused_attention", "*", PYTORCH):
        "Use a fused attention kernel: "
        "torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient / cuDNN "
        "backends) instead of matmul → softmax → matmul.",
    ("unfused_attention", "*", JAX):
        "Use jax.nn.dot_product_attention (implementation='cudnn' on "
        "GPU) or a Pallas flash/splash attention kernel on TPU.",
    ("unfused_attention", "*", "*"):
        "Use a fused (flash) attention kernel instead of separate "
        "matmuls and a softmax.",
    ("copy_bound", "*", JAX):
        "The chip mostly copies buffers: donate the step's inputs "
        "(jax.jit(..., donate_argnums=...)), keep arrays on the device (jax.device_put once, "
        "outside the loop), and avoid host offload (memory_kind='pinned_host') and layout "
        "changes between steps; check what the copy-start/copy-done ops move in the HLO.",
    ("copy_bound", "*", PYTORCH_XLA):
        "The chip mostly copies buffers: keep tensors on the XLA "
        "device between steps (no .cpu() / .to() in the loop), and use MpDeviceLoader for "
        "inputs.",
    ("copy_bound", "*", PYTORCH):
        "The device mostly copies: keep tensors on the device, drop "
        ".to()/.cpu()/.clone()/.contiguous() in the step, and use pinned memory with "
        "non_blocking=True for the inputs.",
    ("copy_bound", "*", "*"):
        "The device mostly copies buffers: keep data on the device between "
        "steps and remove copies from the step.",
}


def fix_for(kind: str, culprit: str, fw: str) -> str:
    for key in ((kind, culprit, fw), (kind, "*", fw), (kind, culprit, "*"), (kind, "*", "*")):
        text = FIXES.get(key)
        if text:
            return text
    return ""


# ---- the platform the trace ran on ----
# PyTorch's fixes name CUDA's APIs (ROCm runs them as torch.cuda too); on another
# accelerator (MTIA, XPU, HPU) what only CUDA has goes: CUDA graphs, cudaMalloc's
# allocator settings; its synchronize and events are the device's own module's
_CUDA_CLAUSES = (
    (re.compile(r",? ?replay (?:it|the step) as a CUDA graph \((?:[^()]|\([^()]*\))*\)"), ""),
    (re.compile(r" (?:or|and) CUDA graphs"), ""),
)
_CUDA_ONLY = re.compile(r"CUDA|cuda(?!\.synchronize|\.Event)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")


def platform(trace) -> str:
    """The accelerator the trace's devices are: "mtia", "xpu", "hpu", "tpu", "gpu", or ""
    (none); the most common kind among its devices."""
    kinds = [str(getattr(d, "kind", "") or "").lower() for d in (trace.devices or [])]
    names = [str(getattr(d, "name", "") or "") for d in (trace.devices or [])]
    for k in ("mtia", "xpu", "hpu"):
        if any(k == x for x in kinds) or any(n.upper().startswith(k.upper()) for n in names):
            return k
    kinds = [k for k in kinds if k]
    return max(set(kinds), key=kinds.count) if kinds else ""


def for_platform(text: str, plat: str) -> str:
    """``text`` as a fix for a trace that ran on ``plat``: on an accelerator that is not
    CUDA's, clauses naming what only CUDA has are cut, torch.cuda's synchronize and Event
    become the device module's, and a sentence still naming CUDA goes."""
    if plat not in ("mtia", "xpu", "hpu") or not text or "cuda" not in text.lower():
        return text
    for rx, to in _CUDA_CLAUSES:
        text = rx.sub(to, text)
    text = text.replace("torch.cuda.synchronize()", f"torch.{plat}.synchronize()")
    text = text.replace("torch.cuda.Event", "torch.Event")
    kept = [s for s in _SENTENCE.split(text) if not _CUDA_ONLY.search(s)]
    return " ".join(kept)
