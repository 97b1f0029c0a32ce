"""Seeing a tensor as rows: ``[..., N]`` as ``[M, N]`` without a copy where torch can."""

from __future__ import annotations

import torch


def as_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """``t`` (shape ``[..., n]``) as a 2-D ``[M, n]`` tensor.

    A view (any row stride and element stride) when the leading dimensions collapse into one stride, as
    for contiguous tensors, row slices and transposes of the last two dimensions; otherwise a contiguous
    copy (``reshape``), e.g. for a permutation that interleaves the leading dimensions.
    """
    return t.reshape(-1, n)  # a view whenever one exists (never raises, also on fake tensors)
