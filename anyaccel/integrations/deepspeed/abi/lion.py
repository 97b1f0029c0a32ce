"""DeepSpeed's CPU Lion and FusedLion module functions, over anyaccel's ``lion`` ops.

The module ``CPULionBuilder().load()`` returns offers what DeepSpeed 0.19.8's ``DeepSpeedCPULion``
(``deepspeed/ops/lion/cpu_lion.py``) calls on DeepSpeed's ``cpu_lion`` extension (signatures from
``deepspeed/ops/csrc/includes/cpu_lion.h``); a module loaded as ``FusedLionBuilder`` (CUDA, XPU, NPU, and
the CPU build on the ``cpu`` accelerator, where DeepSpeed has none) offers ``multi_tensor_lion``
(``deepspeed/ops/lion/fused_lion.py``, ``csrc/lion/fused_lion_frontend.cpp``):

=========================================================================  ================================
``create_lion(id, lr, beta1, beta2, weight_decay, should_log)``            stores the id; returns 0
``lion_update(id, step, lr, beta1, beta2, weight_decay, params, grads,     one step of one tensor; returns 0
exp_avg)``
``destroy_lion(id)``                                                       forgets the id (unknown: no-op)
``multi_tensor_lion(chunk_size, noop_flag, [g, p, m], lr, beta1, beta2,    one step of every tensor; None
step, weight_decay)``
=========================================================================  ================================

DeepSpeed 0.19.8 has no Lion rollback. ``multi_tensor_lion`` has the signature ``FusedLion`` calls (that of
DeepSpeed's CUDA frontend); DeepSpeed's unused CPU source ``csrc/cpu/lion/fused_lion.cpp`` declares an extra
``mode`` argument that no DeepSpeed caller passes. Conventions and deliberate differences (an unknown id
raises, non-contiguous tensors are updated, fp32-rounded scalars): `anyaccel.integrations.deepspeed.abi.common`.

Arithmetic: anyaccel's ``lion_step`` takes the sign as ``torch.sign`` (0 for an exactly zero interpolation
``beta1 * m + (1 - beta1) * g``, leaving that element unmoved apart from weight decay), as the Lion paper
and torch's reference implementations do; DeepSpeed's CPU kernel moves such an element by ``-lr``
(``copysign``) and its CUDA kernel by ``+lr``. Elsewhere the step is the same up to fp32 rounding.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any

from anyaccel.integrations.deepspeed.abi.common import (
    OptimizerRegistry,
    check_tensor_lists,
    copy_back,
    flat_lists,
    fp32,
    integer,
    overload,
    run_flat,
)
from anyaccel.integrations.deepspeed.abi.declaration import DeepSpeedABI

logger = logging.getLogger(__name__)

__all__ = ["ABI", "LionHyperParameters", "LionABI", "REGISTRY", "adapter"]

CREATE_LION = "create_lion(optimizer_id, lr, beta1, beta2, weight_decay, should_log)"
MULTI_TENSOR_LAYOUT = "3 lists [grads, params, exp_avgs]"


@dataclasses.dataclass(frozen=True)
class LionHyperParameters:
    """What a DeepSpeed Lion optimizer id stands for: its latest hyper-parameters, fp32-rounded."""

    lr: float
    beta1: float
    beta2: float
    weight_decay: float


#: The Lion optimizer ids of this process.
REGISTRY: OptimizerRegistry[LionHyperParameters] = OptimizerRegistry("lion", CREATE_LION)


class LionABI:
    """DeepSpeed's Lion functions over one loaded ``lion`` module (see the module doc for the table).

    Args:
        module: the loaded op module; its ``lion_step`` runs the math on the device its build serves.
        functions: the function names the module offers.
    """

    def __init__(self, module: Any, functions: Sequence[str]) -> None:
        self._module = module
        self.functions = tuple(functions)

    def __repr__(self) -> str:
        return f"LionABI({self._module!r})"

    def create_lion(self, optimizer_id: int, lr: float, beta1: float, beta2: float, weight_decay: float,
                    should_log: bool) -> int:
        """Create (or replace) DeepSpeed Lion optimizer ``optimizer_id``.

        Args:
            optimizer_id: the id (``DeepSpeedCPULion.opt_id``).
            lr, beta1, beta2, weight_decay: initial hyper-parameters (``lion_update`` passes them again).
            should_log: log the configuration at INFO (DeepSpeed prints it).

        Returns:
            0.

        Raises:
            TypeError: ``optimizer_id`` is not an int or a hyper-parameter not a real number.
        """
        oid = integer("create_lion", "optimizer_id", optimizer_id)
        hyper = LionHyperParameters(fp32(lr), fp32(beta1), fp32(beta2), fp32(weight_decay))
        REGISTRY.create(oid, hyper)
        if should_log:
            logger.info("Lion optimizer #%d is created (anyaccel %s). Config: alpha=%f, betas=(%f, %f), "
                        "weight_decay=%f", oid, getattr(self._module, "op", "lion"), hyper.lr, hyper.beta1,
                        hyper.beta2, hyper.weight_decay)
        return 0

    def lion_update(self, optimizer_id: int, step: int, lr: float, beta1: float, beta2: float, weight_decay: float,
                    params: Any, grads: Any, exp_avg: Any) -> int:
        """One Lion step of one tensor, in place.

        Args:
            optimizer_id: an id made by `create_lion`.
            step: the step count (Lion does not use it; an int as DeepSpeed's ``size_t``).
            lr, beta1, beta2, weight_decay: this step's hyper-parameters (ranges of ``lion_step``).
            params: the parameters (fp32, bf16 or fp16), updated in place.
            grads: their gradients (the parameter dtype), same element count; read only.
            exp_avg: the momentum (fp32 or the parameter dtype), updated in place.

        Returns:
            0.

        Raises:
            UnknownOptimizerIdError: the id does not exist.
            TypeError: ``optimizer_id`` or ``step`` is not an int.
            RuntimeError: the kernel's checks (range, dtype combination, device, element counts).
        """
        oid = integer("lion_update", "optimizer_id", optimizer_id)
        REGISTRY.get("lion_update", oid)
        integer("lion_update", "step", step)
        hyper = LionHyperParameters(fp32(lr), fp32(beta1), fp32(beta2), fp32(weight_decay))
        REGISTRY.update(oid, hyper)
        run_flat(self._lion_step, (params, grads, exp_avg), (True, False, True), [], hyper.lr, hyper.beta1,
                 hyper.beta2, hyper.weight_decay)
        return 0

    def destroy_lion(self, optimizer_id: int) -> int:
        """Forget ``optimizer_id``; an unknown id is not an error. Returns 0."""
        REGISTRY.destroy(integer("destroy_lion", "optimizer_id", optimizer_id))
        return 0

    def multi_tensor_lion(self, chunk_size: int, noop_flag: Any, tensor_lists: Sequence[Sequence[Any]], lr: float,
                          beta1: float, beta2: float, step: int, weight_decay: float) -> None:
        """One Lion step of every tensor of ``tensor_lists``, in place (DeepSpeed's ``FusedLion``).

        Args:
            chunk_size: DeepSpeed's multi-tensor chunk; unused.
            noop_flag: DeepSpeed's overflow buffer; unused (DeepSpeed's kernel ignores it too).
            tensor_lists: ``[grads, params, exp_avgs]``, one entry per parameter each.
            lr, beta1, beta2, weight_decay: the group's hyper-parameters.
            step: the group's step (unused by Lion; an int).

        Raises:
            TensorListsError: ``tensor_lists`` does not have that layout.
            RuntimeError: the kernel's checks.
        """
        grads, params, exp_avgs = check_tensor_lists("multi_tensor_lion", tensor_lists, 3, MULTI_TENSOR_LAYOUT)
        integer("multi_tensor_lion", "step", step)
        if not params:
            return
        (p, g, m), write_back = flat_lists((params, grads, exp_avgs), (True, False, True))
        self._lion_step(p, g, m, [], fp32(lr), fp32(beta1), fp32(beta2), fp32(weight_decay))
        copy_back(write_back)

    @functools.cached_property
    def _lion_step(self) -> Any:
        """The module's ``lion_step`` op, looked up once."""
        return overload(self._module.lion_step)


def adapter(module: Any, functions: Sequence[str]) -> LionABI:
    """The factory `ABI` names."""
    return LionABI(module, functions)


#: The functions DeepSpeed's callers use on modules of the lion builds, per builder name.
ABI = DeepSpeedABI(
    family="lion",
    adapter="anyaccel.integrations.deepspeed.abi.lion:adapter",
    builders=(
        ("CPULionBuilder", ("create_lion", "lion_update", "destroy_lion")),  # deepspeed/ops/lion/cpu_lion.py
        ("FusedLionBuilder", ("multi_tensor_lion",)),  # deepspeed/ops/lion/fused_lion.py
    ),
)
