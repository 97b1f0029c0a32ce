"""``FusedLamb``: LAMB on accelerator parameters, one multi-tensor step per dtype bucket, DeepSpeed's arguments.

Drop-in for DeepSpeed's ``deepspeed.ops.lamb.FusedLamb`` (``deepspeed/ops/lamb/fused_lamb.py``: arguments
``lr, bias_correction, betas, eps, eps_inside_sqrt, weight_decay, max_grad_norm, max_coeff, min_coeff,
amsgrad``; ``step(closure, grads, output_params, scale, grad_norms)``; ``get_lamb_coeffs()``), computing what
its CUDA kernel computes (:mod:`anyaccel.ops.lamb.spec`), but with one launch sequence per bucket instead of
three launches per tensor. The kernel is the ``lamb`` family's implementation for the device type (CUDA
C++, Triton) chosen by :mod:`anyaccel.ops.dispatch`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch

from anyaccel.ops.fused_buckets import Bucket
from anyaccel.ops.fused_optimizer import FusedOptimizer

__all__ = ["FusedLamb"]


class FusedLamb(FusedOptimizer):
    """LAMB (You et al., ICLR 2020) for parameters on an accelerator, with DeepSpeed's ``FusedLamb`` arguments.

    Per tensor (see :mod:`anyaccel.ops.lamb.spec`): Adam moments, an update ``u = m / (sqrt(v) + eps) + wd * p``,
    the trust ratio ``clamp(||p|| / ||u||, min_coeff, max_coeff)``, and ``p -= step_size * ratio * u`` with
    ``step_size = lr * sqrt(1 - beta2**t) / (1 - beta1**t)``. Storage as :class:`~anyaccel.ops.adam.FusedAdam`
    (fp32, or 16-bit parameters with fp32 or 16-bit moments; ``master_weights`` for fp32 masters writing the
    16-bit parameters in the same pass).

    Args:
        params: parameters or parameter-group dicts, contiguous, on one accelerator device type.
        lr: learning rate, ``>= 0``.
        bias_correction: scale the step by the Adam bias corrections.
        betas: ``(beta1, beta2)`` in ``[0, 1)``.
        eps: ``> 0``.
        eps_inside_sqrt: ``sqrt(v + eps)`` instead of ``sqrt(v) + eps``.
        weight_decay: ``>= 0``, added to the update before the trust ratio.
        max_grad_norm: with ``grad_norms`` passed to :meth:`step`, gradients whose norm exceeds it are
            scaled down (DeepSpeed's clipping); ``0`` disables.
        max_coeff, min_coeff: the trust ratio's clamp, ``0 <= min_coeff <= max_coeff``.
        amsgrad: must be False (not supported, as in DeepSpeed).
        set_grad_none: ``zero_grad()`` sets gradients to None.
        master_weights: fp32 master weights for 16-bit parameters.
        fp32_optimizer_states: moments in fp32 for 16-bit parameters (default True).
        impl: force an implementation (``"cuda"``, ``"triton"``); else ``ANYACCEL_IMPL_LAMB`` or the available
            one of highest priority.

    Raises:
        ValueError: a hyper-parameter is out of range (named with its value and range).
        NotImplementedError: ``amsgrad=True``.
    """

    _NAME: ClassVar[str] = "FusedLamb"
    _OP: ClassVar[str] = "lamb"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")
    _COUNT_STEPS: ClassVar[bool] = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, eps_inside_sqrt: bool = False,
                 weight_decay: float = 0.0, max_grad_norm: float = 0.0, max_coeff: float = 10.0,
                 min_coeff: float = 0.01, amsgrad: bool = False, set_grad_none: bool = True,
                 master_weights: bool = False, impl: str | None = None, fp32_optimizer_states: bool = True) -> None:
        if amsgrad:
            raise NotImplementedError("FusedLamb does not support the AMSGrad variant (as DeepSpeed's FusedLamb); "
                                      "pass amsgrad=False")
        checks = (
            ("lr", lr, lr >= 0.0, ">= 0"),
            ("eps", eps, eps > 0.0, "> 0"),
            ("weight_decay", weight_decay, weight_decay >= 0.0, ">= 0"),
            ("betas[0]", betas[0], 0.0 <= betas[0] < 1.0, "in [0, 1)"),
            ("betas[1]", betas[1], 0.0 <= betas[1] < 1.0, "in [0, 1)"),
            ("max_grad_norm", max_grad_norm, max_grad_norm >= 0.0, ">= 0"),
            ("max_coeff", max_coeff, max_coeff > 0.0, "> 0"),
            ("min_coeff", min_coeff, 0.0 <= min_coeff <= max_coeff, "in [0, max_coeff]"),
        )
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        max_grad_norm=max_grad_norm, max_coeff=max_coeff, min_coeff=min_coeff)
        super().__init__(params, defaults, checks, set_grad_none, master_weights, fp32_optimizer_states, impl)
        self.eps_inside_sqrt = eps_inside_sqrt
        self.eps_mode = 0 if eps_inside_sqrt else 1  # DeepSpeed's attribute
        #: per step, the trust-ratio tensor of each bucket and the parameters it covers, in step order
        self._coeffs: list[tuple[list[torch.Tensor], torch.Tensor]] = []
        self._scale = 1.0

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None, grads: Any = None, output_params: Any = None,
             scale: float = 1.0, grad_norms: Any = None) -> float | None:
        """One LAMB step of every parameter with a gradient (DeepSpeed's signature).

        Args:
            closure: re-evaluates the model and returns the loss.
            grads, output_params: DeepSpeed's legacy lists; not supported (use ``p.grad`` and
                ``master_weights=True``) and must be None.
            scale: gradients are divided by it (a loss scale), ``> 0``.
            grad_norms: per group, the (scaled) global gradient norm; with the group's ``max_grad_norm > 0``
                and ``norm / scale > max_grad_norm`` the gradients are further divided by that ratio.

        Raises:
            NotImplementedError: ``grads`` or ``output_params`` given.
            ValueError: ``scale`` not finite and positive.
        """
        if grads is not None or output_params is not None:
            raise NotImplementedError("FusedLamb.step: the legacy grads= / output_params= lists are not supported; "
                                      "set p.grad, and use master_weights=True for 16-bit output copies")
        if not (isinstance(scale, (int, float)) and 0 < scale < float("inf")):
            raise ValueError(f"FusedLamb.step: scale={scale!r} is invalid; it must be a finite number > 0")
        self._coeffs = []
        self._grad_norms = list(grad_norms) if isinstance(grad_norms, (list, tuple)) else (
            [grad_norms] * len(self.param_groups))
        self._scale = float(scale)
        return super().step(closure)

    def _combined_scale(self, group: dict[str, Any]) -> float:
        index = self.param_groups.index(group)
        norm = self._grad_norms[index] if index < len(self._grad_norms) else None
        combined = self._scale
        if group["max_grad_norm"] > 0 and norm is not None:
            clip = ((float(norm) / self._scale) + 1e-6) / group["max_grad_norm"]
            if clip > 1:
                combined = clip * self._scale
        return combined

    def _step_bucket(self, op: Any, group: dict[str, Any], bucket: Bucket) -> None:
        """One ``lamb_step`` for the bucket's tensors; records the trust ratios for :meth:`get_lamb_coeffs`."""
        beta1, beta2 = group["betas"]
        coeffs = torch.empty(len(bucket.params), dtype=torch.float32, device=bucket.params[0].device)
        op.lamb_step(bucket.params, bucket.grads, bucket.states["exp_avg"], bucket.states["exp_avg_sq"],
                     bucket.copies, coeffs, bucket.step, float(group["lr"]), float(beta1), float(beta2),
                     float(group["eps"]), float(group["weight_decay"]), self._combined_scale(group),
                     float(group["max_coeff"]), float(group["min_coeff"]), bool(group["bias_correction"]),
                     self.eps_inside_sqrt)
        self._coeffs.append((bucket.owners, coeffs))

    def get_lamb_coeffs(self) -> list[float]:
        """The trust ratio of every parameter updated by the last step, in parameter-group order (DeepSpeed's
        ``get_lamb_coeffs``).

        Side effects: synchronises with the device (reads the ratios).
        """
        position = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        pairs = [(position[id(p)], float(c)) for owners, coeffs in self._coeffs
                 for p, c in zip(owners, coeffs.tolist(), strict=True)]
        return [c for _, c in sorted(pairs)]

    @property
    def lamb_coeffs(self) -> list[torch.Tensor]:
        """DeepSpeed's attribute: the last step's trust-ratio tensors (one per bucket here)."""
        return [c for _, c in self._coeffs]
