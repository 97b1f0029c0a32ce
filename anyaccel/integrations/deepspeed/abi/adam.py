"""DeepSpeed's CPU Adam and FusedAdam module functions, over anyaccel's ``adam`` ops.

The module ``CPUAdamBuilder().load()`` returns offers, besides ``adam_step``/``adam_rollback_step``/``isa``,
what DeepSpeed 0.19.8's callers call on DeepSpeed's ``cpu_adam`` extension (signatures from
``deepspeed/ops/csrc/includes/cpu_adam.h``, callers in ``deepspeed/ops/adam/cpu_adam.py`` and
``deepspeed/runtime/zenflow/``); a module loaded as ``FusedAdamBuilder`` (CUDA, XPU, NPU, and the CPU build on
the ``cpu`` accelerator) offers ``multi_tensor_adam`` (``deepspeed/ops/adam/fused_adam.py``,
``csrc/adam/multi_tensor_adam.cu``, ``csrc/cpu/adam/fused_adam.cpp``):

====================================================================  =========================================
``create_adam(id, lr, beta1, beta2, eps, weight_decay, adamw_mode,    stores the id's hyper-parameters; returns 0
should_log)``
``adam_update(id, step, lr, beta1, beta2, eps, weight_decay,          one step of one tensor in place; returns 0
bias_correction, params, grads, exp_avg, exp_avg_sq)``
``adam_rollback(...)``, same arguments                                undoes that step (``adam_rollback_step``);
                                                                      returns 0
``destroy_adam(id)``                                                  forgets the id (unknown: no-op); returns 0
``multi_tensor_adam(chunk_size, noop_flag, [g, p, m, v], lr, beta1,   one step of every tensor; returns None
beta2, eps, step, mode, bias_correction, weight_decay)``
``zenflow_adam_*``                                                    ZenFlow's overlapped step (``zenflow.py``)
====================================================================  =========================================

Conventions (DeepSpeed's, except where its behaviour is a crash or a silent no-op; see
`anyaccel.integrations.deepspeed.abi.common`): ``adamw_mode`` is fixed at ``create_adam``, every other
hyper-parameter is passed per call; real scalars are rounded to fp32 as DeepSpeed's C ``float`` parameters are;
``step`` is the step being taken (1 at the first) and gives the bias corrections ``1 - beta**step``; ``mode`` is 1
for AdamW and 0 for L2 weight decay; ``chunk_size`` and ``noop_flag`` are accepted and unused (anyaccel's kernels
choose their own work split; DeepSpeed's kernels ignore the flag too: they propagate inf/NaN).

Where anyaccel differs, deliberately: an unknown id raises
`UnknownOptimizerIdError` (DeepSpeed: segmentation fault); a
non-contiguous tensor is updated (DeepSpeed updates a copy and drops it); ``adam_rollback`` honours ``adamw_mode``
and ``bias_correction`` and accepts every dtype combination of ``adam_step`` (DeepSpeed: always the bias-corrected
AdamW inverse, fp32 only, -1 and a printed message otherwise); and the arithmetic is anyaccel's
(``csrc/adam/cpu_adam.cpp``: torch's ``lerp`` form of the first moment, ``fma`` rounding of the second), which
differs from DeepSpeed's kernel in the last bits of a step.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from typing import Any

from anyaccel.integrations.deepspeed.abi import zenflow
from anyaccel.integrations.deepspeed.abi.common import (
    InvalidArgumentError,
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

__all__ = ["ABI", "AdamHyperParameters", "AdamABI", "REGISTRY", "adapter"]

CREATE_ADAM = "create_adam(optimizer_id, lr, beta1, beta2, eps, weight_decay, adamw_mode, should_log)"
MULTI_TENSOR_LAYOUT = "4 lists [grads, params, exp_avgs, exp_avg_sqs]"


@dataclasses.dataclass(frozen=True)
class AdamHyperParameters:
    """What a DeepSpeed Adam optimizer id stands for: its latest hyper-parameters (fp32-rounded) and its mode.

    Attributes:
        lr, beta1, beta2, eps, weight_decay: the values of the latest ``create_adam``/``adam_update`` call.
        adamw_mode: decoupled weight decay (AdamW) when True, L2 added to the gradient when False; fixed at
            ``create_adam``.
    """

    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    adamw_mode: bool


#: The Adam optimizer ids of this process (shared by every loaded Adam module, as ids are per process).
REGISTRY: OptimizerRegistry[AdamHyperParameters] = OptimizerRegistry("adam", CREATE_ADAM)


class AdamABI:
    """DeepSpeed's Adam functions over one loaded ``adam`` module (see the module doc for the table).

    Args:
        module: the loaded op module; its ``adam_step`` (and, for rollback, ``adam_rollback_step``) run the
            math, on the device its build serves.
        functions: the function names the module offers (the spec's `DeepSpeedABI`
            for the builder names of its build); the others are not offered on it.
    """

    def __init__(self, module: Any, functions: Sequence[str]) -> None:
        self._module = module
        self.functions = tuple(functions)

    def __repr__(self) -> str:
        return f"AdamABI({self._module!r})"

    # ----- CPU Adam: the optimizer-id lifecycle ----------------------------------------------------------
    def create_adam(self, optimizer_id: int, lr: float, beta1: float, beta2: float, eps: float,
                    weight_decay: float, adamw_mode: bool, should_log: bool) -> int:
        """Create (or replace) DeepSpeed Adam optimizer ``optimizer_id``.

        Args:
            optimizer_id: the id (``DeepSpeedCPUAdam.opt_id``).
            lr, beta1, beta2, eps, weight_decay: initial hyper-parameters (``adam_update`` passes them again).
            adamw_mode: AdamW (True) or Adam with L2 weight decay (False), for every later call of this id.
            should_log: log the optimizer's configuration and SIMD level at INFO (DeepSpeed prints it).

        Returns:
            0, as DeepSpeed's ``create_adam_optimizer``.

        Raises:
            TypeError: ``optimizer_id`` is not an int or a hyper-parameter not a real number.
        """
        oid = integer("create_adam", "optimizer_id", optimizer_id)
        hyper = AdamHyperParameters(fp32(lr), fp32(beta1), fp32(beta2), fp32(eps), fp32(weight_decay),
                                    bool(adamw_mode))
        REGISTRY.create(oid, hyper)
        if should_log:
            isa = self._isa()
            logger.info("Adam optimizer #%d is created with %s arithmetic capability (anyaccel %s). Config: "
                        "alpha=%f, betas=(%f, %f), weight_decay=%f, adam_w=%d", oid, isa, self._name(),
                        hyper.lr, hyper.beta1, hyper.beta2, hyper.weight_decay, int(hyper.adamw_mode))
        return 0

    def adam_update(self, optimizer_id: int, step: int, lr: float, beta1: float, beta2: float, eps: float,
                    weight_decay: float, bias_correction: bool, params: Any, grads: Any, exp_avg: Any,
                    exp_avg_sq: Any) -> int:
        """One Adam step of one tensor, in place, with the id's ``adamw_mode``.

        Args:
            optimizer_id: an id made by `create_adam`.
            step: the step being taken, >= 1 (the bias corrections are ``1 - beta**step``).
            lr, beta1, beta2, eps, weight_decay: this step's hyper-parameters (ranges of ``adam_step``).
            bias_correction: apply the bias corrections.
            params: the parameters (CPU for the CPU build; fp32, bf16 or fp16), updated in place.
            grads: their gradients (the parameter dtype), same element count; read only.
            exp_avg, exp_avg_sq: the moments (fp32 or the parameter dtype), updated in place.

        Returns:
            0, as DeepSpeed's ``ds_adam_step``.

        Raises:
            UnknownOptimizerIdError: the id does not exist.
            TypeError: ``optimizer_id`` or ``step`` is not an int.
            RuntimeError: the kernel's checks (a scalar out of range, a dtype combination it does not
                support, a tensor on another device, element counts that differ), naming the value.
        """
        oid = integer("adam_update", "optimizer_id", optimizer_id)
        hyper = REGISTRY.get("adam_update", oid)
        hyper = self._remember(oid, hyper, lr, beta1, beta2, eps, weight_decay)
        run_flat(self._adam_step, (params, grads, exp_avg, exp_avg_sq), (True, False, True, True), [],
                 integer("adam_update", "step", step), hyper.lr, hyper.beta1, hyper.beta2, hyper.eps,
                 hyper.weight_decay, bool(bias_correction), hyper.adamw_mode)
        return 0

    def adam_rollback(self, optimizer_id: int, step: int, lr: float, beta1: float, beta2: float, eps: float,
                      weight_decay: float, bias_correction: bool, params: Any, grads: Any, exp_avg: Any,
                      exp_avg_sq: Any) -> int:
        """Undo the `adam_update` of ``step`` made with these gradients and arguments, in place.

        DeepSpeed calls it from ``DeepSpeedCPUAdam.rollback_subgroup`` with the sub-group's current step and
        then decrements the step. The rules are ``adam_rollback_step``'s (``csrc/adam/cpu_adam.cpp``): the
        state comes back within fp32 rounding.

        Args:
            optimizer_id: an id made by `create_adam` (its ``adamw_mode`` is the step's).
            step: the step being undone, >= 1.
            lr, beta1, beta2, eps, weight_decay: the step's hyper-parameters (``beta1``, ``beta2`` in (0, 1)).
            bias_correction: whether the step applied bias corrections.
            params, grads, exp_avg, exp_avg_sq: as for `adam_update`.

        Returns:
            0 (DeepSpeed returns -1 and changes nothing for tensors that are not all fp32; anyaccel rolls every
            dtype combination of ``adam_step`` back).

        Raises:
            The errors of `adam_update`.
        """
        oid = integer("adam_rollback", "optimizer_id", optimizer_id)
        hyper = REGISTRY.get("adam_rollback", oid)
        run_flat(self._adam_rollback_step, (params, grads, exp_avg, exp_avg_sq), (True, False, True, True),
                 [], integer("adam_rollback", "step", step), fp32(lr), fp32(beta1), fp32(beta2), fp32(eps),
                 fp32(weight_decay), bool(bias_correction), hyper.adamw_mode)
        return 0

    def destroy_adam(self, optimizer_id: int) -> int:
        """Forget ``optimizer_id``; an id that does not exist is not an error (``DeepSpeedCPUAdam.__del__``
        destroys its id even when ``create_adam`` failed).

        Returns:
            0, as DeepSpeed's ``destroy_adam_optimizer``.
        """
        REGISTRY.destroy(integer("destroy_adam", "optimizer_id", optimizer_id))
        return 0

    # ----- FusedAdam ----------------------------------------------------------------------------------------
    def multi_tensor_adam(self, chunk_size: int, noop_flag: Any, tensor_lists: Sequence[Sequence[Any]], lr: float,
                          beta1: float, beta2: float, epsilon: float, step: int, mode: int, bias_correction: int,
                          weight_decay: float) -> None:
        """One Adam step of every tensor of ``tensor_lists``, in place (DeepSpeed's ``FusedAdam``).

        Args:
            chunk_size: DeepSpeed's multi-tensor chunk (2048 * 32); unused.
            noop_flag: DeepSpeed's overflow buffer; unused (DeepSpeed's kernels ignore it too).
            tensor_lists: ``[grads, params, exp_avgs, exp_avg_sqs]``, one entry per parameter each; the states
                have the parameter's dtype (``FusedAdam``) or fp32.
            lr, beta1, beta2, epsilon, weight_decay: the group's hyper-parameters.
            step: the group's step, >= 1.
            mode: 1 for AdamW (decoupled weight decay), 0 for L2 weight decay.
            bias_correction: 1 to apply the bias corrections, 0 not to.

        Raises:
            TensorListsError: ``tensor_lists`` does not have that layout.
            InvalidArgumentError: ``mode`` is not 0 or 1.
            RuntimeError: the kernel's checks (as `adam_update`).
        """
        grads, params, exp_avgs, exp_avg_sqs = check_tensor_lists("multi_tensor_adam", tensor_lists, 4,
                                                                  MULTI_TENSOR_LAYOUT)
        mode = integer("multi_tensor_adam", "mode", mode)
        if mode not in (0, 1):
            raise InvalidArgumentError("multi_tensor_adam", "mode", mode, "1 (AdamW) or 0 (Adam with L2 weight decay)")
        if not params:
            return
        (p, g, m, v), write_back = flat_lists((params, grads, exp_avgs, exp_avg_sqs), (True, False, True, True))
        self._adam_step(p, g, m, v, [], integer("multi_tensor_adam", "step", step), fp32(lr), fp32(beta1),
                        fp32(beta2), fp32(epsilon), fp32(weight_decay), bool(bias_correction), mode == 1)
        copy_back(write_back)

    # ----- ZenFlow ----------------------------------------------------------------------------------------
    def zenflow_adam_create(self, optimizer_id: int, zf_affinity: Sequence[int]) -> int:
        """ZenFlow's optimizer object for Adam id ``optimizer_id``; see
        `anyaccel.integrations.deepspeed.abi.zenflow.create`."""
        return zenflow.create(self._module, optimizer_id, zf_affinity, REGISTRY)

    def zenflow_adam_register_group(self, handle: int, param: Any, grad0: Any, grad1: Any, exp_avg0: Any,
                                    exp_avg1: Any, exp_avg_sq0: Any, exp_avg_sq1: Any, stale: Any) -> None:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.register_group`."""
        zenflow.register_group(handle, param, grad0, grad1, exp_avg0, exp_avg1, exp_avg_sq0, exp_avg_sq1, stale)

    def zenflow_adam_destroy(self, handle: int) -> None:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.destroy`."""
        zenflow.destroy(handle)

    def zenflow_adam_ctrl_size(self) -> int:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.ctrl_size`."""
        return zenflow.ctrl_size()

    def zenflow_adam_ctrl_init(self, control_ptr: int, num_groups: int) -> None:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.ctrl_init`."""
        zenflow.ctrl_init(control_ptr, num_groups)

    def zenflow_adam_run_worker(self, handle: int, control_ptr: int) -> None:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.run_worker`."""
        zenflow.run_worker(handle, control_ptr)

    def zenflow_adam_submit(self, control_ptr: int, now_state: int, step: int, lr: Sequence[float],
                            beta1: Sequence[float], beta2: Sequence[float], eps: Sequence[float],
                            weight_decay: Sequence[float], bias_correction: Sequence[int]) -> None:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.submit`."""
        zenflow.submit(control_ptr, now_state, step, lr, beta1, beta2, eps, weight_decay, bias_correction)

    def zenflow_adam_wait(self, control_ptr: int, timeout_s: float) -> bool:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.wait`."""
        return zenflow.wait(control_ptr, timeout_s)

    def zenflow_adam_ctrl_exit(self, control_ptr: int) -> None:
        """See `anyaccel.integrations.deepspeed.abi.zenflow.ctrl_exit`."""
        zenflow.ctrl_exit(control_ptr)

    # ----- helpers ----------------------------------------------------------------------------------------
    @functools.cached_property
    def _adam_step(self) -> Any:
        """The module's ``adam_step`` op, looked up once (DeepSpeed calls ``adam_update`` per tensor)."""
        return overload(self._module.adam_step)

    @functools.cached_property
    def _adam_rollback_step(self) -> Any:
        """The module's ``adam_rollback_step`` op (host builds)."""
        return overload(self._module.adam_rollback_step)

    def _remember(self, oid: int, hyper: AdamHyperParameters, lr: float, beta1: float, beta2: float, eps: float,
                  weight_decay: float) -> AdamHyperParameters:
        """The id's hyper-parameters with this call's values (fp32-rounded), stored back (DeepSpeed keeps the
        latest ones in its optimizer object)."""
        values = (fp32(lr), fp32(beta1), fp32(beta2), fp32(eps), fp32(weight_decay))
        if values == (hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay):
            return hyper  # the usual case: no new object per call
        new = AdamHyperParameters(*values, adamw_mode=hyper.adamw_mode)
        REGISTRY.update(oid, new)
        return new

    def _isa(self) -> str:
        """The SIMD level of a host build (``OpModule.isa``); accelerator builds have none."""
        return str(getattr(self._module, "isa", None) or "device")

    def _name(self) -> str:
        return str(getattr(self._module, "op", type(self._module).__name__))


def adapter(module: Any, functions: Sequence[str]) -> AdamABI:
    """The factory `ABI` names: DeepSpeed's functions over
    ``module`` (called once per loaded module, on the first use of one of them)."""
    return AdamABI(module, functions)


#: The functions DeepSpeed's callers use on modules of the adam builds, per builder name.
ABI = DeepSpeedABI(
    family="adam",
    adapter="anyaccel.integrations.deepspeed.abi.adam:adapter",
    builders=(
        # deepspeed/ops/adam/cpu_adam.py (DeepSpeedCPUAdam), runtime/zenflow/zenflow_utils.py,
        # runtime/zenflow/zenflow_stage_1_and_2.py, runtime/zenflow/engine_stage3.py
        ("CPUAdamBuilder", ("create_adam", "adam_update", "adam_rollback", "destroy_adam",
                            "zenflow_adam_create", "zenflow_adam_register_group", "zenflow_adam_destroy",
                            "zenflow_adam_ctrl_size", "zenflow_adam_ctrl_init", "zenflow_adam_run_worker",
                            "zenflow_adam_submit", "zenflow_adam_wait", "zenflow_adam_ctrl_exit")),
        # deepspeed/ops/adam/fused_adam.py (FusedAdam)
        ("FusedAdamBuilder", ("multi_tensor_adam",)),
    ),
    # DeepSpeed defines the cross-process ZenFlow control on Linux only (cpu_adam.cpp, #if __linux__)
    platform_functions=tuple((fn, "linux") for fn in (
        "zenflow_adam_ctrl_size", "zenflow_adam_ctrl_init", "zenflow_adam_run_worker", "zenflow_adam_submit",
        "zenflow_adam_wait", "zenflow_adam_ctrl_exit")),
)
