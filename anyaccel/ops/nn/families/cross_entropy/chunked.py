"""The fused linear + cross-entropy, written once for both implementations.

Rows of ``hidden`` are processed in chunks; for each chunk the logits ``hidden_chunk @ weight.T (+ bias)``
are computed (in hidden's dtype, as ``nn.Linear`` does), the implementation's ``ce_chunk`` turns them in
place into ``dz * scale`` and returns the chunk's per-row losses, and the gradients are accumulated:
``grad_hidden[chunk] = dz @ weight``, ``grad_weight += dz.T @ hidden_chunk`` (in ``accum_dtype``),
``grad_bias += sum(dz)`` (fp32). Peak extra memory: one chunk of logits plus the weight-gradient
accumulator, instead of ``rows x V`` logits and their gradient (Liger-Kernel's scheme).

The weight gradient's accumulator: with ``accum_dtype=float32`` (the default) an fp32 ``V x H`` tensor, each
chunk's product added in fp32 and the sum rounded once to the weight's dtype at the end; for a 16-bit weight
that is twice the weight's memory, plus the weight-dtype copy returned. With ``accum_dtype`` equal to the
weight's dtype (Liger-Kernel's default, its ``accum_dtype=None``) the gradient tensor itself is the
accumulator: each chunk's product is computed in fp32 inside the matmul and added to it in the matmul's
epilogue, and the sum is rounded once per chunk, so the error grows with the number of chunks (at most
``chunks x`` the dtype's rounding of the absolute terms). A single chunk needs no accumulator in either case:
its product is written straight into the weight-dtype gradient, one rounding, as fp32 accumulation gives;
where all rows' logits take no more memory than the fp32 accumulator, they are one chunk (`chunk_rows`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from anyaccel.ops.nn.families.cross_entropy.fakes import check_fused
from anyaccel.ops.nn.families.cross_entropy.targets import check_target_values

#: ``ce_chunk(logits, target, ignore_index, label_smoothing, scale)``: per-row fp32 losses of a chunk; when
#: ``scale`` (a 0-dim fp32 tensor) is given, also overwrites ``logits`` with ``dz * scale`` (0 for ignored
#: rows).
ChunkLoss = Callable[[torch.Tensor, torch.Tensor, int, float, "torch.Tensor | None"], torch.Tensor]


#: Fewest rows per chunk (when there are that many). Each chunk adds its ``V x H`` weight gradient into the
#: fp32 accumulator, a read and a write of ``8 * V * H`` bytes (2 GiB at V=128256, H=4096): with Liger's
#: chunk size alone (256 rows there) those passes doubled the time of the whole fused op on an H200
#: (``benchmarks/nn_ops.py --sections flce``). 1024 rows of logits are 250 MiB at that vocabulary.
MIN_CHUNK_ROWS = 1024

#: Whether `chunk_rows` takes all rows in one chunk when their logits need no more memory than chunking would
#: (see there). Tests turn it off to exercise the chunked path on small problems.
ONE_CHUNK_WHEN_NO_LARGER = True


def chunk_rows(rows: int, hidden: int, vocab: int, *, fp32_accumulator: bool = False, itemsize: int = 2) -> int:
    """Rows per chunk.

    Chunked, the weight gradient of a 16-bit weight accumulates in an fp32 ``V x H`` buffer (``4 * V * H``
    bytes), which is converted to the weight's dtype at the end (``2 * V * H`` more while both exist): a peak
    of ``6 * V * H`` bytes besides the gradients of hidden. One chunk needs no accumulator: its logits
    (``rows * V * itemsize`` bytes) plus the weight-dtype gradient written directly (``2 * V * H``). So with
    ``fp32_accumulator`` and ``rows * itemsize <= 4 * H`` (a Llama 3.2 1B step at sequence 4096: 4096 rows,
    H = 2048), one chunk takes no more memory, and saves a matmul launch per product per chunk and the
    accumulator's read and write per chunk (measured in ``docs/nn_ops.md``). Otherwise a power of two near
    ``rows * hidden / vocab``, so a chunk's logits take about as much memory as ``hidden`` (Liger-Kernel's
    choice), but at least `MIN_CHUNK_ROWS`, and at most ``rows``.

    Args:
        rows: rows of hidden (tokens).
        hidden: H, the hidden size.
        vocab: V, the vocabulary size.
        fp32_accumulator: whether chunking would accumulate the weight gradient in a separate fp32 buffer
            (``accum_dtype=float32`` for a 16-bit weight).
        itemsize: bytes per logit (hidden's dtype).

    Returns:
        Rows per chunk, between 1 and ``max(rows, 1)``.
    """
    if ONE_CHUNK_WHEN_NO_LARGER and fp32_accumulator and rows * itemsize <= 4 * hidden:
        return max(1, rows)
    inc = max(1, -(-vocab // max(hidden, 1)))
    want = max(1, -(-rows // inc), MIN_CHUNK_ROWS)
    return max(1, min(rows, 1 << (want - 1).bit_length()))


#: torch's ``addmm(..., out_dtype=, out=)`` (``aten::addmm.dtype_out``): 16-bit products added into an fp32 tensor
#: in the matmul's epilogue, with no temporary.
_ADDMM_OUT_DTYPE = "dtype_out" in torch.ops.aten.addmm.overloads()


def _add_mm_fp32(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``acc += a @ b`` for an fp32 ``acc``, the product accumulated in fp32, in place (on CUDA without a
    temporary of ``acc``'s size)."""
    if a.dtype == torch.float32:
        acc.addmm_(a, b)
    elif a.device.type == "cuda" and _ADDMM_OUT_DTYPE:
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
    elif a.device.type == "cuda":
        acc += torch.mm(a, b, out_dtype=torch.float32)
    else:
        acc.addmm_(a.float(), b.float())


def fused_linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                               bias: torch.Tensor | None, ignore_index: int, label_smoothing: float, reduction: str,
                               compute_grad: bool, accum_dtype: torch.dtype, *, ce_chunk: ChunkLoss
                               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Loss of ``hidden @ weight.T + bias`` against ``target`` and, when ``compute_grad``, the gradients of
    ``hidden``, ``weight`` and ``bias`` (of the reduced loss), without the full logits.

    Args:
        hidden: ``[rows, H]``. weight: ``[V, H]``, hidden's dtype. target: ``[rows]`` int64/int32.
        bias: ``[V]`` or None. ignore_index: rows with this target add nothing. label_smoothing: in [0, 1].
        reduction: ``"mean"`` (over non-ignored rows; NaN when there are none, as torch) or ``"sum"``.
        compute_grad: also compute the gradients (else they are returned empty).
        accum_dtype: the weight gradient's accumulation dtype, ``torch.float32`` or the weight's dtype (see the
            module docstring).
        ce_chunk: the implementation's per-chunk loss (see `ChunkLoss`).

    Returns:
        ``(loss, grad_hidden, grad_weight, grad_bias)``: loss fp32 0-dim; gradients in their tensors' dtypes.

    Raises:
        OpInputError: see `check_fused`.
        TargetIndexError: a target outside ``[0, V)`` other than ``ignore_index`` (`check_target_values`).
    """
    check_fused(hidden, weight, target, bias, label_smoothing, reduction, accum_dtype)
    check_target_values("fused_linear_cross_entropy", target, weight.shape[0], ignore_index)
    rows, h = hidden.shape
    vocab = weight.shape[0]
    step = chunk_rows(rows, h, vocab, fp32_accumulator=compute_grad and accum_dtype != weight.dtype,
                      itemsize=hidden.element_size())
    # one chunk: its product is the whole gradient, written in the weight's dtype with no accumulator
    in_place = accum_dtype == weight.dtype or step >= rows
    n_valid = (target != ignore_index).sum().to(torch.float32)
    scale = 1.0 / n_valid if reduction == "mean" else torch.ones((), dtype=torch.float32, device=hidden.device)
    total = torch.zeros((), dtype=torch.float32, device=hidden.device)
    if compute_grad:
        gh = torch.empty_like(hidden, memory_format=torch.contiguous_format)
        # a single chunk's product overwrites the whole gradient: no zeroing (a weight-sized memset)
        alloc = torch.empty if step >= rows > 0 else torch.zeros
        gw = alloc((vocab, h), dtype=weight.dtype if in_place else torch.float32, device=hidden.device)
        gb = torch.zeros((vocab,), dtype=torch.float32, device=hidden.device) if bias is not None else None
    # one logits buffer for every chunk: a fresh tensor per chunk would hold two chunks at once (the next
    # allocated before the last is released)
    zbuf = z = torch.empty((min(step, rows), vocab), dtype=hidden.dtype, device=hidden.device)
    for start in range(0, rows, step):
        hc = hidden[start:start + step]
        z = zbuf[:hc.shape[0]]
        if bias is not None:
            torch.addmm(bias, hc, weight.t(), out=z)  # as nn.Linear: the bias added before the one rounding
        else:
            torch.mm(hc, weight.t(), out=z)
        losses = ce_chunk(z, target[start:start + step], ignore_index, label_smoothing,
                          scale if compute_grad else None)
        total = total + losses.sum()
        if compute_grad:
            torch.mm(z, weight, out=gh[start:start + step])
            if step >= rows:
                torch.mm(z.t(), hc, out=gw)
            elif in_place:
                gw.addmm_(z.t(), hc)
            else:
                _add_mm_fp32(gw, z.t(), hc)
            if gb is not None:
                gb += z.float().sum(0)
    del zbuf, z  # released before the fp32 accumulator's conversion below allocates
    loss = total * scale
    if not compute_grad:
        empty = hidden.new_empty((0,))
        return loss, empty, torch.empty_like(empty), torch.empty_like(empty)
    grad_bias = gb.to(bias.dtype) if gb is not None and bias is not None else hidden.new_empty((0,))
    return loss, gh, gw if in_place else gw.to(weight.dtype), grad_bias
