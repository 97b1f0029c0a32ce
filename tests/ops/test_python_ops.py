"""Python-level implementations as torch ops with the spec's schema (anyaccel/ops/python_ops.py).

The Triton and NPU implementations register through :func:`python_ops.define_custom_ops`; on this CPU-only machine the
NPU implementations (torch ``_foreach_*`` ops, device-agnostic) are registered for the CPU instead, which
exercises the same path: the spec's schema and ``mutates_args``, the kernel for the named device types, the
validating fake bound to a device type, and ``torch.library.opcheck``.
"""

from __future__ import annotations

import pytest
import torch

from anyaccel.ops import python_ops
from anyaccel.ops.adam import npu as npu_adam
from anyaccel.ops.adam.spec import SPEC as ADAM
from anyaccel.ops.lion import npu as npu_lion
from anyaccel.ops.lion.spec import SPEC as LION
from anyaccel.spec import SpecError


@pytest.fixture(scope="module")
def cpu_python_ops():
    """The NPU implementations of both families, defined as torch ops for the CPU."""
    adam = python_ops.define_custom_ops(ADAM, "anyaccel_test_pyops_adam", {"adam_step": npu_adam.adam_step},
                                        ("cpu",), "cpu")
    lion = python_ops.define_custom_ops(LION, "anyaccel_test_pyops_lion", {"lion_step": npu_lion.lion_step},
                                        ("cpu",), "cpu")
    return adam, lion


def test_define_registers_the_specs_schema_once(cpu_python_ops) -> None:
    adam, lion = cpu_python_ops
    assert adam.namespace == "anyaccel_test_pyops_adam"
    assert adam.adam_step is torch.ops.anyaccel_test_pyops_adam.adam_step
    assert str(adam.adam_step.default._schema) == f"anyaccel_test_pyops_adam::{ADAM.function('adam_step').full_schema}"
    assert str(lion.lion_step.default._schema) == f"anyaccel_test_pyops_lion::{LION.function('lion_step').full_schema}"
    again = python_ops.define_custom_ops(LION, "anyaccel_test_pyops_lion", {"lion_step": npu_lion.lion_step},
                                         ("cpu",), "cpu")
    assert again is lion  # a namespace is defined once per process


def test_an_unknown_function_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"op 'lion' has no function 'adam_step'"):
        python_ops.define_custom_ops(LION, "anyaccel_test_pyops_bad", {"adam_step": npu_adam.adam_step},
                                     ("cpu",), "cpu")


@pytest.mark.parametrize("combo", LION.dtypes, ids=lambda c: "-".join(c.as_tuple()))
def test_opcheck_lion(cpu_python_ops, combo) -> None:
    from anyaccel.testing.op_samples import sample_args

    _, lion = cpu_python_ops
    torch.library.opcheck(lion.lion_step.default, tuple(sample_args(LION.function("lion_step"), combo, seed=3)))


@pytest.mark.parametrize("combo", ADAM.dtypes, ids=lambda c: "-".join(c.as_tuple()))
def test_opcheck_adam(cpu_python_ops, combo, monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.testing.op_samples import sample_args

    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    adam, _ = cpu_python_ops
    torch.library.opcheck(adam.adam_step.default, tuple(sample_args(ADAM.function("adam_step"), combo, seed=4)))


def test_the_op_validates_through_its_fake_and_its_kernel(cpu_python_ops) -> None:
    _, lion = cpu_python_ops
    p, g, m = [torch.randn(8)], [torch.randn(8)], [torch.randn(8)]
    with pytest.raises(RuntimeError, match=r"^lion_step: beta1=1\.5 is invalid; accepted: a finite 0 <= beta1 <= 1"):
        lion.lion_step(p, g, m, [], 1e-3, 1.5, 0.99, 0.0)
    meta = [torch.empty(8, device="meta")]
    with pytest.raises(RuntimeError, match=r"^lion_step: params\[0\] is on device meta; the CPU kernel takes CPU "):
        lion.lion_step(meta, meta, meta, [], 1e-3, 0.9, 0.99, 0.0)


def test_torch_compile_treats_the_op_as_one_call(cpu_python_ops) -> None:
    _, lion = cpu_python_ops
    gen = torch.Generator().manual_seed(5)
    args = ([torch.randn(33, generator=gen)], [torch.randn(33, generator=gen)], [torch.randn(33, generator=gen)])
    eager = tuple([t.clone() for t in lst] for lst in args)
    lion.lion_step(*eager, [], 1e-2, 0.9, 0.99, 0.1)

    def step(p, g, m):
        lion.lion_step(p, g, m, [], 1e-2, 0.9, 0.99, 0.1)

    torch._dynamo.reset()
    torch.compile(step, backend="aot_eager", fullgraph=True)(*args)
    for a, b in zip(args, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
