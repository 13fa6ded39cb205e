"""What the busy time achieves: the FLOPs and bytes of each device op and the peaks of
each device (GUIDE §4, "Efficiency").

- ``costs.op_costs``: FLOPs (model and hardware), bytes, matmul class and dtype of device
  op events, from the most exact source the trace has — XLA's own cost figures on the
  op (``xla_costs``), the HLO of ``/host:metadata`` by XLA's cost rules (``hlo_costs``),
  PyTorch's ``flops`` arg or its ops' shapes (``torch_shapes``).
- ``peaks.device_peak``: a device's dense peak FLOP/s for a dtype and its memory
  bandwidth, from the trace (TPU plane stats, GPU plane properties, Kineto
  ``deviceProperties``) or the datasheet table (``datasheets``).

On these: ``sums`` folds the per-op figures into per step, device and op-group sums;
``mfu`` makes the ``EfficiencyTable`` (MFU per step and device, the ``waterfall``, the
``roofline`` per op group); ``advice`` the findings when busy time is badly spent.
"""
