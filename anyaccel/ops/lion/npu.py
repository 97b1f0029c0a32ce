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
from typing import Any

import torch

from anyaccel._compat import foreach
from anyaccel.ops import validation
from anyaccel.ops.npu._lists import as_fp32, write_back

__all__ = ["lion_step", "load"]


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
        RuntimeError: as the CUDA op (the op spec's rules: bad hyper-parameters, mismatched lists).

    Side effects: updates params, exp_avgs and model_copies in place.
    """
    from anyaccel.ops.lion.spec import SPEC

    validation.check_scalars(SPEC.function("lion_step"), dict(lr=lr, beta1=beta1, beta2=beta2,
                                                               weight_decay=weight_decay))
    if not params:
        raise RuntimeError("lion_step: params is empty; pass at least one tensor")
    validation.check_optimizer_lists("lion_step", params, grads, {"exp_avgs": exp_avgs}, model_copies,
                                     [c.as_tuple() for c in SPEC.dtypes], params[0].device.type)
    ps, gs, ms = as_fp32(params), as_fp32(grads), as_fp32(exp_avgs)
    if weight_decay != 0.0:
        foreach.mul_(ps, 1.0 - lr * weight_decay)
    c = foreach.lerp(ms, gs, 1.0 - beta1)
    foreach.add_(ps, foreach.sign(c), alpha=-lr)
    foreach.lerp_(ms, gs, 1.0 - beta2)
    write_back(params, ps)
    write_back(exp_avgs, ms)
    if model_copies:
        write_back(model_copies, ps)


def load() -> Any:
    """This implementation as a torch op, ``anyaccel_npu_lion::lion_step`` (the spec's schema and fake),
    registered for the ``npu`` device (torch_npu's PrivateUse1).

    Side effects: registers the op once per process.
    """
    from anyaccel.ops import python_ops
    from anyaccel.ops.lion.spec import SPEC

    return python_ops.define_custom_ops(SPEC, "anyaccel_npu_lion", {"lion_step": lion_step}, ("npu",), "npu")
