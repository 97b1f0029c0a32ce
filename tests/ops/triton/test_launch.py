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
