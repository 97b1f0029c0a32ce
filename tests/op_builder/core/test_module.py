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


def test_the_specs_deepspeed_adapter_answers_other_names() -> None:
    class Adapter:
        def __init__(self, module: OpModule) -> None:
            self.module = module

        def create_adam(self) -> str:
            return f"adam of {self.module.op}"

    m = OpModule("cpu_adam", "aten", Path("/x/op.so"), "avx2", "k" * 64, "prebuilt", {"_abi_factory": Adapter})
    assert m.create_adam() == "adam of cpu_adam" and m.source == "prebuilt" and m.isa == "avx2"
