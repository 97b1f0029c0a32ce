"""``OpModule`` (anyaccel/op_builder/core/module.py): attribute access forwards to the build's torch ops."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from anyaccel.op_builder.core.module import OpModule


def test_attributes_forward_to_the_namespace_and_name_what_is_missing() -> None:
    m = OpModule("toy", "aten", Path("/x/op.so"), None, "k" * 64, "cache")
    assert m.add is torch.ops.aten.add  # any registered namespace works the same way
    with pytest.raises(AttributeError, match=r"op 'toy' \(namespace aten, /x/op\.so\) has no function 'no_such_op'"):
        m.no_such_op  # noqa: B018
    with pytest.raises(AttributeError):
        m._private  # noqa: B018
    assert repr(m) == "OpModule(op='toy', namespace='aten', isa=None, path='/x/op.so')"


def test_the_adapted_functions_answer_other_names_and_only_those_declared() -> None:
    extras = {"functions": ("anyaccel.integrations.deepspeed.abi.adam:adapter", ("create_adam", "destroy_adam"))}
    m = OpModule("cpu_adam", "aten", Path("/x/op.so"), "avx2", "k" * 64, "prebuilt", extras)
    assert m.adapted_functions == ("create_adam", "destroy_adam")
    assert m.create_adam(9001, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False) == 0 and m.destroy_adam(9001) == 0
    assert m.create_adam is m.create_adam  # found once, then kept on the module
    assert m.source == "prebuilt" and m.isa == "avx2"
    with pytest.raises(AttributeError, match="has no function 'adam_update'"):  # not declared for this build
        m.adam_update  # noqa: B018
    assert OpModule("toy", "aten", Path("/x/op.so"), None, "k" * 64, "cache").adapted_functions == ()


def test_integrations_are_asked_once_and_only_for_a_name_the_torch_ops_do_not_answer() -> None:
    calls: list[int] = []

    def offer() -> tuple[str, tuple[str, ...]]:
        calls.append(1)
        return ("anyaccel.integrations.deepspeed.abi.adam:adapter", ("create_adam",))

    m = OpModule("toy", "aten", Path("/x/op.so"), None, "k" * 64, "cache", {"functions": offer})
    assert callable(m.add) and calls == []  # a torch op: loading and calling ops ask no integration
    with pytest.raises(AttributeError, match="has no function 'no_such_function'"):
        m.no_such_function  # noqa: B018
    assert calls == [1] and m.adapted_functions == ("create_adam",) and calls == [1]
