"""Reading the device arguments that ``device_name()`` and ``on_accelerator()`` accept.

DeepSpeed's ``device_name(device_index)`` formats whatever it is given into ``"<type>:<index>"``, so code
that passes a ``torch.device`` or a device string (``model.cuda(device)`` ported to
``.to(get_accelerator().device_name(device))``) gets ``"cuda:cuda"``, which no torch call accepts. These
helpers read every argument kind into an index (or no index) first, so a name built from the result is
always a valid device string, and reject what names no device with an error that says what is accepted.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["device_index_of", "device_type_of"]

#: The device type that CUDA code names, accepted as "this accelerator" by ``device_name``: code ported from
#: CUDA passes ``torch.device("cuda", i)`` or ``"cuda:1"`` where it means the accelerator's device ``i``.
CUDA_TYPE = "cuda"


def device_index_of(value: Any, device_type: str) -> int | None:
    """The device index that ``value`` names on an accelerator of ``device_type``; None for "no index".

    Args:
        value: None; a non-negative int (``1``); a string of digits (``"1"``); a device string or
            ``torch.device`` of ``device_type`` or of ``"cuda"`` (``"cuda"``, ``"cuda:1"``,
            ``torch.device("xpu", 0)``). A device without an index gives None.
        device_type: the accelerator's torch device type (``"cuda"``, ``"xpu"``, ``"cpu"``...).

    Returns:
        The index (int >= 0), or None when ``value`` names no particular device.

    Raises:
        TypeError: ``value`` is of another type (a bool, a float, a tensor...); the message names it and the
            accepted kinds.
        ValueError: ``value`` is a negative index, a string that is not a device, or a device of another type
            (``"mps:0"`` for a CUDA accelerator); the message names it and what to pass instead.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str, torch.device)):
        raise TypeError(
            f"device_name() got {value!r} ({type(value).__name__}); it accepts None, a device index (int), "
            f"a device string ('{device_type}', '{device_type}:0') or a torch.device"
        )
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"device_name() got the negative device index {value}; pass an index >= 0 or None")
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    try:
        device = value if isinstance(value, torch.device) else torch.device(value)
    except RuntimeError as exc:
        raise ValueError(
            f"device_name() got {value!r}, which is not a device string; pass an index (int), "
            f"'{device_type}' or '{device_type}:<index>'"
        ) from exc
    if device.type not in (device_type, CUDA_TYPE):
        raise ValueError(
            f"device_name() got a {device.type!r} device ({value!r}) but this accelerator's devices are "
            f"{device_type!r}; pass its index (int) or a '{device_type}' device"
        )
    return device.index


def device_type_of(where: Any) -> str:
    """The torch device type of a tensor (or anything with a ``.device``), a ``torch.device`` or a device string.

    Args:
        where: a ``torch.Tensor``/``nn.Parameter`` (any object with a ``device`` attribute holding a
            ``torch.device``), a ``torch.device``, or a device string or type (``"cuda:0"``, ``"xpu"``).

    Returns:
        The device type string (``"cuda"``, ``"cpu"``...).

    Raises:
        TypeError: ``where`` is none of these; the message names its type and the accepted kinds.
        ValueError: ``where`` is a string that torch does not read as a device; the message names it.
    """
    if isinstance(where, torch.device):
        return where.type
    if isinstance(where, str):
        try:
            return torch.device(where).type
        except RuntimeError as exc:
            raise ValueError(
                f"on_accelerator() got {where!r}, which is not a device string ('cuda', 'cuda:0', 'cpu'...)"
            ) from exc
    device = getattr(where, "device", None)
    if isinstance(device, torch.device):
        return device.type
    raise TypeError(
        f"on_accelerator() got {type(where).__name__}; it accepts a tensor, a torch.device or a device string"
    )
