"""DeepSpeed's op-module ABI over anyaccel's torch ops: what the family adapters share.

DeepSpeed's Python optimizers call functions on the module their builder's ``load()`` returns
(``deepspeed/ops/adam/cpu_adam.py``: ``create_adam(id, ...)``, ``adam_update(id, step, ..., params, grads,
exp_avg, exp_avg_sq)``, ``destroy_adam(id)``; ``ops/adam/fused_adam.py``: ``multi_tensor_adam(chunk_size,
noop_flag, [[g], [p], [m], [v]], ...)``; ...). Each family's module of this package declares which of those
functions the family's builds offer ([`DeepSpeedABI`][anyaccel.integrations.deepspeed.abi.declaration.DeepSpeedABI])
and implements them over the family's torch ops (``adam_step``...). This module holds what the adapters share:

- `OptimizerRegistry`: DeepSpeed's optimizer-id lifecycle. ``create_*(id, ...)`` stores the id's
  hyper-parameters (a second create of the same id replaces them, as DeepSpeed's map assignment does);
  ``*_update(id, ...)`` with an id that was never created, or was destroyed, raises
  `UnknownOptimizerIdError` (DeepSpeed dereferences a null pointer and the process dies);
  ``destroy_*(id)`` of an unknown id does nothing and returns 0, as DeepSpeed's ``map::erase`` does, which
  its callers rely on (``DeepSpeedCPUAdam.__del__`` destroys its id even when ``create_adam`` never ran).
- argument conventions: DeepSpeed's functions are C++ taking ``float`` scalars through pybind11, so a Python
  ``lr=1e-3`` reaches its kernel rounded to fp32; `fp32` rounds the same way, so both start from the
  same hyper-parameters. Ids and steps are integers (`integer`; a bool or float is a ``TypeError``, as
  pybind11 raises).
- tensors: DeepSpeed's kernels work on ``.contiguous()`` copies, so a non-contiguous tensor is silently not
  updated; `run_flat` computes on contiguous copies and writes them back, and flattens every tensor
  (DeepSpeed's kernels are element-count based: a gradient may be shaped differently from its parameter).

The adapters never import DeepSpeed: the ABI is plain functions over torch tensors.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import operator
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from anyaccel.accelerator.errors import ReconstructibleError

logger = logging.getLogger(__name__)

__all__ = [
    "DeepSpeedABIError",
    "UnknownOptimizerIdError",
    "TensorListsError",
    "InvalidArgumentError",
    "OptimizerRegistry",
    "fp32",
    "integer",
    "run_flat",
    "flat_lists",
    "copy_back",
    "check_tensor_lists",
    "overload",
]

H = TypeVar("H")


class DeepSpeedABIError(ReconstructibleError):
    """Base of the errors of DeepSpeed's module ABI on anyaccel's ops (picklable: DeepSpeed's tests run
    optimizers in worker processes and send exceptions back)."""


class UnknownOptimizerIdError(DeepSpeedABIError, LookupError):
    """A DeepSpeed optimizer id that was never created (or was destroyed) was used.

    DeepSpeed's own kernels look the id up in a map and use the result without checking, so the same call
    crashes the process there (a segmentation fault).

    Args:
        function: the function called (``"adam_update"``).
        optimizer_id: the id passed.
        known: the ids created and not destroyed in this process.
        create: the call that creates an id (``"create_adam(optimizer_id, lr, ...)"``).
    """

    def __init__(self, function: str, optimizer_id: int, known: Sequence[int], create: str) -> None:
        self.function = function
        self.optimizer_id = optimizer_id
        self.known = sorted(known)
        super().__init__(
            f"{function}: optimizer id {optimizer_id} does not exist in this process (ids created and not destroyed: "
            f"{self.known or 'none'}); call {create} with id {optimizer_id} first, once per optimizer, and "
            f"destroy it only when the optimizer is gone. (DeepSpeed's own kernel crashes the process here.)"
        )


class TensorListsError(DeepSpeedABIError, ValueError):
    """``tensor_lists`` of a ``multi_tensor_*`` call does not have DeepSpeed's layout.

    Args:
        function: the function called (``"multi_tensor_adam"``).
        got: what was passed, in words (list count and lengths).
        layout: the accepted layout in words (``"[grads, params, exp_avgs, exp_avg_sqs]"``).
    """

    def __init__(self, function: str, got: str, layout: str) -> None:
        self.function = function
        super().__init__(
            f"{function}: tensor_lists is {got}; accepted: {layout}, lists of equal length (one entry per "
            f"parameter), as DeepSpeed's optimizer builds them"
        )


class InvalidArgumentError(DeepSpeedABIError, ValueError):
    """A DeepSpeed ABI argument outside what the function accepts.

    Args:
        function: the function called.
        name: the argument's name.
        value: its value.
        accepted: the accepted values in words.
    """

    def __init__(self, function: str, name: str, value: Any, accepted: str) -> None:
        self.function = function
        self.name = name
        self.value = value
        super().__init__(f"{function}: {name}={value!r} is invalid; accepted: {accepted}")


def fp32(x: Any) -> float:
    """``x`` rounded to float32, as a Python float: what a C ``float`` parameter of a pybind11 function
    receives (DeepSpeed's ABI takes every real scalar as ``float``).

    Raises:
        TypeError: ``x`` is not a real number.
    """
    return _fp32(float(x))


@functools.lru_cache(maxsize=4096)
def _fp32(x: float) -> float:
    # cached: an optimizer passes the same few hyper-parameters on every call
    return float(ctypes.c_float(x).value)


def integer(function: str, name: str, x: Any) -> int:
    """``x`` as an int, refusing what pybind11 refuses for a C++ integer parameter.

    Raises:
        TypeError: ``x`` is a float or another non-integer (the message names the function and argument).
    """
    if type(x) is int:
        return x
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{function}: {name} must be an int, got {type(x).__name__} {x!r}") from None


class OptimizerRegistry(Generic[H]):
    """DeepSpeed's optimizer ids of one op family in this process: id -> the hyper-parameters it was created
    with (the lifecycle in the module doc). Thread-safe.

    Args:
        family: the op family (for messages).
        create: the creating call, for messages (``"create_adam(optimizer_id, lr, ...)"``).
    """

    def __init__(self, family: str, create: str) -> None:
        self.family = family
        self.create_call = create
        self._entries: dict[int, H] = {}
        self._lock = threading.Lock()

    def create(self, optimizer_id: int, hyper: H) -> None:
        """Store ``hyper`` under ``optimizer_id``, replacing what was there (DeepSpeed's behaviour)."""
        with self._lock:
            self._entries[optimizer_id] = hyper

    def get(self, function: str, optimizer_id: int) -> H:
        """The hyper-parameters of ``optimizer_id``.

        Raises:
            UnknownOptimizerIdError: the id was never created or was destroyed.
        """
        with self._lock:
            try:
                return self._entries[optimizer_id]
            except KeyError:
                known = list(self._entries)
        raise UnknownOptimizerIdError(function, optimizer_id, known, self.create_call)

    def update(self, optimizer_id: int, hyper: H) -> None:
        """Replace the stored hyper-parameters of an existing id (DeepSpeed's per-call ``update_state``)."""
        with self._lock:
            if optimizer_id in self._entries:
                self._entries[optimizer_id] = hyper

    def destroy(self, optimizer_id: int) -> bool:
        """Forget ``optimizer_id``; an unknown id is not an error (DeepSpeed's ``map::erase``).

        Returns:
            Whether the id existed.
        """
        with self._lock:
            return self._entries.pop(optimizer_id, None) is not None

    def ids(self) -> list[int]:
        """The ids created and not destroyed, sorted."""
        with self._lock:
            return sorted(self._entries)


def run_flat(kernel: Callable[..., Any], tensors: Sequence[Any], written: Sequence[bool], *args: Any) -> Any:
    """Call a per-tensor kernel through a list-taking torch op, on flat contiguous tensors.

    ``kernel`` receives each tensor of ``tensors`` as a one-element list of a flat tensor, in order, followed
    by ``args``. Contiguous tensors are passed as flat views (updated in place); a non-contiguous tensor
    marked in ``written`` is computed on a contiguous copy that is copied back afterwards (DeepSpeed's
    kernels leave such a tensor unchanged: they update a ``.contiguous()`` copy).

    Args:
        kernel: the torch op (``module.adam_step``), whose first arguments are the tensor lists.
        tensors: one tensor per leading list argument, in the op's order.
        written: per tensor, whether the op writes it.
        args: the remaining arguments (an empty ``model_copies`` list, scalars).

    Returns:
        What ``kernel`` returns.
    """
    shape = tensors[0].shape
    if all(t.is_contiguous() and t.shape == shape for t in tensors):  # DeepSpeed's usual call: no views needed
        return kernel(*([t] for t in tensors), *args)
    flats = [t.view(-1) if t.is_contiguous() else t.contiguous().view(-1) for t in tensors]
    result = kernel(*([f] for f in flats), *args)
    for original, flat, w in zip(tensors, flats, written, strict=True):
        if w and not original.is_contiguous():
            original.copy_(flat.view(original.shape))
    return result


def flat_lists(lists: Sequence[Sequence[Any]], written: Sequence[bool]
               ) -> tuple[list[list[Any]], list[tuple[Any, Any]]]:
    """Contiguous versions of ``lists`` (one entry per parameter each) for a multi-tensor kernel, and the
    copies to write back.

    When every tensor is contiguous the lists are passed as they are (a step over hundreds of tensors pays
    nothing here). For a parameter with a non-contiguous tensor in any list, that parameter's tensors in every
    list are flattened (views, or contiguous copies of the non-contiguous ones), so their shapes still match.

    Args:
        lists: the tensor lists, in the kernel's order, of equal length.
        written: per list, whether the kernel writes its tensors.

    Returns:
        ``(lists, write_back)``: ``write_back`` holds ``(original, flat copy)`` for every written tensor that
        was not contiguous: copy each back (`copy_back`) after the kernel ran.
    """
    strided = {i for lst in lists for i, t in enumerate(lst) if not t.is_contiguous()}
    if not strided:
        return [list(lst) for lst in lists], []
    out: list[list[Any]] = []
    write_back: list[tuple[Any, Any]] = []
    for lst, w in zip(lists, written, strict=True):
        flat = list(lst)
        for i in strided:
            t = lst[i]
            if t.is_contiguous():
                flat[i] = t.view(-1)
            else:
                flat[i] = t.contiguous().view(-1)
                if w:
                    write_back.append((t, flat[i]))
        out.append(flat)
    return out, write_back


def copy_back(write_back: Sequence[tuple[Any, Any]]) -> None:
    """Copy each flat result of `flat_lists` back into its non-contiguous original."""
    for original, copy in write_back:
        original.copy_(copy.view(original.shape))


def check_tensor_lists(function: str, tensor_lists: Any, count: int, layout: str) -> list[list[Any]]:
    """``tensor_lists`` as ``count`` lists of equal length (DeepSpeed's ``multi_tensor_*`` layout).

    Raises:
        TensorListsError: not a sequence of ``count`` sequences of equal length.
    """
    try:
        lists = [list(lst) for lst in tensor_lists]
    except TypeError:
        raise TensorListsError(function, f"a {type(tensor_lists).__name__}", layout) from None
    lengths = [len(lst) for lst in lists]
    if len(lists) != count or len(set(lengths)) > 1:
        raise TensorListsError(function, f"{len(lists)} lists of lengths {lengths}", layout)
    return lists


def overload(op: Any) -> Any:
    """The ``default`` overload of a torch op packet (``torch.ops.ns.adam_step.default``), else ``op`` itself.

    Calling the overload skips the packet's overload resolution: about half the cost of a small call, which
    matters for DeepSpeed's per-tensor ``adam_update`` calls.
    """
    return getattr(op, "default", op)
