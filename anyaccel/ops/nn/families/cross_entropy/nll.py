"""The reductions of ``nll_loss`` shared by both implementations (math in
`anyaccel.ops.nn.families.cross_entropy.spec`): per-row fp32 losses and weights in, aten's outputs out."""

from __future__ import annotations

import torch


def classes(logp: torch.Tensor) -> int:
    """The class count of ``logp``: its dimension 1 (``[N, C, d...]``), or its length when 1-D."""
    return int(logp.shape[1] if logp.dim() >= 2 else logp.shape[0])


def as_3d(logp: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``logp`` as ``[N, C, S]`` (S: the product of the dimensions after the class one; 1 for ``[N, C]`` and
    ``[C]``) and ``target`` as ``[N * S]``, row ``n * S + s``; views where torch can."""
    if logp.dim() == 1:
        return logp.reshape(1, -1, 1), target.reshape(-1)
    spatial = 1
    for d in logp.shape[2:]:
        spatial *= int(d)
    return logp.reshape(int(logp.shape[0]), int(logp.shape[1]), spatial), target.reshape(-1)


def finish(loss: torch.Tensor, weight: torch.Tensor, reduction: int, dtype: torch.dtype,
           target_shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    """aten's ``(output, total_weight)`` from per-row fp32 ``loss`` and ``weight`` (0 on ignored rows): the sums
    in fp32, each rounded once to ``dtype``; for reduction 0 (none) the losses in ``target_shape`` and a total
    weight of 0, as aten returns."""
    if reduction == 0:
        return loss.to(dtype).reshape(target_shape), torch.zeros((), dtype=dtype, device=loss.device)
    total = weight.sum()
    out = loss.sum()
    if reduction == 1:
        out = out / total
    return out.to(dtype), total.to(dtype)


def row_grad(grad_output: torch.Tensor, reduction: int, total_weight: torch.Tensor, rows: int) -> torch.Tensor:
    """The fp32 gradient reaching each row's loss: ``g_i`` (none), ``g`` (sum) or ``g / total_weight`` (mean),
    as a ``[rows]`` tensor (an expanded view for sum and mean)."""
    g = grad_output.float()
    if reduction == 0:
        return g.reshape(rows)
    if reduction == 1:
        g = g / total_weight.float()
    return g.reshape(()).expand(rows)
