"""Broadcasting, output layout and dimension coalescing for element-wise kernels (no Triton import).

Shared by the pointwise code generator (`anyaccel.ops.triton.pointwise`) and by the element-wise
ops' fakes and portable implementations, so every implementation returns the same layout:

- the output shape is ``torch.broadcast_shapes`` of the tensor operands;
- the output takes the layout of the first tensor operand when every tensor operand already has the
  output's shape (``empty_like``: a transposed input gives a transposed output, as TensorIterator does in
  that case), else it is contiguous;
- before a launch, size-1 dimensions are dropped and adjacent dimensions that every operand walks
  contiguously are merged, so a contiguous call is one flat dimension of stride 1 and the kernel's index
  arithmetic is as short as the layout allows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def broadcast_shape(tensors: Sequence[torch.Tensor]) -> torch.Size:
    """The broadcast shape of ``tensors`` (``torch.Size([])`` for none).

    Raises:
        RuntimeError: the shapes do not broadcast (torch's message).
    """
    if not tensors:
        return torch.Size([])
    first = tensors[0].shape
    # equal concrete shapes (the common call) need no broadcasting, and torch.broadcast_shapes costs tens of
    # microseconds per call; symbolic shapes (tracing) go to torch, which compares them without guards
    if not any(isinstance(d, torch.SymInt) for d in first) and all(t.shape == first for t in tensors[1:]):
        return first
    return torch.broadcast_shapes(*(t.shape for t in tensors))


def empty_output(tensors: Sequence[torch.Tensor], shape: Sequence[int], dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """An uninitialised output of ``shape`` and ``dtype`` with the layout rule of the module docstring."""
    if tensors and all(tuple(t.shape) == tuple(shape) for t in tensors):
        return torch.empty_like(tensors[0], dtype=dtype, device=device)
    return torch.empty(tuple(shape), dtype=dtype, device=device)


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions and merge dimensions that every operand walks contiguously.

    Args:
        shape: the iteration shape.
        strides: per operand, its strides over ``shape`` (0 for broadcast dimensions).

    Returns:
        ``(sizes, strides)`` of the coalesced iteration space, outermost first; at least one dimension.
    """
    dims = [i for i, s in enumerate(shape) if s != 1]
    sizes = [int(shape[i]) for i in dims]
    st = [[int(s[i]) for i in dims] for s in strides]
    k = len(sizes) - 1
    while k > 0:
        if all(s[k - 1] == s[k] * sizes[k] for s in st):
            sizes[k - 1] *= sizes[k]
            for s in st:
                s[k - 1] = s[k]
            del sizes[k]
            for s in st:
                del s[k]
        k -= 1
    if not sizes:
        return [1], [[0] for _ in strides]
    return sizes, st
