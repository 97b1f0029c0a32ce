"""``adam_step`` on NPUs: Ascend's fused AdamW kernel (``torch_npu.npu_apply_adam_w``) where it applies.

Per parameter whose moments share its dtype, the step is one call of ``torch_npu.npu_apply_adam_w`` (the
``ApplyAdamW`` Ascend operator, the kernel torch_npu's own ``NpuFusedAdamW`` is built on); Adam with L2
weight decay adds ``weight_decay * p`` to the gradient first and calls it with no decay. The rest (fp32
moments of 16-bit parameters, or no torch_npu kernel in this torch_npu) runs on torch's multi-tensor
``_foreach_*`` ops, which torch_npu implements as fused Ascend kernels. Math per element, in fp32 (the same
as csrc/adam/fused_adam_cuda.cu; torch.optim.Adam/AdamW)::

    adamw_mode: p <- p * (1 - lr * weight_decay)      else: g <- g + weight_decay * p
    m <- beta1 * m + (1 - beta1) * g ;  v <- beta2 * v + (1 - beta2) * g^2
    p <- p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),   bc_i = 1 - beta_i^step (1 without correction)

``npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, eps, grad, max_grad_norm,
amsgrad, maximize, *, var, m, v)`` multiplies the powers by beta once more before using them (its
documented reference, torch_npu's ``test_apply_adam_w``), so it is given ``beta**(step - 1)``, and 0 for no
bias correction (then ``1 - 0 * beta = 1``). ``torch_npu.npu_apply_adam_w`` is the op packet
``torch.ops.npu.npu_apply_adam_w``: the in-place overload is ``npu_apply_adam_w.out``, whose outputs are the
keyword-only ``var``, ``m``, ``v`` of its schema (torch_npu 2.14.0's
``csrc/aten/npu_native_functions_by_codegen.yaml``). torch's overload matching knows no ``out=(var, m, v)``
tuple for it, although torch_npu's docstring shows one: such a call matches no overload and raises.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from anyaccel._compat import foreach
from anyaccel.ops import validation
from anyaccel.ops.npu._lists import as_fp32, write_back

logger = logging.getLogger(__name__)

__all__ = ["adam_step", "ascend_kernel", "load"]

VENDOR_PACKAGE = "torch_npu"
KERNEL_NAME = "npu_apply_adam_w"


def ascend_kernel() -> Callable[..., Any] | None:
    """``torch_npu.npu_apply_adam_w`` when torch_npu is installed and has it, else None.

    Side effects: imports torch_npu (registers ``torch.npu``) when it is installed; never when absent.
    """
    if importlib.util.find_spec(VENDOR_PACKAGE) is None:
        return None
    return getattr(importlib.import_module(VENDOR_PACKAGE), KERNEL_NAME, None)


@torch.no_grad()
def adam_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
              exp_avg_sqs: Sequence[torch.Tensor], model_copies: Sequence[torch.Tensor], step: int, lr: float,
              beta1: float, beta2: float, eps: float, weight_decay: float, bias_correction: bool,
              adamw_mode: bool) -> None:
    """One Adam/AdamW step over every tensor, in place (the ``adam_step`` op's signature).

    Args:
        params: parameters (fp32/bf16/fp16) or fp32 master weights, contiguous, one device.
        grads: gradients, one per parameter (same element count; 16-bit allowed with fp32 masters).
        exp_avgs, exp_avg_sqs: the moments, fp32 or the parameters' dtype.
        model_copies: empty, or one bf16/fp16 copy per parameter written with the updated value.
        step: the step count including this step, >= 1.
        lr: >= 0. beta1, beta2: in [0, 1). eps: >= 0. weight_decay: >= 0.
        bias_correction: divide by ``1 - beta**step``. adamw_mode: decoupled decay, else L2.

    Raises:
        RuntimeError: as the CUDA op (the op spec's rules: bad hyper-parameters, mismatched lists).

    Side effects: updates params, the moments and model_copies in place; imports torch_npu if installed.
    """
    from anyaccel.ops.adam.spec import SPEC

    validation.check_scalars(SPEC.function("adam_step"), dict(step=step, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                                                               weight_decay=weight_decay))
    if not params:
        raise RuntimeError("adam_step: params is empty; pass at least one tensor")
    validation.check_optimizer_lists("adam_step", params, grads, {"exp_avgs": exp_avgs, "exp_avg_sqs": exp_avg_sqs},
                                     model_copies, [c.as_tuple() for c in SPEC.dtypes], params[0].device.type)
    kernel = ascend_kernel()
    fused = [i for i, (p, m) in enumerate(zip(params, exp_avgs, strict=True))
             if kernel is not None and m.dtype == p.dtype]
    rest = [i for i in range(len(params)) if i not in set(fused)]
    if fused and kernel is not None:
        p, g, m, v = _pick(fused, params, grads, exp_avgs, exp_avg_sqs)
        _ascend_step(kernel, p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode)
    if rest:
        p, g, m, v = _pick(rest, params, grads, exp_avgs, exp_avg_sqs)
        _foreach_step(p, g, m, v, step, lr, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode)
    if model_copies:
        write_back(model_copies, as_fp32(params))


def _pick(indices: list[int], *lists: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    return [[lst[i] for i in indices] for lst in lists]


def _ascend_step(kernel: Callable[..., Any], params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                 exp_avgs: Sequence[torch.Tensor], exp_avg_sqs: Sequence[torch.Tensor], step: int, lr: float,
                 beta1: float, beta2: float, eps: float, weight_decay: float, bias_correction: bool,
                 adamw_mode: bool) -> None:
    beta1_power = beta1 ** (step - 1) if bias_correction else 0.0
    beta2_power = beta2 ** (step - 1) if bias_correction else 0.0
    decay = weight_decay if adamw_mode else 0.0
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs, strict=True):
        g = g if g.dtype == p.dtype else g.to(p.dtype)
        if not adamw_mode and weight_decay != 0.0:
            g = g.add(p, alpha=weight_decay)
        kernel(beta1_power, beta2_power, lr, decay, beta1, beta2, eps, g, None, False, False, var=p, m=m, v=v)


def _foreach_step(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], exp_avgs: Sequence[torch.Tensor],
                  exp_avg_sqs: Sequence[torch.Tensor], step: int, lr: float, beta1: float, beta2: float, eps: float,
                  weight_decay: float, bias_correction: bool, adamw_mode: bool) -> None:
    bc1 = 1.0 - beta1 ** step if bias_correction else 1.0
    bc2 = 1.0 - beta2 ** step if bias_correction else 1.0
    ps, gs, ms, vs = as_fp32(params), as_fp32(grads), as_fp32(exp_avgs), as_fp32(exp_avg_sqs)
    if weight_decay != 0.0:
        if adamw_mode:
            foreach.mul_(ps, 1.0 - lr * weight_decay)
        else:
            gs = list(foreach.add(gs, ps, alpha=weight_decay))
    foreach.lerp_(ms, gs, 1.0 - beta1)
    foreach.mul_(vs, beta2)
    foreach.addcmul_(vs, gs, gs, value=1.0 - beta2)
    denom = foreach.sqrt(vs)
    foreach.mul_(denom, 1.0 / math.sqrt(bc2))
    foreach.add_(denom, eps)
    foreach.addcdiv_(ps, ms, denom, value=-lr / bc1)
    write_back(params, ps)
    write_back(exp_avgs, ms)
    write_back(exp_avg_sqs, vs)


def load() -> Any:
    """This implementation as a torch op, ``anyaccel_npu_adam::adam_step`` (the spec's schema and fake),
    registered for the ``npu`` device (torch_npu's PrivateUse1).

    Side effects: registers the op once per process.
    """
    from anyaccel.ops import python_ops
    from anyaccel.ops.adam.spec import SPEC

    return python_ops.define_custom_ops(SPEC, "anyaccel_npu_adam", {"adam_step": adam_step}, ("npu",), "npu")
