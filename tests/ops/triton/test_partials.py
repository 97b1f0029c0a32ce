"""The second stage of the norms' two-stage column reductions (:mod:`anyaccel.ops.triton.partials`): against a
float64 sum, on the Triton interpreter (CPU) or a GPU."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

# as the suite's other Triton modules do before Triton is imported (the interpreter is chosen at import)
if importlib.util.find_spec("triton") is not None and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

from anyaccel.ops.triton.partials import sum_partials  # noqa: E402
from anyaccel.testing.nn_impls import interpreter_reason  # noqa: E402

if interpreter_reason():  # an interpreter that cannot run the kernels with this NumPy (the reason names versions)
    pytest.skip(interpreter_reason(), allow_module_level=True)

_DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize(("k", "g", "n"), [(1, 1, 1), (2, 1, 5), (1, 3, 64), (2, 7, 65), (2, 65, 129), (1, 132, 37)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sums_match_float64_and_are_cast(k: int, g: int, n: int, dtype: torch.dtype) -> None:
    """Each slab's column sums over ``G`` (odd, prime and multiple-of-block sizes on both axes), in the
    requested dtype: within float32 summation error of a float64 sum before the cast, then exactly the cast."""
    parts = torch.randn(k, g, n, dtype=torch.float32, device=_DEVICE) * 3
    outs = sum_partials(parts, (dtype,) * k)
    assert len(outs) == k
    ref = parts.double().sum(1)
    for i, out in enumerate(outs):
        assert out.dtype == dtype and out.shape == (n,) and out.is_contiguous()
        if dtype == torch.float32:
            torch.testing.assert_close(out.double(), ref[i], rtol=1e-6, atol=1e-5 * g)
        else:  # the float32 sum, cast once: at most one rounding of the low-precision dtype off
            torch.testing.assert_close(out, ref[i].to(dtype), rtol=torch.finfo(dtype).eps, atol=1e-5 * g)


def test_two_outputs_share_no_memory_and_take_their_own_dtypes() -> None:
    """Two slabs give two separate tensors (a torch op's outputs must not alias), each in its own dtype."""
    parts = torch.ones(2, 4, 10, device=_DEVICE)
    parts[1] *= 2
    a, b = sum_partials(parts, (torch.bfloat16, torch.float32))
    assert a.dtype == torch.bfloat16 and b.dtype == torch.float32
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr()
    assert torch.equal(a.float(), torch.full((10,), 4.0, device=_DEVICE))
    assert torch.equal(b, torch.full((10,), 8.0, device=_DEVICE))


@pytest.mark.parametrize("bad", [
    torch.zeros(3, 2, 4),                                # three slabs
    torch.zeros(1, 0, 4),                                # no partial rows
    torch.zeros(2, 4),                                   # not 3-D
    torch.zeros(1, 2, 4, dtype=torch.float64),           # not float32
    torch.zeros(1, 4, 2).transpose(1, 2),                # not contiguous
])
def test_bad_partials_raise_value_error_naming_the_shape(bad: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"sum_partials: parts must be a contiguous float32 \(k, G, N\)"):
        sum_partials(bad, (torch.float32,) * (bad.shape[0] if bad.dim() == 3 else 1))


def test_one_dtype_per_slab_is_required() -> None:
    with pytest.raises(ValueError, match="one dtype per slab"):
        sum_partials(torch.zeros(2, 3, 4), (torch.float32,))
