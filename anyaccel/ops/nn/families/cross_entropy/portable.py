"""Portable torch implementation of the cross-entropy family (every device type); math in the spec.

Rows are processed in chunks of at most `CHUNK_ELEMENTS` logits so the fp32 temporaries stay
bounded for large vocabularies.
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn.families.cross_entropy import chunked, nll
from anyaccel.ops.nn.families.cross_entropy.fakes import check_backward, check_logits, check_nll
from anyaccel.ops.nn.families.cross_entropy.targets import check_target_values

#: Logits per fp32 temporary (16 Mi: 64 MiB).
CHUNK_ELEMENTS = 1 << 24


def _row_chunks(rows: int, vocab: int) -> int:
    return max(1, CHUNK_ELEMENTS // max(vocab, 1)) if rows else 1


def _loss_lse(z: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row loss, lse, validity mask and safe target of fp32 logits ``z``."""
    lse = torch.logsumexp(z, dim=-1)
    valid = target != ignore_index
    safe = torch.where(valid, target, torch.zeros_like(target)).long().clamp(0, z.shape[-1] - 1)
    loss = lse - z.gather(1, safe.unsqueeze(1)).squeeze(1)
    if label_smoothing > 0:
        loss = (1.0 - label_smoothing) * loss + label_smoothing * (lse - z.mean(-1))
    return torch.where(valid, loss, torch.zeros_like(loss)), lse, valid, safe


