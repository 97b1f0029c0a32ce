"""The second stage of a two-stage column reduction: sums of per-program partial rows, cast in the same pass.

The backwards of rms_norm and layer_norm reduce the weight (and bias) gradient in two stages (Liger-Kernel's
scheme): each of ``G`` programs accumulates its rows' contributions in fp32 and writes one partial row, then
the ``G x N`` partials are summed per column. Done with torch, that second stage is a ``sum`` and a cast per
output: two or three aten kernels after the main one. `sum_partials` does it in one Triton launch that
writes every output in its final dtype, which takes a little device time off every forward + backward of
rms_norm and layer_norm (``docs/nn_ops.md``, "Backward reductions").

Importing this module imports Triton; the model-op implementations import it only where Triton is installed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from anyaccel.ops.triton.launch import device_of, wrap

#: Columns per program; rows of partials summed per step. 64 x 64 fp32 is a 16 KiB tile on 4 warps; at
#: N = 8192 and two outputs that is 256 programs (about two per multiprocessor of a large GPU).
_BLOCK_N = 64
_BLOCK_G = 64


@triton.jit
def _sum_partials_kernel(P, OUT0, OUT1, G, N, TWO: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    slab = tl.program_id(1)
    cmask = cols < N
    base = P + slab.to(tl.int64) * G * N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows < G)[:, None] & cmask[None, :]
        acc += tl.sum(tl.load(base + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask, other=0.0), axis=0)
    if TWO:
        if slab == 0:
            tl.store(OUT0 + cols, acc.to(OUT0.dtype.element_ty), mask=cmask)
        else:
            tl.store(OUT1 + cols, acc.to(OUT1.dtype.element_ty), mask=cmask)
    else:  # OUT1 is a placeholder, never written (so a traced launch does not see it mutated)
        tl.store(OUT0 + cols, acc.to(OUT0.dtype.element_ty), mask=cmask)


def sum_partials(parts: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> tuple[torch.Tensor, ...]:
    """Column sums of stacked partial rows, one output per slab, each in its own dtype.

    Args:
        parts: ``(k, G, N)`` float32, contiguous, on a Triton device (or the CPU under the Triton interpreter);
            slab ``i`` holds ``G`` partial rows of output ``i``. ``k`` is 1 or 2, ``G >= 1``.
        dtypes: ``k`` output dtypes (float32, bfloat16 or float16).

    Returns:
        ``k`` new contiguous tensors of ``N`` elements on ``parts``' device: ``parts[i].sum(0)`` accumulated in
        float32 (in a fixed order, so the result is deterministic) and cast to ``dtypes[i]``. They share no
        memory, so they may be returned as distinct outputs of a torch op.

    Raises:
        ValueError: ``parts`` is not a contiguous float32 ``(k, G, N)`` tensor with ``k`` in {1, 2} and ``G >= 1``,
            or ``len(dtypes) != k``.

    Side effects: one kernel launch (compiled on first use per specialization).
    """
    if parts.dim() != 3 or parts.dtype != torch.float32 or not parts.is_contiguous() or \
            parts.shape[0] not in (1, 2) or parts.shape[1] < 1 or len(dtypes) != parts.shape[0]:
        raise ValueError(f"sum_partials: parts must be a contiguous float32 (k, G, N) tensor with k in (1, 2), G >= 1 "
                         f"and one dtype per slab; got {parts.dtype} {tuple(parts.shape)} "
                         f"(contiguous={parts.is_contiguous()}) with {len(dtypes)} dtypes")
    k, g, n = parts.shape
    outs = tuple(torch.empty(n, dtype=dtype, device=parts.device) for dtype in dtypes)
    if n > 0:
        # one output: ``parts`` stands in for the second, unwritten pointer. Passing outs[0] twice (two aliased
        # arguments the kernel may write) made the norms' torch.compile (inductor) test fail.
        with device_of(parts):
            wrap(_sum_partials_kernel)[(triton.cdiv(n, _BLOCK_N), k)](
                parts, outs[0], outs[1] if k == 2 else parts, g, n, TWO=k == 2, BLOCK_G=_BLOCK_G, BLOCK_N=_BLOCK_N,
                num_warps=4)
    return outs
