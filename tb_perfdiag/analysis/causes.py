"""The gap-cause taxonomy (GUIDE §4) and its Holistic-Trace-Analysis and TraceLens
equivalents.  Each gap is split into shares of these causes; the largest is its primary."""
from __future__ import annotations

HOST_SYNC = "host_sync"                # host blocked on the device: the lead it destroyed
COMPILATION = "compilation"            # graph compilation on the host
H2D_TRANSFER = "h2d_transfer"          # the host staging a blocking host→device copy
DATA_LOADING = "data_loading"          # input pipeline between/inside steps
HOST_COMPUTE = "host_compute"          # framework ops and Python between launches
LAUNCH_OVERHEAD = "launch_overhead"    # the launch calls themselves
COLLECTIVE_WAIT = "collective_wait"    # the device had a collective and waited for peers
UNTRACED = "untraced"                  # no host event, or annotation self time
DEVICE_WAIT = "device_wait"            # the device had the next op and did not run it
ALLOCATOR = "allocator"                # cudaMalloc/cudaFree/hipFree, empty_cache
GRAPH_CAPTURE = "graph_capture"        # CUDA-graph capture or instantiation (one-time)
RUNTIME_CALL = "runtime_call"          # other runtime calls that stall
STARTUP = "startup"                    # what every job pays once: the profiler's own start
                                       # and stop, CUDA/HIP context creation, lazy module
                                       # loading, library handles, first-iteration autotuning

# the order of result.Cause (append only: indices are stored)
ALL = (HOST_SYNC, COMPILATION, H2D_TRANSFER, DATA_LOADING, HOST_COMPUTE, LAUNCH_OVERHEAD,
       COLLECTIVE_WAIT, UNTRACED, DEVICE_WAIT, ALLOCATOR, GRAPH_CAPTURE, RUNTIME_CALL,
       STARTUP)
DEVICE_SIDE = (DEVICE_WAIT, COLLECTIVE_WAIT)

LABELS = {
    HOST_SYNC: "Host sync / device→host read",
    COMPILATION: "Compilation",
    H2D_TRANSFER: "Host→device transfer",
    DATA_LOADING: "Data loading / input",
    HOST_COMPUTE: "Host compute between launches",
    LAUNCH_OVERHEAD: "Kernel-launch overhead",
    COLLECTIVE_WAIT: "Collective wait",
    UNTRACED: "Untraced (host idle or not profiled)",
    DEVICE_WAIT: "Device-side wait (dependency or queue)",
    ALLOCATOR: "Memory allocator",
    GRAPH_CAPTURE: "CUDA-graph capture",
    RUNTIME_CALL: "Other runtime call",
    STARTUP: "Start-up (once per run)",
}

# Holistic Trace Analysis idle-time categories: host_wait (the device waited for the
# host to enqueue work), kernel_wait (short gaps between back-to-back kernels, below
# a threshold), other (everything else, e.g. syncs and cross-stream dependencies).
HTA = {
    HOST_SYNC: "other",
    COMPILATION: "host_wait",
    H2D_TRANSFER: "host_wait",
    DATA_LOADING: "host_wait",
    HOST_COMPUTE: "host_wait",
    LAUNCH_OVERHEAD: "kernel_wait",
    COLLECTIVE_WAIT: "other",
    UNTRACED: "host_wait",
    DEVICE_WAIT: "other",
    ALLOCATOR: "host_wait",
    GRAPH_CAPTURE: "host_wait",
    RUNTIME_CALL: "host_wait",
    # HTA has no start-up category: the device waited for the host to get going
    STARTUP: "host_wait",
}

# TraceLens' first axis: was the device's queue drained by a sync, did the host starve
# it, or was the wait on the device side
SYNC_DRAIN, STARVED, DEVICE_SIDE_WAIT = "sync_drain", "starved", "device_side"
