"""The one data check of the cross-entropy family: every class index is in ``[0, V)`` or ``ignore_index``.

Both implementations (portable torch and Triton) call `check_target_values` on the real tensors, inside
their ops, so it runs in eager mode and in a compiled graph alike (a validating fake sees no data and cannot
check it). Without it a kernel would clamp the index (the portable gather) or mask it, and a label such as a
token added to the tokenizer without resizing the embeddings would train silently as another class; torch
raises `IndexError` (CPU) or stops the device with an assertion (CUDA).

Cost: one reduction over the targets. On the CPU a host read of its result, and an `IndexError` as torch
raises; on an accelerator a device-side assertion instead (`anyaccel._compat.asserts`), as torch's own CUDA
kernels assert: no synchronisation, so it costs the step nothing on the host and can be captured in a CUDA
graph; a bad target then stops the device at the next synchronisation with the message below. The failing
index is looked up only when the check fails.
"""

from __future__ import annotations

import torch

from anyaccel._compat import asserts
from anyaccel.ops.nn.errors import TargetIndexError

#: device types whose data the host reads directly: the check raises `TargetIndexError` there
_HOST_READ = frozenset({"cpu"})


def check_target_values(op: str, target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """Raise unless every element of ``target`` is in ``[0, classes)`` or equals ``ignore_index``.

    Args:
        op: the op's name, for the message.
        target: integer class indices, any shape (not a meta tensor).
        classes: V, the number of classes (the logits' last dimension, or the lm_head weight's rows).
        ignore_index: the index that marks rows without a loss.

    Raises:
        TargetIndexError: an `IndexError` naming the first bad index, its position and the accepted range
            (on the CPU; on an accelerator the device asserts instead, see the module docstring).
    """
    if target.numel() == 0 or target.device.type == "meta":  # no data to check (shape inference)
        return
    bad = ((target < 0) | (target >= classes)) & (target != ignore_index)
    if target.device.type not in _HOST_READ and asserts.assert_async(
            ~bad.any(), f"{op}: a target is outside [0, {classes}) and is not ignore_index={ignore_index}"):
        return
    if not bool(bad.any()):
        return
    flat = bad.reshape(-1)
    pos = int(flat.nonzero()[0, 0])
    value = int(target.reshape(-1)[pos])
    raise TargetIndexError(
        f"{op}: target holds {value} at flat position {pos}; accepted: class indices in [0, {classes}) or "
        f"ignore_index={ignore_index}. An index >= {classes} is usually a token added to the tokenizer without "
        "model.resize_token_embeddings(len(tokenizer)); a negative one is a padding value other than "
        "ignore_index (set the labels' padding to ignore_index)")
