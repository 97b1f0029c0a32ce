"""The DeepSpeed integration's ABI declarations (anyaccel/integrations/deepspeed/abi/__init__.py,
declaration.py): functions per builder name and platform, validated against the family's spec, and offered on
loaded modules through the ``anyaccel.module_functions`` entry point, so the op core never imports them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from anyaccel.integrations.deepspeed.abi import DeepSpeedABI, abi_of, all_abis, module_functions
from anyaccel.op_builder import classes
from anyaccel.spec import Function, NativeBuild, OpSpec, SpecError, all_op_specs, resolve

TOY = OpSpec(
    family="toy",
    summary="toy",
    functions=(Function("toy_step", "(Tensor(a!)[] params, float lr) -> ()"),),
    builds=(NativeBuild("CPUToyBuilder", "cpu_toy", "cpu", sources=("x.cpp",), functions=("toy_step",),
                        accelerators=("*",)),
            NativeBuild("FusedToyBuilder", "fused_toy", "cuda", sources=("x.cu",), functions=("toy_step",),
                        accelerators=("cuda",))),
)
TOY_ABI = DeepSpeedABI("toy", "toy.module:adapter", (("CPUToyBuilder", ("create_toy", "toy_update")),
                                                     ("FusedToyBuilder", ("multi_tensor_toy",))),
                       platform_functions=(("toy_update", "linux"),))


def test_abi_functions_follow_the_builder_names_and_the_platform() -> None:
    TOY_ABI.validate(TOY)
    assert TOY_ABI.functions_for(("CPUToyBuilder", "FusedToyBuilder"), "linux") == ("create_toy", "toy_update",
                                                                                   "multi_tensor_toy")
    assert TOY_ABI.functions_for(("CPUToyBuilder",), "darwin") == ("create_toy",)
    assert TOY_ABI.functions_for(("FusedToyBuilder",), "linux") == ("multi_tensor_toy",)
    assert TOY_ABI.functions_for(("OtherBuilder",)) == ()


def test_abi_must_name_served_builders_and_not_hide_torch_ops() -> None:
    with pytest.raises(SpecError, match="no build answers to"):
        DeepSpeedABI("toy", "toy.module:adapter", (("CPUAdamBuilder", ("create_adam",)),)).validate(TOY)
    with pytest.raises(SpecError, match="hide them"):
        DeepSpeedABI("toy", "toy.module:adapter", (("CPUToyBuilder", ("toy_step",)),)).validate(TOY)


def test_every_declaration_names_a_family_and_every_function_exists_on_its_adapter() -> None:
    families = {s.family for s in all_op_specs()}
    assert {abi.family for abi in all_abis()} == {"adam", "adagrad", "aio", "lamb", "lion", "pin_memory"} <= families
    for abi in all_abis():
        adapter = resolve(abi.adapter)(object(), ())
        for _, functions in abi.builders:
            for fn in functions:
                assert callable(getattr(adapter, fn)), f"{abi.family}: {fn}"
    assert abi_of("rms_norm") is None and module_functions("rms_norm", ("X",)) is None


def test_loaded_modules_offer_the_abi_functions_of_their_builder_names() -> None:
    cpu_adam = classes.builder_class("adam", "cpu_adam")()
    adapter, functions = cpu_adam._module_extras()["functions"]
    assert adapter == "anyaccel.integrations.deepspeed.abi.adam:adapter"
    assert functions[:4] == ("create_adam", "adam_update", "adam_rollback", "destroy_adam")
    assert "multi_tensor_adam" in functions  # the CPU build is FusedAdamBuilder on the cpu accelerator
    _, fused = classes.builder_class("adam", "fused_adam")()._module_extras()["functions"]
    assert fused == ("multi_tensor_adam",)  # no create_adam on the CUDA module
    _, lamb = classes.builder_class("lamb", "cpu_lamb")()._module_extras()["functions"]
    assert lamb == ("lamb",)


def test_anyaccels_own_accelerator_serves_the_abi_without_deepspeed() -> None:
    """``get_accelerator().create_op_builder("CPUAdamBuilder").load()`` offers DeepSpeed's functions with no
    DeepSpeed import and no integration installed; the adapter object is made on the first use."""
    code = ("import sys; from anyaccel import get_accelerator; "
            "m = get_accelerator().create_op_builder('CPUAdamBuilder').load(); "
            "made = m._abi._adapter is not None; m.create_adam(7, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, False); "
            "print(made, m._abi._adapter is not None, 'deepspeed' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "False"]
