"""NPU (Ascend) implementations of anyaccel's fused optimizer ops, delegating to torch_npu's kernels.

``adam`` (:func:`anyaccel.ops.npu.adam.adam_step`) calls ``torch_npu.npu_apply_adam_w``, Ascend's fused
AdamW kernel, where it applies; ``lion`` (:func:`anyaccel.ops.npu.lion.lion_step`) and the cases the
Ascend kernel does not cover run on torch's multi-tensor ``_foreach_*`` ops, which torch_npu implements
with its own fused kernels. Both expose the exact signatures of the CUDA/SYCL ops, so the implementation
loader can serve them for the ``npu`` device type. Importing this package imports no vendor package;
``torch_npu`` is imported on the first step, and only when it is installed.
"""
