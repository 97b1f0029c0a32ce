"""Tensor-type factories: what ``FloatTensor``, ``LongTensor``... return on an accelerator.

Real clients call these both with data (``FloatTensor([1.0, 2.0])``, DeepSpeed's current form, which is
``torch.tensor``) and in the legacy size form of ``torch.cuda.FloatTensor`` (``FloatTensor(3)``,
``LongTensor(2, 3)``, ``HalfTensor(0).dtype``, used by Megatron-DeepSpeed). One callable serves both:
integers are sizes, everything else is data (DeepSpeed's ``accelerator/abstract_accelerator.py`` and
``accelerator/cuda_accelerator.py`` for the current form).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["TensorFactory"]


def _is_size_argument(value: object) -> bool:
    """True for a Python or 0-d integer that the legacy constructors read as a dimension size."""
    return isinstance(value, int) and not isinstance(value, bool)


class TensorFactory:
    """A callable building tensors of one dtype on one device type.

    Args:
        dtype: the dtype of every tensor built, e.g. ``torch.float32``.
        device_type: a torch device type string (``"cuda"``, ``"cpu"``...); tensors go to that type's
            current device, as ``torch.cuda.FloatTensor`` did.

    Calling forms (``device=`` and other keyword arguments of ``torch.tensor``/``torch.empty`` pass through):
        * ``F()``: an empty 1-d tensor of 0 elements.
        * ``F(n)``, ``F(n, m, ...)``, ``F(torch.Size(...))``: an uninitialised tensor of that shape
          (legacy size form).
        * ``F(tensor)``: ``tensor`` converted to the dtype and device (a copy only when needed).
        * ``F(data)`` for a list, tuple, float, bool or array: ``torch.tensor(data)`` with the dtype/device.

    ``isinstance(t, F)`` is true when ``t`` is a tensor of this dtype on this device type, like the legacy
    tensor-type classes.

    Raises:
        TypeError: more than one positional argument where one is not an integer size.
    """

    def __init__(self, dtype: torch.dtype, device_type: str) -> None:
        self.dtype = dtype
        self.device_type = device_type

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        device = kwargs.pop("device", self.device_type)
        if not args:
            return torch.empty(0, dtype=self.dtype, device=device, **kwargs)
        if all(_is_size_argument(a) for a in args):
            return torch.empty(args, dtype=self.dtype, device=device, **kwargs)
        if len(args) != 1:
            raise TypeError(
                f"{self!r} got {len(args)} positional arguments {args!r}; pass integer sizes "
                f"(F(2, 3)) or a single data argument (F([1.0, 2.0]))"
            )
        (arg,) = args
        if isinstance(arg, torch.Size):
            return torch.empty(arg, dtype=self.dtype, device=device, **kwargs)
        if isinstance(arg, torch.Tensor):
            return arg.to(dtype=self.dtype, device=device)
        return torch.tensor(arg, dtype=self.dtype, device=device, **kwargs)

    def __instancecheck__(self, obj: object) -> bool:
        return isinstance(obj, torch.Tensor) and obj.dtype == self.dtype and obj.device.type == self.device_type

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TensorFactory)
            and other.dtype == self.dtype
            and other.device_type == self.device_type
        )

    def __hash__(self) -> int:
        return hash((self.dtype, self.device_type))

    def __repr__(self) -> str:
        return f"TensorFactory({self.dtype}, {self.device_type!r})"
