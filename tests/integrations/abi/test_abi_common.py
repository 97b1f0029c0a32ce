"""What the DeepSpeed ABI adapters share (``anyaccel/integrations/deepspeed/abi/common.py``): the id registry,
DeepSpeed's argument conventions, flat views with write-back, and picklable typed errors."""

from __future__ import annotations

import pickle

import pytest
import torch

from anyaccel.integrations.deepspeed.abi.common import (
    InvalidArgumentError,
    OptimizerRegistry,
    TensorListsError,
    UnknownOptimizerIdError,
    check_tensor_lists,
    copy_back,
    flat_lists,
    fp32,
    integer,
    run_flat,
)


def test_registry_lifecycle():
    reg: OptimizerRegistry[str] = OptimizerRegistry("toy", "create_toy(id)")
    reg.create(3, "a")
    reg.create(3, "b")  # replaces, as DeepSpeed's map assignment does
    assert reg.get("toy_update", 3) == "b" and reg.ids() == [3]
    reg.update(3, "c")
    reg.update(4, "ignored")  # only existing ids are updated
    assert reg.get("toy_update", 3) == "c" and reg.ids() == [3]
    assert reg.destroy(3) is True and reg.destroy(3) is False
    with pytest.raises(UnknownOptimizerIdError, match=r"toy_update: optimizer id 3 .*\(ids created and not "
                                                      r"destroyed: none\); call create_toy\(id\) with id 3 first"):
        reg.get("toy_update", 3)


def test_scalars_are_rounded_as_c_floats_and_integers_refuse_floats():
    assert fp32(0.1) == float(torch.tensor(0.1, dtype=torch.float32)) != 0.1
    assert fp32(1) == 1.0 and fp32(True) == 1.0 and fp32(1e39) == float("inf")
    assert integer("f", "step", 3) == 3 and integer("f", "step", torch.tensor(2)) == 2
    with pytest.raises(TypeError, match="f: step must be an int, got float 1.0"):
        integer("f", "step", 1.0)


def test_run_flat_writes_back_only_what_the_kernel_writes():
    written = torch.arange(12.0).view(3, 4).t()  # non-contiguous
    read = torch.ones(4, 3).t()

    def kernel(a: list, b: list, extra: float) -> str:
        assert a[0].is_contiguous() and a[0].dim() == 1 and b[0].dim() == 1
        a[0].add_(extra)
        b[0].add_(100.0)  # a read-only argument's copy: not written back
        return "done"

    before = written.clone()
    assert run_flat(kernel, (written, read), (True, False), 1.0) == "done"
    assert torch.equal(written, before + 1.0) and torch.equal(read, torch.ones(4, 3).t())


def test_flat_lists_pass_contiguous_lists_as_they_are_and_flatten_a_strided_parameter_everywhere():
    a, b = torch.zeros(2, 3), torch.zeros(5)
    same, back = flat_lists(([a, b], [a.clone(), b.clone()]), (True, False))
    assert same[0][0] is a and same[0][1] is b and back == []
    strided = torch.zeros(2, 3).t()
    grad = torch.ones(3, 2)
    (params, grads), back = flat_lists(([strided, b], [grad, b]), (True, False))
    assert params[0].dim() == grads[0].dim() == 1 and params[1] is b and grads[0].data_ptr() == grad.data_ptr()
    params[0].fill_(7.0)
    copy_back(back)
    assert (strided == 7).all() and len(back) == 1


def test_tensor_lists_layout_and_errors_pickle():
    assert check_tensor_lists("f", ((1,), (2,)), 2, "x") == [[1], [2]]
    for bad in ([[1]], [[1], [2, 3]]):
        with pytest.raises(TensorListsError):
            check_tensor_lists("f", bad, 2, "2 lists")
    with pytest.raises(TensorListsError, match="tensor_lists is a int"):
        check_tensor_lists("f", 5, 2, "2 lists")
    for err in (UnknownOptimizerIdError("f", 1, [2], "create(id)"), TensorListsError("f", "x", "y"),
                InvalidArgumentError("f", "mode", 3, "0 or 1")):
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err)
