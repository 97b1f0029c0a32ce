"""Shared helpers of the NPU (Ascend) implementations of anyaccel's optimizer families.

The implementations themselves live with their families (`anyaccel.ops.adam.npu`,
`anyaccel.ops.lion.npu`): they call ``torch_npu.npu_apply_adam_w`` (Ascend's fused AdamW kernel) where
it applies and torch's multi-tensor ``_foreach_*`` ops (torch_npu's fused Ascend kernels) otherwise, as
torch ops with the spec's schemas. Importing this package imports no vendor package.
"""
