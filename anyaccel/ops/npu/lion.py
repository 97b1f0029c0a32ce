"""``lion_step`` on NPUs: Lion through torch's multi-tensor ``_foreach_*`` ops (fused by torch_npu).

torch_npu ships no Lion kernel; its ``_foreach_*`` implementations are multi-tensor Ascend kernels, so
this is the fused path on an NPU (and a correct, if slower, path on any other device). Math per element,
in fp32 (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms", Algorithm 2; the same as
csrc/lion/fused_lion_cuda.cu)::

    p <- p * (1 - lr * weight_decay)
    c <- beta1 * m + (1 - beta1) * g
    p <- p - lr * sign(c)            (sign(0) = 0)
    m <- beta2 * m + (1 - beta2) * g
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from anyaccel.ops.npu._lists import as_fp32, check_lists, write_back

__all__ = ["lion_step"]


@torch.no_grad()
def lion_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              model_copies: Sequence[torch.Tensor], lr: float, beta1: float, beta2: float,
              weight_decay: float) -> None:
    """One Lion step over every tensor, in place (the ``lion_step`` op's signature).

    Args:
        params: parameters (fp32/bf16/fp16) or fp32 master weights, contiguous, one device.
        grads: gradients, one per parameter (same element count).
        exp_avgs: momentum ``m``, fp32 or the parameters' dtype.
        model_copies: empty, or one bf16/fp16 copy per parameter written with the updated value.
        lr: learning rate, >= 0. beta1, beta2: in [0, 1]. weight_decay: >= 0 (decoupled).

    Raises:
        ValueError / TypeError: as the CUDA op (bad hyper-parameters, mismatched lists).

    Side effects: updates params, exp_avgs and model_copies in place.
    """
    for name, ok, accepted, value in (("lr", lr >= 0.0, ">= 0", lr), ("beta1", 0.0 <= beta1 <= 1.0, "in [0, 1]", beta1),
                                      ("beta2", 0.0 <= beta2 <= 1.0, "in [0, 1]", beta2),
                                      ("weight_decay", weight_decay >= 0.0, ">= 0", weight_decay)):
        if not ok:
            raise ValueError(f"lion_step: {name} must be {accepted}, got {value}")
    check_lists("lion_step", params, grads, {"exp_avgs": exp_avgs}, model_copies)
    ps, gs, ms = as_fp32(params), as_fp32(grads), as_fp32(exp_avgs)
    if weight_decay != 0.0:
        torch._foreach_mul_(ps, 1.0 - lr * weight_decay)
    c = torch._foreach_lerp(ms, gs, 1.0 - beta1)
    torch._foreach_add_(ps, torch._foreach_sign(c), alpha=-lr)
    torch._foreach_lerp_(ms, gs, 1.0 - beta2)
    write_back(params, ps)
    write_back(exp_avgs, ms)
    if model_copies:
        write_back(model_copies, ps)
