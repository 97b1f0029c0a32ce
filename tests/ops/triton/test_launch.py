"""Launch helpers of the row-wise Triton kernels (no Triton needed)."""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops.triton.launch import row_blocks


def _symint(value: int, name: str) -> torch.SymInt:
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    return env.create_symintnode(env.create_symbol(value, source=ConstantSource(name)), hint=value)


@pytest.mark.parametrize(("m", "n"), [(1, 1), (37, 4099), (8192, 4096), (3, 16385), (0, 7)])
def test_row_blocks_of_symbolic_sizes_equal_those_of_concrete_ones(m: int, n: int) -> None:
    """Tracing with dynamic shapes passes SymInts, which the per-size cache cannot hash (an opcheck failure
    once): they are computed afresh, with the same tiling."""
    concrete = row_blocks(m, n)
    assert row_blocks(m, n) is concrete  # cached
    symbolic = row_blocks(_symint(m, "m"), _symint(n, "n"))
    assert (symbolic.block_m, symbolic.block_n, symbolic.one_tile, symbolic.num_warps, int(symbolic.grid)) == \
        (concrete.block_m, concrete.block_n, concrete.one_tile, concrete.num_warps, concrete.grid)


def test_row_blocks_rows_tile_and_warp_cap() -> None:
    """A kernel's own tiling (layer_norm's forward: 8192 elements, at most 8 warps) beside the default."""
    from anyaccel.ops.triton.launch import row_blocks

    assert (row_blocks(8192, 4096).block_m, row_blocks(8192, 4096).num_warps) == (1, 8)
    tuned = row_blocks(8192, 4096, rows_tile=8192, max_warps=8)
    assert (tuned.block_m, tuned.block_n, tuned.num_warps, tuned.grid) == (2, 4096, 8, 4096)
    assert row_blocks(8192, 8192).num_warps == 16
    assert row_blocks(8192, 8192, rows_tile=8192, max_warps=8).num_warps == 8
    assert row_blocks(3, 5000, rows_tile=8192, max_warps=8).block_m == 1  # one row past half the tile
