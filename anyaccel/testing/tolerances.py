"""FlagGems's accuracy tolerances, for comparing an op's result with a float64 reference.

FlagGems (``src/flag_gems/testing/__init__.py``, ``assert_close``; ``tests/accuracy_utils.py``,
``gems_assert_close``) casts the float64 reference to the result's dtype and calls
``torch.testing.assert_close(res, ref, rtol=RESOLUTION[dtype], atol=1e-4 * reduce_dim)``, where
``reduce_dim`` is the number of terms a result element sums (1 for element-wise results and normalised
outputs, the row length for an input gradient of a norm, the number of rows for a weight gradient):

=========  ==========  ======================
dtype      rtol        atol
=========  ==========  ======================
float32    1.3e-6      1e-4 * reduce_dim
float16    1e-3        1e-4 * reduce_dim
bfloat16   0.016       1e-4 * reduce_dim
=========  ==========  ======================

(``1.3e-6`` is torch's own default for float32; ``0.016`` is two bfloat16 ulps at 1.)
"""

from __future__ import annotations

import torch

#: FlagGems's RESOLUTION table: the relative tolerance per result dtype.
RTOL: dict[torch.dtype, float] = {torch.float32: 1.3e-6, torch.float16: 1e-3, torch.bfloat16: 0.016,
                                  torch.float64: 1e-7}
#: FlagGems's absolute tolerance per summed term.
ATOL = 1e-4


def assert_close(result: torch.Tensor, reference: torch.Tensor, reduce_dim: int = 1, *,
                 dtype: torch.dtype | None = None, msg: str = "") -> None:
    """Assert ``result`` matches a (float64) ``reference`` within FlagGems's tolerance for its dtype.

    Args:
        result: the op's result (any device; compared on the CPU).
        reference: the float64 reference, same shape.
        reduce_dim: the number of terms each element sums (scales ``atol``).
        dtype: the dtype whose tolerance applies (default: ``result.dtype``).
        msg: prefixed to the failure message.

    Raises:
        AssertionError: with torch's mismatch report.
    """
    dt = dtype or result.dtype
    ref = reference.detach().to("cpu", dt)
    res = result.detach().to("cpu")
    if res.dtype != dt:
        res = res.to(dt)
    try:
        torch.testing.assert_close(res, ref, rtol=RTOL[dt], atol=ATOL * reduce_dim, equal_nan=False)
    except AssertionError as exc:
        raise AssertionError(f"{msg}: {exc}" if msg else str(exc)) from None
