"""DeepSpeed's FusedLamb module function ``lamb(...)``, over anyaccel's ``lamb_step``.

A module loaded as ``FusedLambBuilder`` (CUDA, and the CPU build on the ``cpu`` accelerator) offers what
DeepSpeed 0.19.8's ``FusedLamb`` (``deepspeed/ops/lamb/fused_lamb.py``) calls on DeepSpeed's
``fused_lamb`` extension (``csrc/lamb/fused_lamb_cuda.cpp``)::

    coeff = lamb(p, p_copy, m, v, g, lr, beta1, beta2, max_coeff, min_coeff, eps, grad_scale, step, eps_mode,
                 bias_correction, decay)

one LAMB step of one tensor in place (``p_copy``: an empty tensor, or a 16-bit copy of ``p`` to write too),
returning a one-element tensor holding the tensor's trust ratio (``FusedLamb.get_lamb_coeffs()`` reads it
with ``.item()``). ``eps_mode`` 0 puts ``eps`` inside the square root, 1 outside (``FusedLamb``'s default);
``bias_correction`` is 1 or 0. The math is ``lamb_step``'s (`anyaccel.ops.lamb.spec`), which follows
DeepSpeed's kernel.

Differences: the coefficient is always a float32 tensor on ``p``'s device (DeepSpeed's has ``p``'s dtype unless
that is fp16); a non-contiguous tensor is updated (DeepSpeed's CUDA frontend asserts contiguity).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from anyaccel.integrations.deepspeed.abi.common import InvalidArgumentError, fp32, integer, overload, run_flat
from anyaccel.integrations.deepspeed.abi.declaration import DeepSpeedABI

__all__ = ["ABI", "LambABI", "adapter"]


class LambABI:
    """DeepSpeed's ``lamb`` over one loaded ``lamb`` module.

    Args:
        module: the loaded op module; its ``lamb_step`` runs the math on the device its build serves.
        functions: the function names the module offers.
    """

    def __init__(self, module: Any, functions: Sequence[str]) -> None:
        self._module = module
        self.functions = tuple(functions)

    def __repr__(self) -> str:
        return f"LambABI({self._module!r})"

    def lamb(self, p: Any, p_copy: Any, m: Any, v: Any, g: Any, lr: float, beta1: float, beta2: float,
             max_coeff: float, min_coeff: float, eps: float, grad_scale: float, step: int, eps_mode: int,
             bias_correction: int, decay: float) -> Any:
        """One LAMB step of ``p`` in place; returns its trust ratio.

        Args:
            p: the parameters (fp32 masters, or fp32/bf16/fp16), updated in place.
            p_copy: an empty tensor, or a 16-bit copy of ``p`` (same element count) that receives the result.
            m, v: the moments, updated in place.
            g: the gradient (``p``'s dtype, or the copy's 16-bit dtype with fp32 ``p``); read only.
            lr, beta1, beta2, eps, decay: the hyper-parameters (``decay`` is the weight decay).
            max_coeff, min_coeff: the trust ratio's clamp.
            grad_scale: ``g`` is divided by it (loss scaling).
            step: the step being taken, >= 1.
            eps_mode: 0 for ``sqrt(v + eps)``, 1 for ``sqrt(v) + eps``.
            bias_correction: 1 to apply Adam's bias corrections, 0 not to.

        Returns:
            A float32 tensor of one element on ``p``'s device: the trust ratio applied.

        Raises:
            InvalidArgumentError: ``eps_mode`` is not 0 or 1.
            TypeError: ``step``, ``eps_mode`` or ``bias_correction`` is not an int.
            RuntimeError: the kernel's checks (ranges, ``min_coeff <= max_coeff``, dtypes, devices, counts).
        """
        import torch

        mode = integer("lamb", "eps_mode", eps_mode)
        if mode not in (0, 1):
            raise InvalidArgumentError("lamb", "eps_mode", mode, "0 (eps inside the square root) or 1 (outside)")
        coeffs = torch.empty(1, dtype=torch.float32, device=p.device)
        scalars = (integer("lamb", "step", step), fp32(lr), fp32(beta1), fp32(beta2), fp32(eps), fp32(decay),
                   fp32(grad_scale), fp32(max_coeff), fp32(min_coeff),
                   bool(integer("lamb", "bias_correction", bias_correction)), mode == 0)
        if p_copy is not None and p_copy.numel() > 0:
            run_flat(self._lamb_step, (p, g, m, v, p_copy), (True, False, True, True, True), coeffs, *scalars)
        else:
            run_flat(self._lamb_step, (p, g, m, v), (True, False, True, True), [], coeffs, *scalars)
        return coeffs

    @functools.cached_property
    def _lamb_step(self) -> Any:
        """The module's ``lamb_step`` op, looked up once."""
        return overload(self._module.lamb_step)


def adapter(module: Any, functions: Sequence[str]) -> LambABI:
    """The factory `ABI` names."""
    return LambABI(module, functions)


#: The functions DeepSpeed's callers use on modules of the lamb builds, per builder name.
ABI = DeepSpeedABI(
    family="lamb",
    adapter="anyaccel.integrations.deepspeed.abi.lamb:adapter",
    builders=(("FusedLambBuilder", ("lamb",)),),  # deepspeed/ops/lamb/fused_lamb.py
)
