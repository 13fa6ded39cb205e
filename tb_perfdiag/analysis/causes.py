"""The gap-cause taxonomy (GUIDE §4) and its Holistic-Trace-Analysis equivalents."""
from __future__ import annotations

HOST_SYNC = "host_sync"                # host blocked reading from / waiting on the device
COMPILATION = "compilation"            # graph compilation on the host
H2D_TRANSFER = "h2d_transfer"          # host→device transfer not overlapped with compute
DATA_LOADING = "data_loading"          # input pipeline between/inside steps
HOST_COMPUTE = "host_compute"          # framework / Python work between launches
LAUNCH_OVERHEAD = "launch_overhead"    # back-to-back launches too slow for tiny kernels
COLLECTIVE_WAIT = "collective_wait"    # waiting for another device at a collective
UNTRACED = "untraced"                  # host idle or not profiled

ALL = (HOST_SYNC, COMPILATION, H2D_TRANSFER, DATA_LOADING, HOST_COMPUTE, LAUNCH_OVERHEAD,
       COLLECTIVE_WAIT, UNTRACED)

LABELS = {
    HOST_SYNC: "Host sync / device→host read",
    COMPILATION: "Compilation",
    H2D_TRANSFER: "Host→device transfer",
    DATA_LOADING: "Data loading / input",
    HOST_COMPUTE: "Host compute between launches",
    LAUNCH_OVERHEAD: "Kernel-launch overhead",
    COLLECTIVE_WAIT: "Collective wait",
    UNTRACED: "Untraced (host idle or not profiled)",
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
}