def _grad(z: torch.Tensor, lse: torch.Tensor, valid: torch.Tensor, safe: torch.Tensor, label_smoothing: float,
          row_scale: torch.Tensor) -> torch.Tensor:
    """``(softmax(z) - (1 - e) onehot - e / V) * row_scale`` (fp32), 0 on invalid rows."""
    p = torch.exp(z - lse.unsqueeze(1))
    if label_smoothing > 0:
        p = p - label_smoothing / z.shape[-1]
    p.scatter_add_(1, safe.unsqueeze(1), torch.full_like(lse, -(1.0 - label_smoothing)).unsqueeze(1))
    return p * torch.where(valid, row_scale, torch.zeros_like(row_scale)).unsqueeze(1)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row loss and lse (fp32) of ``logits [rows, V]``."""
    check_logits("cross_entropy", logits, target, label_smoothing)
    check_target_values("cross_entropy", target, logits.shape[1], ignore_index)
    losses, lses = [], []
    step = _row_chunks(logits.shape[0], logits.shape[1])
    for z, t in zip(logits.split(step), target.split(step), strict=True):
        loss, lse, _, _ = _loss_lse(z.float(), t, ignore_index, label_smoothing)
        losses.append(loss)
        lses.append(lse)
    if not losses:
        e = logits.new_empty((0,), dtype=torch.float32)
        return e, torch.empty_like(e)
    return torch.cat(losses), torch.cat(lses)


def cross_entropy_backward(grad_loss: torch.Tensor, logits: torch.Tensor, target: torch.Tensor,
                           lse: torch.Tensor, ignore_index: int, label_smoothing: float) -> torch.Tensor:
    """Gradient of the logits (logits' dtype, contiguous)."""
    check_backward(grad_loss, logits, target, lse, label_smoothing)
    out = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
    step = _row_chunks(logits.shape[0], logits.shape[1])
    for z, t, lse_c, g, o in zip(logits.split(step), target.split(step), lse.split(step), grad_loss.split(step),
                                 out.split(step), strict=True):
        valid = t != ignore_index
        safe = torch.where(valid, t, torch.zeros_like(t)).long().clamp(0, z.shape[-1] - 1)
        o.copy_(_grad(z.float(), lse_c.float(), valid, safe, label_smoothing, g.float()))
    return out


def _ce_chunk(z: torch.Tensor, target: torch.Tensor, ignore_index: int, label_smoothing: float,
              scale: torch.Tensor | None) -> torch.Tensor:
    zf = z.float()
    loss, lse, valid, safe = _loss_lse(zf, target, ignore_index, label_smoothing)
    if scale is not None:
        z.copy_(_grad(zf, lse, valid, safe, label_smoothing, scale.expand_as(lse)))
    return loss


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None, ignore_index: int, label_smoothing: float, reduction: str,
                               compute_grad: bool, accum_dtype: torch.dtype
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chunked linear + cross-entropy (`chunked.fused_linear_cross_entropy` with torch chunks)."""
    return chunked.fused_linear_cross_entropy(hidden, weight, target, bias, ignore_index, label_smoothing,
                                              reduction, compute_grad, accum_dtype, ce_chunk=_ce_chunk)


def _nll_rows(logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``logp`` as rows ``[N * S, C]`` (classes last: a copy for ``[N, C, d...]``), the safe target ``[N * S]``
    (ignored rows read class 0) and the fp32 weight of each row (0 where ignored)."""
    lp3, t = nll.as_3d(logp, target)
    lp = lp3.transpose(1, 2).reshape(-1, lp3.shape[1])
    valid = t != ignore_index
    safe = torch.where(valid, t, torch.zeros_like(t)).long()
    w = weight.float()[safe] if weight is not None else torch.ones(safe.shape, device=lp.device)
    return lp, safe, torch.where(valid, w, torch.zeros_like(w))


def nll_loss(logp: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, reduction: int,
             ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """aten's ``nll_loss_forward`` / ``nll_loss2d_forward`` with fp32 accumulation (a target outside
    ``[0, C)`` other than ``ignore_index`` fails as in the Triton implementation: `check_target_values`)."""
    check_nll("nll_loss", logp, target, weight, reduction)
    check_target_values("nll_loss", target, nll.as_3d(logp, target)[0].shape[1], ignore_index)
    lp, safe, w = _nll_rows(logp, target, weight, ignore_index)
    loss = -w * lp.gather(1, safe.unsqueeze(1)).squeeze(1).float()
    return nll.finish(loss, w, reduction, logp.dtype, target.shape)


def nll_loss_backward(grad_output: torch.Tensor, logp: torch.Tensor, target: torch.Tensor,
                      weight: torch.Tensor | None, reduction: int, ignore_index: int,
                      total_weight: torch.Tensor) -> torch.Tensor:
    """aten's ``nll_loss_backward``: ``-w[t] * g`` at each row's target (computed in fp32, rounded once), 0
    elsewhere; contiguous, logp's dtype."""
    check_nll("nll_loss_backward", logp, target, weight, reduction)
    lp, safe, w = _nll_rows(logp, target, weight, ignore_index)
    vals = -w * nll.row_grad(grad_output, reduction, total_weight, lp.shape[0])
    rows = torch.zeros(lp.shape, dtype=logp.dtype, device=logp.device)
    rows.scatter_(1, safe.unsqueeze(1), vals.to(logp.dtype).unsqueeze(1))
    lp3, _ = nll.as_3d(logp, target)
    n, c, spatial = lp3.shape
    return rows.reshape(n, spatial, c).transpose(1, 2).contiguous().reshape(logp.shape)


def load() -> Any:
    """The portable implementation as ``anyaccel_torch_cross_entropy::*`` torch ops with autograd."""
    from anyaccel.ops.nn.define import define
    from anyaccel.ops.nn.families.cross_entropy import autograd
    from anyaccel.ops.nn.families.cross_entropy.spec import SPEC

    return define(SPEC, "anyaccel_torch_cross_entropy",
                  {"cross_entropy": cross_entropy, "cross_entropy_backward": cross_entropy_backward,
                   "fused_linear_cross_entropy": fused_linear_cross_entropy, "nll_loss": nll_loss,
                   "nll_loss_backward": nll_loss_backward}, triton=False,
                  autograd=autograd.formulas)
