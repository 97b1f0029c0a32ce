"""ZenFlow's overlapped CPU Adam step (DeepSpeed's ``zenflow_adam_*`` functions), over anyaccel's ``adam_step``.

DeepSpeed's ZenFlow (``deepspeed/runtime/zenflow/zenflow_utils.py``) runs the optimizer in a dedicated process
pinned to its own cores while training continues: the training process shares each parameter group's
tensors (the flat fp32 partition, two gradient buffers, a "stale" copy the training side reads) and drives
the optimizer process through a control block in shared memory with two process-shared semaphores.
DeepSpeed 0.19.8 implements it in C++ in its ``cpu_adam`` extension (``csrc/adam/cpu_adam_impl.cpp``); the
functions and their protocol, as its callers use them:

- in the optimizer process: ``create_adam(id, ...)``, ``handle = zenflow_adam_create(id, affinity)``,
  ``zenflow_adam_register_group(handle, param, grad0, grad1, exp_avg0, exp_avg1, exp_avg_sq0, exp_avg_sq1,
  stale)`` per group, then ``zenflow_adam_run_worker(handle, ctrl_ptr)``, which loops until the exit
  command, then ``zenflow_adam_destroy(handle)``;
- in the training process: ``ctrl = torch.zeros(zenflow_adam_ctrl_size(), dtype=torch.uint8).share_memory_()``,
  ``zenflow_adam_ctrl_init(ctrl.data_ptr(), num_groups)`` before starting the optimizer process; per step
  ``zenflow_adam_submit(ctrl_ptr, now_state, step, lr[], beta1[], beta2[], eps[], weight_decay[],
  bias_correction[])`` (one entry per group; returns at once) and ``zenflow_adam_wait(ctrl_ptr, timeout_s)``
  (True when a step completed, False on timeout so the caller can check the process is alive); finally
  ``zenflow_adam_ctrl_exit(ctrl_ptr)``.

A step of the worker, per group ``g`` with state buffer ``s = now_state`` (0 or 1): ``adam_step`` of
``param`` with ``grad<s>``, ``exp_avg<s>``, ``exp_avg_sq<s>`` and the group's hyper-parameters, AdamW or not as
the optimizer id was created, then ``stale <- param``: bit for bit what ``adam_update`` computes for the
same tensor (the same kernel; its result does not depend on how the elements are split among threads).

Here the control block is this module's `_Control` (its size is what ``ctrl_size`` returns), the
semaphores are POSIX ``sem_t`` initialised process-shared through the C library (``ctypes``; blocking calls
release the GIL, as DeepSpeed's bindings do), and the worker's threads are torch's intra-op pool sized to the
affinity list (the process's affinity is DeepSpeed's to set; DeepSpeed instead pins one thread per core).
The cross-process control exists on Linux only, as in DeepSpeed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from anyaccel.integrations.deepspeed.abi.common import InvalidArgumentError, OptimizerRegistry, fp32, integer, overload

__all__ = ["MAX_GROUPS", "create", "register_group", "destroy", "ctrl_size", "ctrl_init", "run_worker", "submit",
           "wait", "ctrl_exit"]

#: The most parameter groups one control block carries (DeepSpeed's ZEN_MAX_GROUPS).
MAX_GROUPS = 1024
#: Hyper-parameters per group in the control block: lr, beta1, beta2, eps, weight_decay.
HP_PER_GROUP = 5
#: Bytes reserved per semaphore: at least ``sizeof(sem_t)`` (32 on 64-bit glibc and musl), 8-aligned.
SEM_BYTES = 64

_CMD_STEP = 0
_CMD_EXIT = 1


class _Control(ctypes.Structure):
    """The shared control block (lives in a shared uint8 tensor of ``ctypes.sizeof(_Control)`` bytes)."""

    _fields_ = [
        ("cmd_ready", ctypes.c_int64 * (SEM_BYTES // 8)),
        ("done", ctypes.c_int64 * (SEM_BYTES // 8)),
        ("cmd", ctypes.c_int32),
        ("now_state", ctypes.c_int32),
        ("step", ctypes.c_int64),
        ("num_groups", ctypes.c_int32),
        ("hp", ctypes.c_float * (MAX_GROUPS * HP_PER_GROUP)),
        ("bias_correction", ctypes.c_uint8 * MAX_GROUPS),
    ]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc: Any = None
_libc_lock = threading.Lock()


def _c() -> Any:
    """The C library with the semaphore functions typed (loaded once).

    Raises:
        OSError: not on Linux (DeepSpeed offers the cross-process control on Linux only).
    """
    global _libc
    if not sys.platform.startswith("linux"):
        raise OSError(f"ZenFlow's cross-process optimizer control needs Linux (process-shared POSIX semaphores); "
                      f"this is {sys.platform}")
    with _libc_lock:
        if _libc is None:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            for name, args in (("sem_init", (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint)),
                               ("sem_post", (ctypes.c_void_p,)), ("sem_wait", (ctypes.c_void_p,)),
                               ("sem_timedwait", (ctypes.c_void_p, ctypes.POINTER(_Timespec)))):
                fn = getattr(libc, name)
                fn.argtypes = args
                fn.restype = ctypes.c_int
            _libc = libc
    return _libc


def _control(control_ptr: int) -> _Control:
    ptr = integer("zenflow_adam", "control_ptr", control_ptr)
    if ptr == 0:
        raise InvalidArgumentError("zenflow_adam", "control_ptr", ptr, "the data_ptr() of a shared uint8 tensor of "
                                   "zenflow_adam_ctrl_size() bytes")
    return _Control.from_address(ptr)


def _sem(ctrl: _Control, name: str) -> int:
    return ctypes.addressof(ctrl) + getattr(_Control, name).offset


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ZenFlow control: {what} failed: {os.strerror(err)}")


@dataclass
class _Group:
    param: Any
    grads: tuple[Any, Any]
    exp_avgs: tuple[Any, Any]
    exp_avg_sqs: tuple[Any, Any]
    stale: Any


@dataclass
class _ZenFlowAdam:
    module: Any
    optimizer_id: int
    affinity: tuple[int, ...]
    ids: OptimizerRegistry[Any]
    groups: list[_Group] = field(default_factory=list)


_handles: dict[int, _ZenFlowAdam] = {}
_next_handle = 0
_handles_lock = threading.Lock()


def _get(function: str, handle: int) -> _ZenFlowAdam:
    with _handles_lock:
        found = _handles.get(integer(function, "handle", handle))
        known = sorted(_handles)
    if found is None:
        raise InvalidArgumentError(function, "handle", handle, f"a handle from zenflow_adam_create that was not "
                                   f"destroyed (existing: {known or 'none'})")
    return found


def create(module: Any, optimizer_id: int, zf_affinity: Sequence[int], ids: OptimizerRegistry[Any]) -> int:
    """``zenflow_adam_create``: a ZenFlow optimizer for Adam id ``optimizer_id`` (made by ``create_adam``).

    Args:
        module: the loaded Adam op module whose ``adam_step`` runs the steps.
        optimizer_id: the Adam id whose ``adamw_mode`` the steps use.
        zf_affinity: the cores of the optimizer process; the worker uses as many torch threads.
        ids: the Adam optimizer ids of this process (``create_adam``'s), read for the id's ``adamw_mode``.

    Returns:
        The handle (0, 1, ... per process, as DeepSpeed's).

    Raises:
        UnknownOptimizerIdError: ``optimizer_id`` was not created (DeepSpeed would crash at the first step).
    """
    global _next_handle
    oid = integer("zenflow_adam_create", "optimizer_id", optimizer_id)
    ids.get("zenflow_adam_create", oid)
    affinity = tuple(integer("zenflow_adam_create", "zf_affinity", c) for c in zf_affinity)
    with _handles_lock:
        handle = _next_handle
        _next_handle += 1
        _handles[handle] = _ZenFlowAdam(module, oid, affinity, ids)
    return handle


def register_group(handle: int, param: Any, grad0: Any, grad1: Any, exp_avg0: Any, exp_avg1: Any, exp_avg_sq0: Any,
                   exp_avg_sq1: Any, stale: Any) -> None:
    """``zenflow_adam_register_group``: add one parameter group (its tensors are kept, not copied).

    Args:
        handle: from `create`.
        param: the group's flat parameters (contiguous), updated in place by each step.
        grad0, grad1: the two gradient buffers (state buffer 0 and 1).
        exp_avg0, exp_avg1, exp_avg_sq0, exp_avg_sq1: the two moment buffers of each kind.
        stale: receives a copy of ``param`` after each step, or None.

    Raises:
        InvalidArgumentError: an unknown handle, or ``param`` is not contiguous (the step updates it in place).
    """
    zf = _get("zenflow_adam_register_group", handle)
    if not param.is_contiguous():
        raise InvalidArgumentError("zenflow_adam_register_group", "param", f"a non-contiguous tensor of shape "
                                   f"{tuple(param.shape)}", "a contiguous tensor (it is updated in place)")
    zf.groups.append(_Group(param, (grad0, grad1), (exp_avg0, exp_avg1), (exp_avg_sq0, exp_avg_sq1), stale))


def destroy(handle: int) -> None:
    """``zenflow_adam_destroy``: forget a handle (unknown: nothing happens)."""
    with _handles_lock:
        _handles.pop(integer("zenflow_adam_destroy", "handle", handle), None)


def ctrl_size() -> int:
    """``zenflow_adam_ctrl_size``: the bytes the shared control tensor must hold."""
    return ctypes.sizeof(_Control)


def ctrl_init(control_ptr: int, num_groups: int) -> None:
    """``zenflow_adam_ctrl_init``: set up the control block (once, in the training process, before the
    optimizer process starts).

    Raises:
        InvalidArgumentError: ``num_groups`` is not in ``[0, MAX_GROUPS]``.
        OSError: not Linux, or ``sem_init`` failed.
    """
    groups = integer("zenflow_adam_ctrl_init", "num_groups", num_groups)
    if not 0 <= groups <= MAX_GROUPS:
        raise InvalidArgumentError("zenflow_adam_ctrl_init", "num_groups", groups, f"0 <= num_groups <= {MAX_GROUPS}")
    libc = _c()
    ctrl = _control(control_ptr)
    ctrl.num_groups = groups
    ctrl.cmd = _CMD_STEP
    _check(libc.sem_init(_sem(ctrl, "cmd_ready"), 1, 0), "sem_init(cmd_ready)")
    _check(libc.sem_init(_sem(ctrl, "done"), 1, 0), "sem_init(done)")


def _sem_wait(libc: Any, address: int) -> None:
    while libc.sem_wait(address) != 0:
        if ctypes.get_errno() != errno.EINTR:
            _check(-1, "sem_wait")


def run_worker(handle: int, control_ptr: int) -> None:
    """``zenflow_adam_run_worker``: run submitted steps until the exit command (blocks; call it in the
    optimizer process).

    Raises:
        InvalidArgumentError: an unknown handle, or the control block names more groups than registered.
        The errors of ``adam_step`` (the submitting side then times out in `wait` and finds the
        process dead, as with DeepSpeed's).
    """
    import torch

    zf = _get("zenflow_adam_run_worker", handle)
    libc = _c()
    ctrl = _control(control_ptr)
    if zf.affinity:
        torch.set_num_threads(len(zf.affinity))
    adam_step = overload(zf.module.adam_step)
    while True:
        _sem_wait(libc, _sem(ctrl, "cmd_ready"))
        if ctrl.cmd == _CMD_EXIT:
            break
        groups = int(ctrl.num_groups)
        if groups > len(zf.groups):
            raise InvalidArgumentError("zenflow_adam_run_worker", "num_groups", groups,
                                       f"at most the {len(zf.groups)} groups registered")
        state = int(ctrl.now_state) & 1
        step = int(ctrl.step)
        adamw_mode = zf.ids.get("zenflow_adam_run_worker", zf.optimizer_id).adamw_mode
        with torch.no_grad():
            for g in range(groups):
                lr, beta1, beta2, eps, wd = (float(ctrl.hp[g * HP_PER_GROUP + k]) for k in range(HP_PER_GROUP))
                grp = zf.groups[g]
                adam_step([grp.param.view(-1)], [grp.grads[state].view(-1)], [grp.exp_avgs[state].view(-1)],
                          [grp.exp_avg_sqs[state].view(-1)], [], step, lr, beta1, beta2, eps, wd,
                          bool(ctrl.bias_correction[g]), adamw_mode)
                if grp.stale is not None:
                    grp.stale.copy_(grp.param)
        _check(libc.sem_post(_sem(ctrl, "done")), "sem_post(done)")


def submit(control_ptr: int, now_state: int, step: int, lr: Sequence[float], beta1: Sequence[float],
           beta2: Sequence[float], eps: Sequence[float], weight_decay: Sequence[float],
           bias_correction: Sequence[int]) -> None:
    """``zenflow_adam_submit``: ask the worker for one step of every group (returns at once).

    Args:
        control_ptr: the control tensor's ``data_ptr()`` in this process.
        now_state: which gradient and moment buffers (0 or 1) the step uses.
        step: the Adam step, >= 1.
        lr, beta1, beta2, eps, weight_decay, bias_correction: one entry per group (rounded to fp32, as
            DeepSpeed stores them).

    Raises:
        InvalidArgumentError: the per-group lists differ in length or exceed ``MAX_GROUPS``.
    """
    lists = (lr, beta1, beta2, eps, weight_decay, bias_correction)
    n = len(lr)
    if any(len(x) != n for x in lists) or n > MAX_GROUPS:
        raise InvalidArgumentError("zenflow_adam_submit", "hyper-parameter lists",
                                   [len(x) for x in lists], f"lists of one equal length <= {MAX_GROUPS}")
    libc = _c()
    ctrl = _control(control_ptr)
    for g in range(n):
        for k, values in enumerate(lists[:HP_PER_GROUP]):
            ctrl.hp[g * HP_PER_GROUP + k] = fp32(values[g])
        ctrl.bias_correction[g] = 1 if bias_correction[g] else 0
    ctrl.now_state = integer("zenflow_adam_submit", "now_state", now_state)
    ctrl.step = integer("zenflow_adam_submit", "step", step)
    ctrl.cmd = _CMD_STEP
    _check(libc.sem_post(_sem(ctrl, "cmd_ready")), "sem_post(cmd_ready)")


def wait(control_ptr: int, timeout_s: float) -> bool:
    """``zenflow_adam_wait``: wait up to ``timeout_s`` seconds for one submitted step to complete.

    Returns:
        True when a completion was consumed, False on timeout (the caller then checks that the optimizer
        process is alive, as DeepSpeed's engine does).
    """
    libc = _c()
    ctrl = _control(control_ptr)
    deadline = time.time() + max(0.0, float(timeout_s))
    frac, whole = math.modf(deadline)
    spec = _Timespec(int(whole), int(frac * 1e9))
    while libc.sem_timedwait(_sem(ctrl, "done"), ctypes.byref(spec)) != 0:
        err = ctypes.get_errno()
        if err == errno.EINTR:
            continue
        if err == errno.ETIMEDOUT:
            return False
        _check(-1, "sem_timedwait")
    return True


def ctrl_exit(control_ptr: int) -> None:
    """``zenflow_adam_ctrl_exit``: make the worker's `run_worker` return."""
    libc = _c()
    ctrl = _control(control_ptr)
    ctrl.cmd = _CMD_EXIT
    _check(libc.sem_post(_sem(ctrl, "cmd_ready")), "sem_post(cmd_ready)")
