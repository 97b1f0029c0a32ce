"""Float64 references of the optimizer steps, for tests that compare a kernel's step against them.

Formulas: ``torch.optim.AdamW`` / ``torch.optim.Adam`` as documented in PyTorch ("Algorithm" sections of their
docs), which DeepSpeed's ``csrc/adam`` kernels also compute (``adamw`` selects decoupled weight decay, else L2).
"""

from __future__ import annotations

import math

import torch


def adam_step_float64(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, *, step: int, lr: float,
                      beta1: float, beta2: float, eps: float, weight_decay: float, bias_correction: bool = True,
                      adamw: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Adam/AdamW step in float64.

    Args:
        p, g, m, v: the parameter, its gradient and the two moments, one shape, any float dtype (upcast, not
            modified).
        step: the step number after this update (1 for the first), for the bias corrections.
        lr, beta1, beta2, eps, weight_decay: the hyperparameters as ``torch.optim.AdamW`` takes them.
        bias_correction: divide by ``1 - beta**step`` (False: DeepSpeed's ``bias_correction=False``).
        adamw: decoupled weight decay (``p *= 1 - lr * weight_decay``); else L2 (``g += weight_decay * p``).

    Returns:
        The new ``(p, m, v)`` in float64.
    """
    p, g, m, v = (x.double() for x in (p, g, m, v))
    if adamw:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    bc1 = 1 - beta1**step if bias_correction else 1.0
    bc2 = 1 - beta2**step if bias_correction else 1.0
    return p - (lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + eps), m, v
