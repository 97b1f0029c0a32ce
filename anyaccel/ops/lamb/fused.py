"""``FusedLamb``: LAMB on accelerator parameters, one multi-tensor step per dtype bucket, DeepSpeed's arguments.

Drop-in for DeepSpeed's ``deepspeed.ops.lamb.FusedLamb`` (``deepspeed/ops/lamb/fused_lamb.py``: arguments
``lr, bias_correction, betas, eps, eps_inside_sqrt, weight_decay, max_grad_norm, max_coeff, min_coeff,
amsgrad``; ``step(closure, grads, output_params, scale, grad_norms)``; ``get_lamb_coeffs()``), computing what
its CUDA kernel computes (`anyaccel.ops.lamb.spec`), but with one launch sequence per bucket instead of
three launches per tensor. The kernel is the ``lamb`` family's implementation for the device type (CUDA
C++, Triton) chosen by [`anyaccel.ops.dispatch`][anyaccel.ops.dispatch].
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import torch
from typing_extensions import override

from anyaccel.ops.optimizer.base import Hyper, ListOptimizer
from anyaccel.ops.optimizer.hooks import step_entry
from anyaccel.ops.optimizer.plans import Bucket, Prepared

__all__ = ["CPULamb", "FusedLamb"]

_LAMB_HYPERS: tuple[Hyper, ...] = (
    Hyper("lr", "lr"),
    Hyper("betas", "beta1", 0),
    Hyper("betas", "beta2", 1),
    Hyper("eps", "eps"),
    Hyper("weight_decay", "weight_decay"),
    Hyper("bias_correction", "bias_correction", kind="bool"),
    Hyper("max_grad_norm", "max_grad_norm"),
    Hyper("max_coeff", "max_coeff"),
    Hyper("min_coeff", "min_coeff"),
)


class FusedLamb(ListOptimizer):
    """LAMB (You et al., ICLR 2020) with DeepSpeed's ``FusedLamb`` arguments, on an accelerator or the CPU.

    Per tensor (see `anyaccel.ops.lamb.spec`): Adam moments, an update ``u = m / (sqrt(v) + eps) + wd * p``,
    the trust ratio ``clamp(||p|| / ||u||, min_coeff, max_coeff)``, and ``p -= step_size * ratio * u`` with
    ``step_size = lr * sqrt(1 - beta2**t) / (1 - beta1**t)``. Storage as
    [`FusedAdam`][anyaccel.ops.adam.fused.FusedAdam]
    (fp32, or 16-bit parameters with fp32 or 16-bit moments; ``master_weights`` for fp32 masters writing the
    16-bit parameters in the same pass). The shared behaviour (validation before mutation, cached plans,
    ``capturable``) is [`ListOptimizer`][anyaccel.ops.optimizer.ListOptimizer]'s.

    Args:
        params: parameters or parameter-group dicts, contiguous, fp32/bf16/fp16.
        lr: learning rate, finite ``>= 0``.
        bias_correction: scale the step by the Adam bias corrections.
        betas: ``(beta1, beta2)`` in ``[0, 1)``.
        eps: finite ``> 0``.
        eps_inside_sqrt: ``sqrt(v + eps)`` instead of ``sqrt(v) + eps``.
        weight_decay: finite ``>= 0``, added to the update before the trust ratio.
        max_grad_norm: with ``grad_norms`` passed to [`step`][anyaccel.ops.lamb.fused.FusedLamb.step], gradients whose
            norm exceeds it are
            scaled down (DeepSpeed's clipping); ``0`` disables; finite ``>= 0``.
        max_coeff: the trust ratio's upper clamp, ``max_coeff > 0``.
        min_coeff: the trust ratio's lower clamp, ``0 <= min_coeff <= max_coeff``.
        amsgrad: must be False (not supported, as in DeepSpeed).
        set_grad_none: ``zero_grad()`` sets gradients to None.
        master_weights: fp32 master weights for 16-bit parameters.
        impl: force an implementation (``"cuda"``, ``"triton"``, ``"cpu"``); else ``ANYACCEL_IMPL_LAMB`` or the
            available one of highest priority.
        fp32_optimizer_states: moments in fp32 for 16-bit parameters (default True).
        capturable: step count and learning rate in device memory (CUDA graphs); needs the CUDA implementation.

    Raises:
        ValueError: a hyper-parameter is out of range (named with its value and range), or a parameter does
            not fit.
        TypeError: a hyper-parameter has the wrong type.
        NotImplementedError: ``amsgrad=True``.
    """

    _NAME: ClassVar[str] = "FusedLamb"
    _FAMILY: ClassVar[str] = "lamb"
    _STATE_KEYS: ClassVar[tuple[str, ...]] = ("exp_avg", "exp_avg_sq")
    _HYPERS: ClassVar[tuple[Hyper, ...]] = _LAMB_HYPERS
    _FIXED: ClassVar[dict[str, Any]] = {"amsgrad": False}

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, bias_correction: bool = True,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, eps_inside_sqrt: bool = False,
                 weight_decay: float = 0.0, max_grad_norm: float = 0.0, max_coeff: float = 10.0,
                 min_coeff: float = 0.01, amsgrad: bool = False, set_grad_none: bool = True,
                 master_weights: bool = False, impl: str | None = None, fp32_optimizer_states: bool = True,
                 capturable: bool = False) -> None:
        if not isinstance(eps_inside_sqrt, bool):
            raise TypeError(f"{self._NAME}: eps_inside_sqrt={eps_inside_sqrt!r} is invalid; accepted: True or False")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        max_grad_norm=max_grad_norm, max_coeff=max_coeff, min_coeff=min_coeff, amsgrad=amsgrad)
        self.set_grad_none = set_grad_none
        self.eps_inside_sqrt = eps_inside_sqrt
        self.eps_mode = 0 if eps_inside_sqrt else 1  # DeepSpeed's attribute
        #: the last step's trust-ratio tensor of each bucket and the parameters it covers, in step order
        self._coeffs: list[tuple[list[torch.Tensor], torch.Tensor]] = []
        self._grad_scales: list[float] = []
        super().__init__(params, defaults, master_weights=master_weights, fp32_optimizer_states=fp32_optimizer_states,
                         capturable=capturable, impl=impl)

    @override
    def __getstate__(self) -> dict[str, Any]:
        """The base class's pickled attributes plus the last step's trust ratios (``_coeffs``) and gradient
        scales, which are results, not caches: a copy reports the same ``get_lamb_coeffs()``."""
        kept = super().__getstate__()
        kept["_coeffs"], kept["_grad_scales"] = self._coeffs, self._grad_scales
        return kept

    @override
    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restores a pickled optimizer; one pickled before the ratios were kept gets none (as before a step).
        ``load_state_dict`` (which calls this with groups and state only) keeps the last step's ratios."""
        super().__setstate__(state)
        self.__dict__.setdefault("_coeffs", [])
        self.__dict__.setdefault("_grad_scales", [])

    def _check_group_extra(self, scalars: dict[str, Any], group_index: int | None) -> None:
        """``max_grad_norm >= 0``, ``min_coeff <= max_coeff``.

        Raises:
            ValueError: naming both values.
        """
        def where(key: str) -> str:
            return key if group_index is None else f"param_groups[{group_index}][{key!r}]"

        if scalars["max_grad_norm"] < 0:
            raise ValueError(f"{self._NAME}: {where('max_grad_norm')}={scalars['max_grad_norm']!r} is invalid; "
                             "accepted: a finite max_grad_norm >= 0")
        if scalars["min_coeff"] > scalars["max_coeff"]:
            raise ValueError(f"{self._NAME}: {where('min_coeff')}={scalars['min_coeff']!r} is greater than "
                             f"{where('max_coeff')}={scalars['max_coeff']!r}; accepted: 0 <= min_coeff <= max_coeff")

    @step_entry
    def step(self, closure: Callable[[], Any] | None = None, grads: Any = None, output_params: Any = None,
             scale: float = 1.0, grad_norms: Any = None) -> Any:
        """One LAMB step of every parameter with a gradient (DeepSpeed's signature).

        Args:
            closure: re-evaluates the model and returns the loss.
            grads: DeepSpeed's legacy gradient list; not supported (use ``p.grad``), must be None.
            output_params: DeepSpeed's legacy output list; not supported (use ``master_weights=True``), must
                be None.
            scale: gradients are divided by it (a loss scale), finite ``> 0``.
            grad_norms: per group (or one for all), the (scaled) global gradient norm; with the group's
                ``max_grad_norm > 0`` and ``norm / scale > max_grad_norm`` the gradients are further divided
                by that ratio.

        Raises:
            NotImplementedError: ``grads`` or ``output_params`` given.
            ValueError: ``scale`` not finite and positive, a gradient norm not a finite number ``>= 0``, or as
                [`ListOptimizer.step`][anyaccel.ops.optimizer.ListOptimizer.step] (nothing changed).
        """
        if grads is not None or output_params is not None:
            raise NotImplementedError("FusedLamb.step: the legacy grads= / output_params= lists are not supported; "
                                      "set p.grad, and use master_weights=True for 16-bit output copies")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not 0 < scale < float("inf"):
            raise ValueError(f"FusedLamb.step: scale={scale!r} is invalid; accepted: a finite number > 0")
        norms = list(grad_norms) if isinstance(grad_norms, (list, tuple)) else [grad_norms] * len(self.param_groups)
        scales = []
        for index, group in enumerate(self.param_groups):
            norm = norms[index] if index < len(norms) else None
            combined = float(scale)
            if norm is not None:
                value = float(norm)
                if not (value >= 0 and value < float("inf")):
                    raise ValueError(f"FusedLamb.step: grad_norms[{index}]={norm!r} is invalid; accepted: a finite "
                                     "number >= 0")
                max_norm = group["max_grad_norm"]
                if isinstance(max_norm, (int, float)) and max_norm > 0:
                    clip = (value / scale + 1e-6) / max_norm
                    if clip > 1:
                        combined = clip * scale
            scales.append(combined)
        last = self._coeffs, self._grad_scales
        self._grad_scales = scales
        self._coeffs = []
        try:
            return super().step(closure)
        except BaseException:
            if not self._coeffs:  # nothing launched (a refused step changes nothing): keep the last step's ratios
                self._coeffs, self._grad_scales = last
            raise

    def _launch_scalars(self, prepared: Prepared, bucket: Bucket) -> dict[str, Any]:
        coeffs = bucket.extras.get("lamb_coeffs")
        if coeffs is None or coeffs.numel() != len(bucket.targets):
            coeffs = bucket.extras["lamb_coeffs"] = torch.empty(len(bucket.targets), dtype=torch.float32,
                                                                device=bucket.device)
        self._coeffs.append((bucket.owners, coeffs))
        scale = self._grad_scales[prepared.index] if prepared.index < len(self._grad_scales) else 1.0
        return {"lamb_coeffs": coeffs, "grad_scale": scale, "eps_inside_sqrt": self.eps_inside_sqrt}

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


class CPULamb(FusedLamb):
    """[`FusedLamb`][anyaccel.ops.lamb.fused.FusedLamb] for parameters in CPU memory (ZeRO-Offload style), through the
    SIMD ``cpu_lamb`` op.

    Same arguments, math and state as [`FusedLamb`][anyaccel.ops.lamb.fused.FusedLamb]; parameters must be CPU tensors
    (a clear error
    names the alternative otherwise). DeepSpeed has no CPU LAMB; this is anyaccel's.
    """

    _NAME: ClassVar[str] = "CPULamb"
    _HOST: ClassVar[bool] = True
    _ALTERNATIVE: ClassVar[str] = "anyaccel's FusedLamb"
