"""The host side of the Triton multi-tensor kernels (anyaccel/ops/triton/multi_tensor.py): the validation
and launch split (:func:`prepare`) and the work table (:func:`work_table`). Pure torch on the CPU: the
tables are built the same way for any device; the kernels themselves run in the GPU tests."""

from __future__ import annotations

import sys

import pytest
import torch

from anyaccel.ops.adam.spec import SPEC as ADAM
from anyaccel.ops.lion.spec import SPEC as LION
from anyaccel.ops.triton import multi_tensor as mt

ADAM_SCALARS = dict(step=1, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0)
LION_SCALARS = dict(lr=1e-3, beta1=0.9, beta2=0.99, weight_decay=0.0)


def _adam(params, grads, m, v, copies=()):
    return mt.prepare(ADAM.function("adam_step"), ADAM, ADAM_SCALARS, params, grads,
                      {"exp_avgs": m, "exp_avg_sqs": v}, list(copies))


def test_importing_it_imports_no_triton() -> None:
    import subprocess

    code = "import sys, anyaccel.ops.triton.multi_tensor; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_prepare_splits_one_launch_per_dtype_combination_and_drops_empty_tensors() -> None:
    f32 = [torch.randn(n) for n in (5, 0, 7)]
    bf = [torch.randn(n).to(torch.bfloat16) for n in (3, 9)]
    params = [f32[0], bf[0], f32[1], f32[2], bf[1]]
    grads = [p.clone() for p in params]
    m = [torch.zeros(p.shape) for p in params]
    v = [torch.zeros(p.shape) for p in params]
    launches = _adam(params, grads, m, v)
    assert len(launches) == 2
    first, second = launches
    assert [t.numel() for t in first[0]] == [5, 7] and first[0][0] is f32[0] and first[0][1] is f32[2]
    assert [t.dtype for t in second[0]] == [torch.bfloat16] * 2 and second[2][1] is m[4]
    assert all(len(lst) == 2 for launch in launches for lst in launch) and all(len(l_) == 4 for l_ in launches)


def test_prepare_appends_the_model_copies_when_the_call_has_them() -> None:
    params = [torch.randn(6), torch.randn(4)]
    grads = [torch.randn(6).to(torch.bfloat16), torch.randn(4)]
    copies = [torch.zeros(6, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.float16)]
    launches = _adam(params, grads, [torch.zeros(6), torch.zeros(4)], [torch.zeros(6), torch.zeros(4)], copies)
    assert len(launches) == 2 and all(len(launch) == 5 for launch in launches)
    assert launches[0][4][0] is copies[0] and launches[1][4][0] is copies[1]


@pytest.mark.parametrize("scalars,params,pattern", [
    ({**ADAM_SCALARS, "step": 0}, [torch.randn(3)], r"^adam_step: step=0 is invalid; accepted: a finite step >= 1$"),
    ({**ADAM_SCALARS, "lr": 1e39}, [torch.randn(3)], r"^adam_step: lr=1e\+39 is invalid"),
    (ADAM_SCALARS, [], r"^adam_step: params is empty; pass at least one tensor$"),
])
def test_prepare_validates_like_the_kernels(scalars, params, pattern) -> None:
    z = [torch.zeros_like(p) for p in params]
    with pytest.raises(RuntimeError, match=pattern):
        mt.prepare(ADAM.function("adam_step"), ADAM, scalars, params, z, {"exp_avgs": z, "exp_avg_sqs": z}, [])


def test_prepare_checks_the_lists_on_params_device_type() -> None:
    p = [torch.randn(4), torch.randn(4)]
    with pytest.raises(RuntimeError, match=r"^lion_step: grads\[1\] has shape \[5\] but params\[1\] has shape \[4\]"):
        mt.prepare(LION.function("lion_step"), LION, LION_SCALARS, p, [torch.randn(4), torch.randn(5)],
                   {"exp_avgs": [torch.zeros(4), torch.zeros(4)]}, [])
    with pytest.raises(RuntimeError, match=r"^lion_step: exp_avgs\[0\] is on device meta"):
        mt.prepare(LION.function("lion_step"), LION, LION_SCALARS, p, p, {"exp_avgs": [torch.zeros(4, device="meta"),
                                                                                        torch.zeros(4)]}, [])


def test_work_table_rows_chunks_and_alignment() -> None:
    flat = [torch.zeros(200) for _ in range(3)]
    offsets, sizes = (0, 16, 40), (10, 24, 1)
    lists = [[f[o:o + n] for o, n in zip(offsets, sizes, strict=True)] for f in flat]
    table = mt.work_table(lists, block=8)
    assert table.rows.dtype == torch.int64 and table.rows.tolist() == [[o, o, o, 0, 0, n]
                                                                         for o, n in zip(offsets, sizes, strict=True)]
    assert table.num_chunks == 2 + 3 + 1
    assert table.chunks.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [1, 2], [2, 0]]
    assert table.aligned  # every delta a multiple of ALIGN_ELEMENTS
    shifted = [[f[o + 1:o + 1 + n] for o, n in zip(offsets, sizes, strict=True)] for f in flat]
    assert mt.work_table(shifted, block=8).aligned  # deltas from the list's base: the base's own alignment is Triton's
    odd = [[f[o:o + n] for o, n in zip((0, 17, 41), sizes, strict=True)] for f in flat]
    assert not mt.work_table(odd, block=8).aligned


def test_work_table_deltas_are_in_elements_of_each_list() -> None:
    p = torch.zeros(64)
    c = torch.zeros(64, dtype=torch.bfloat16)
    lists = [[p[:8], p[32:40]], [p[:8], p[32:40]], [p[:8], p[32:40]], [p[:8], p[32:40]], [c[:8], c[16:24]]]
    table = mt.work_table(lists, block=4)
    assert table.rows.tolist() == [[0, 0, 0, 0, 0, 8], [32, 32, 32, 32, 16, 8]]


def test_work_table_is_cached_by_addresses_sizes_and_block() -> None:
    ts = [[torch.zeros(9), torch.zeros(17)] for _ in range(3)]
    first = mt.work_table(ts, block=8)
    assert mt.work_table(ts, block=8) is first
    assert mt.work_table(ts, block=16) is not first
    assert mt.work_table([lst[:1] for lst in ts], block=8) is not first
    for i in range(mt._CACHE_SIZE + 1):  # the cache is bounded (least recently used goes first)
        mt.work_table([[torch.zeros(i + 1)] for _ in range(3)], block=8)
    assert len(mt._cache) <= mt._CACHE_SIZE
