"""DeepSpeed's CPU Adagrad module functions, over anyaccel's ``adagrad_step``.

The module ``CPUAdagradBuilder().load()`` returns offers what DeepSpeed 0.19.8's ``DeepSpeedCPUAdagrad``
(``deepspeed/ops/adagrad/cpu_adagrad.py``) calls on DeepSpeed's ``cpu_adagrad`` extension (signatures from
``deepspeed/ops/csrc/adagrad/cpu_adagrad.cpp``):

=====================================================================  ======================================
``create_adagrad(id, lr, eps, weight_decay, should_log)``              stores the id; returns 0
``adagrad_update(id, step, lr, eps, weight_decay, params, grads,       one step of one tensor; returns 0
exp_avg_sq)``
``destroy_adagrad(id)``                                                forgets the id (unknown: no-op)
=====================================================================  ======================================

``DeepSpeedCPUAdagrad`` also calls ``adagrad_update`` on the ``values()`` of sparse gradients and of the
matching parameter and state entries, and scatters the results back itself. Conventions and deliberate
differences (an unknown id raises, non-contiguous tensors are updated, fp32-rounded scalars):
`anyaccel.integrations.deepspeed.abi.common`. DeepSpeed's scalar tail also overwrites the gradient with the update
(``grads[k] = -lr * g / (sqrt(v) + eps)``, for the elements after its last SIMD block); anyaccel never writes
the gradient.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any

from anyaccel.integrations.deepspeed.abi.common import OptimizerRegistry, fp32, integer, overload, run_flat
from anyaccel.integrations.deepspeed.abi.declaration import DeepSpeedABI

logger = logging.getLogger(__name__)

__all__ = ["ABI", "AdagradHyperParameters", "AdagradABI", "REGISTRY", "adapter"]

CREATE_ADAGRAD = "create_adagrad(optimizer_id, lr, eps, weight_decay, should_log)"


@dataclasses.dataclass(frozen=True)
class AdagradHyperParameters:
    """What a DeepSpeed Adagrad optimizer id stands for: its latest hyper-parameters, fp32-rounded."""

    lr: float
    eps: float
    weight_decay: float


#: The Adagrad optimizer ids of this process.
REGISTRY: OptimizerRegistry[AdagradHyperParameters] = OptimizerRegistry("adagrad", CREATE_ADAGRAD)


class AdagradABI:
    """DeepSpeed's Adagrad functions over one loaded ``adagrad`` module (see the module doc for the table).

    Args:
        module: the loaded op module; its ``adagrad_step`` runs the math.
        functions: the function names the module offers.
    """

    def __init__(self, module: Any, functions: Sequence[str]) -> None:
        self._module = module
        self.functions = tuple(functions)

    def __repr__(self) -> str:
        return f"AdagradABI({self._module!r})"

    def create_adagrad(self, optimizer_id: int, lr: float, eps: float, weight_decay: float, should_log: bool) -> int:
        """Create (or replace) DeepSpeed Adagrad optimizer ``optimizer_id``.

        Args:
            optimizer_id: the id (``DeepSpeedCPUAdagrad.opt_id``).
            lr, eps, weight_decay: initial hyper-parameters (``adagrad_update`` passes them again).
            should_log: log the configuration at INFO (DeepSpeed prints it).

        Returns:
            0.

        Raises:
            TypeError: ``optimizer_id`` is not an int or a hyper-parameter not a real number.
        """
        oid = integer("create_adagrad", "optimizer_id", optimizer_id)
        hyper = AdagradHyperParameters(fp32(lr), fp32(eps), fp32(weight_decay))
        REGISTRY.create(oid, hyper)
        if should_log:
            logger.info("Adagrad optimizer #%d is created (anyaccel %s). Config: alpha=%f, weight_decay=%f", oid,
                        getattr(self._module, "op", "adagrad"), hyper.lr, hyper.weight_decay)
        return 0

    def adagrad_update(self, optimizer_id: int, step: int, lr: float, eps: float, weight_decay: float, params: Any,
                       grads: Any, exp_avg_sq: Any) -> int:
        """One Adagrad step of one tensor, in place.

        Args:
            optimizer_id: an id made by `create_adagrad`.
            step: the step count (Adagrad does not use it; an int as DeepSpeed's ``size_t``).
            lr, eps, weight_decay: this step's hyper-parameters (``lr >= 0``, ``eps > 0``, ``weight_decay >= 0``).
            params: the parameters (fp32, bf16 or fp16), updated in place.
            grads: their gradients (dense, the parameter dtype), same element count; read only.
            exp_avg_sq: the sum of squared gradients (fp32 or the parameter dtype), updated in place.

        Returns:
            0.

        Raises:
            UnknownOptimizerIdError: the id does not exist.
            TypeError: ``optimizer_id`` or ``step`` is not an int.
            RuntimeError: the kernel's checks (range, dtype combination, device, element counts).
        """
        oid = integer("adagrad_update", "optimizer_id", optimizer_id)
        REGISTRY.get("adagrad_update", oid)
        integer("adagrad_update", "step", step)
        hyper = AdagradHyperParameters(fp32(lr), fp32(eps), fp32(weight_decay))
        REGISTRY.update(oid, hyper)
        run_flat(self._adagrad_step, (params, grads, exp_avg_sq), (True, False, True), [], hyper.lr, hyper.eps,
                 hyper.weight_decay)
        return 0

    def destroy_adagrad(self, optimizer_id: int) -> int:
        """Forget ``optimizer_id``; an unknown id is not an error. Returns 0."""
        REGISTRY.destroy(integer("destroy_adagrad", "optimizer_id", optimizer_id))
        return 0

    @functools.cached_property
    def _adagrad_step(self) -> Any:
        """The module's ``adagrad_step`` op, looked up once."""
        return overload(self._module.adagrad_step)


def adapter(module: Any, functions: Sequence[str]) -> AdagradABI:
    """The factory `ABI` names."""
    return AdagradABI(module, functions)


#: The functions DeepSpeed's callers use on modules of the adagrad builds, per builder name.
ABI = DeepSpeedABI(
    family="adagrad",
    adapter="anyaccel.integrations.deepspeed.abi.adagrad:adapter",
    # deepspeed/ops/adagrad/cpu_adagrad.py (DeepSpeedCPUAdagrad)
    builders=(("CPUAdagradBuilder", ("create_adagrad", "adagrad_update", "destroy_adagrad")),),
)
