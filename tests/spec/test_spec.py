"""The op specs (anyaccel/spec/, anyaccel/ops/<family>/spec.py): every spec is walked and checked
against what the rest of the package derives from it; malformed specs are refused with a SpecError that
names the field."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import subprocess
import sys

import pytest

import anyaccel.spec as spec_mod
from anyaccel.op_builder import classes
from anyaccel.op_builder.core.hooks import PACKAGE_DIR
from anyaccel.op_builder.toolchains.cpu_isa import ISA_LEVELS
from anyaccel.ops import registry
from anyaccel.spec import (
    BACKENDS,
    CXX_TYPES,
    SCALAR_TYPES,
    DtypeCombo,
    Function,
    Implementation,
    NativeBuild,
    OpSpec,
    SpecError,
    all_op_specs,
)

SPECS = all_op_specs()
FAMILIES = [s.family for s in SPECS]

#: The nine storage combinations of the element-wise optimizers: (param, grad, state, model copy).
OPTIMIZER_COMBOS = [
    ("float32", "float32", "float32", "none"),
    ("bfloat16", "bfloat16", "float32", "none"),
    ("float16", "float16", "float32", "none"),
    ("bfloat16", "bfloat16", "bfloat16", "none"),
    ("float16", "float16", "float16", "none"),
    ("float32", "float32", "float32", "bfloat16"),
    ("float32", "float32", "float32", "float16"),
    ("float32", "bfloat16", "float32", "bfloat16"),
    ("float32", "float16", "float32", "float16"),
]


def test_the_built_in_families_are_found_sorted_with_their_source() -> None:
    assert FAMILIES == sorted(FAMILIES) and {"adam", "lion"} <= set(FAMILIES)
    for s in SPECS:  # anyaccel/ops/<family>/spec.py, or deeper in a group (anyaccel/ops/nn/families/<family>)
        assert s.source.startswith("anyaccel.ops.") and s.source.endswith(f".{s.family}.spec")
        assert spec_mod.op_spec(s.family) is s
    assert all_op_specs() is SPECS  # cached


def test_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(SpecError, match=r"unknown op family 'nope'; known: \[.*'adam'.*'lion'.*\]"):
        spec_mod.op_spec("nope")


def test_reading_the_specs_imports_neither_torch_nor_a_builder() -> None:
    code = ("import sys, anyaccel.spec as s; s.all_op_specs(); "
            "print(sorted(m for m in ('torch', 'anyaccel.op_builder', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("family", FAMILIES)
def test_every_spec_validates_and_its_parts_resolve(family: str) -> None:
    s = spec_mod.op_spec(family)
    s.validate()
    assert s.summary and s.functions and s.implementations
    # families without native builds (the model ops) have Python-level implementations only
    assert s.builds or all(i.module for i in s.implementations)
    native = {name for b in s.builds if not b.module for name in b.functions}
    for fn in s.functions:
        if fn.name in native:
            fn.cxx_signature()  # every argument and return type of a compiled function maps to C++
        assert fn.full_schema == fn.name + fn.schema
        fake = fn.load_fake()
        if any(a.type.startswith("Tensor") for a in fn.arguments):
            assert fake is not None, f"{family}.{fn.name} takes tensors but has no validating fake"
        if fake is not None and s.builds:  # an optimizer fake takes the device type, then the arguments
            inspect.signature(fake).bind("cpu", *(None for _ in fn.arguments))
        elif fake is not None:  # a model-op fake is registered as is: the schema's arguments
            inspect.signature(fake).bind(*(None for _ in fn.arguments))
    for b in s.builds:
        assert b.backend in BACKENDS and b.build_var == f"ANYACCEL_BUILD_{b.name.upper()}"
        assert [f.name for f in s.functions_of(b)] == [f.name for f in s.functions if f.name in b.functions]
        for src in b.sources:
            assert (PACKAGE_DIR / src).is_file(), src
        assert set(b.isa_levels) <= set(ISA_LEVELS)
        if b.module is not None:
            assert not b.sources
            assert callable(spec_mod.resolve(b.module))
        else:
            assert b.sources, f"build {b.name} compiles nothing and names no module"
    for impl in s.implementations:
        if impl.module is not None:  # Python-level (Triton): the module exists; it is imported only on load
            assert importlib.util.find_spec(impl.module.partition(":")[0]) is not None
        else:
            assert s.build(impl.build).name == impl.build


@pytest.mark.parametrize("family", ["adam", "lion"])
def test_optimizer_families_share_the_storage_combinations(family: str) -> None:
    s = spec_mod.op_spec(family)
    assert [c.as_tuple() for c in s.dtypes] == OPTIMIZER_COMBOS
    assert s.accepted_dtypes_text() == ", ".join("(" + ", ".join(c) + ")" for c in OPTIMIZER_COMBOS)
    assert all(d in SCALAR_TYPES for c in s.dtypes for d in c.as_tuple())


@pytest.mark.parametrize("family", ["adam", "lion"])
def test_implementations_and_builds_per_family(family: str) -> None:
    s = spec_mod.op_spec(family)
    impls = {i.name: (i.priority, i.device_types) for i in s.implementations}
    assert impls == {"cpu": (10, ("cpu",)), "cuda": (20, ("cuda",)), "sycl": (20, ("xpu",)),
                     "npu": (20, ("npu",)), "triton": (10, ("cuda", "xpu"))}
    upper = family.capitalize()
    builds = {(b.builder, b.name, b.backend, b.accelerators) for b in s.builds}
    assert builds == {(f"CPU{upper}Builder", f"cpu_{family}", "cpu", ("*",)),
                      (f"Fused{upper}Builder", f"fused_{family}", "cuda", ("cuda",)),
                      (f"Fused{upper}Builder", f"fused_{family}_sycl", "xpu", ("xpu",)),
                      (f"Fused{upper}Builder", f"fused_{family}_npu", "npu", ("npu",))}
    cpu = s.build(f"CPU{upper}Builder")  # by DeepSpeed's builder name: the first build of that name
    rollback = ["adam_rollback_step"] if family == "adam" else []  # DeepSpeed's adam_rollback (CPU only)
    assert cpu.name == f"cpu_{family}" and [f.name for f in s.functions_of(cpu)] == [f"{family}_step", *rollback,
                                                                                      "isa"]
    assert s.build(f"fused_{family}_sycl").backend == "xpu"
    assert cpu.isa_levels == ("avx512", "avx2", "sve", "neon", "portable")
    with pytest.raises(SpecError, match=rf"op '{family}' has no build 'nope'; it has \['cpu_{family}'"):
        s.build("nope")
    with pytest.raises(SpecError, match=rf"op '{family}' has no function 'nope'; it has \['{family}_step', "):
        s.function("nope")


def test_adam_step_schema_parses() -> None:
    fn = spec_mod.op_spec("adam").function("adam_step")
    args = [(a.name, a.type, a.mutable) for a in fn.arguments]
    assert args == [("params", "Tensor[]", True), ("grads", "Tensor[]", False), ("exp_avgs", "Tensor[]", True),
                    ("exp_avg_sqs", "Tensor[]", True), ("model_copies", "Tensor[]", True), ("step", "int", False),
                    ("lr", "float", False), ("beta1", "float", False), ("beta2", "float", False),
                    ("eps", "float", False), ("weight_decay", "float", False), ("bias_correction", "bool", False),
                    ("adamw_mode", "bool", False)]
    assert fn.returns == "()" and fn.mutated == ("params", "exp_avgs", "exp_avg_sqs", "model_copies")
    lst, f64 = CXX_TYPES["Tensor[]"], "double"
    assert fn.cxx_signature() == f"void({lst}, {lst}, {lst}, {lst}, {lst}, int64_t, {f64}, {f64}, {f64}, {f64}, " \
                                 f"{f64}, bool, bool)"
    assert dict(fn.ranges) == {"step": "[1, inf)", "lr": "[0, inf)", "beta1": "[0, 1)", "beta2": "[0, 1)",
                               "eps": "(0, inf)", "weight_decay": "[0, inf)"}


def test_lion_step_schema_parses() -> None:
    fn = spec_mod.op_spec("lion").function("lion_step")
    assert [a.name for a in fn.arguments] == ["params", "grads", "exp_avgs", "model_copies", "lr", "beta1", "beta2",
                                              "weight_decay"]
    assert fn.mutated == ("params", "exp_avgs", "model_copies")
    assert dict(fn.ranges) == {"lr": "[0, inf)", "beta1": "[0, 1]", "beta2": "[0, 1]", "weight_decay": "[0, inf)"}
    isa = spec_mod.op_spec("lion").function("isa")
    assert isa.arguments == () and isa.returns == "str" and isa.cxx_signature() == "std::string()"
    assert isa.load_fake() is None and isa.mutated == ()


# --------------------------------------------------------------------------------------------------------
# Malformed specs
# --------------------------------------------------------------------------------------------------------


def _toy(**changes) -> OpSpec:
    base = OpSpec(
        family="toy", summary="a toy",
        functions=(Function("toy_step", "(Tensor(a!)[] params, float lr) -> ()", ranges=(("lr", "[0, inf)"),)),),
        dtypes=(DtypeCombo("float32", "float32", "float32"),),
        builds=(NativeBuild("ToyBuilder", "toy", "cpu", sources=("csrc/toy.cpp",), functions=("toy_step",)),),
        implementations=(Implementation("cpu", 10, ("cpu",), build="toy"),),
    )
    return dataclasses.replace(base, **changes)


def test_a_well_formed_toy_spec_validates() -> None:
    _toy().validate()


def test_python_level_functions_may_take_optional_tensors_and_return_tuples() -> None:
    fn = Function("f", "(Tensor x, Tensor? w, str mode, ScalarType accum_dtype) -> (Tensor, Tensor)")
    _toy(functions=(fn,), builds=(), implementations=(Implementation("py", 1, ("*",), module="m:load"),)).validate()
    assert [a.type for a in fn.arguments] == ["Tensor", "Tensor?", "str", "ScalarType"]
    assert fn.return_types == ("Tensor", "Tensor")
    with pytest.raises(SpecError, match=r"Tensor\? w, ScalarType accum_dtype have no C\+\+ type"):
        Function("f", "(Tensor x, Tensor? w, ScalarType accum_dtype) -> ()").cxx_signature()


@pytest.mark.parametrize("changes,pattern", [
    ({"functions": (Function("f", "(Tensor x, float lr) -> ()"), Function("f", "() -> ()"))},
     r"function names repeat: \['f', 'f'\]"),
    ({"functions": (Function("f", "(Tensor x, double lr) -> ()"),)}, r"argument 'double lr' is not"),
    ({"functions": (Function("f", "(Tensor x) -> float"),),  # compiled functions need a C++ return type
      "builds": (NativeBuild("B", "toy", "cpu", sources=("csrc/toy.cpp",), functions=("f",)),)},
     r"return type 'float' is not one of"),
    ({"functions": (Function("f", "(Tensor x) -> (Tensor, double)"),), "builds": ()},
     r"return type 'double' is not one of"),
    ({"functions": (Function("f", "Tensor x -> ()"),)}, r"schema 'Tensor x -> \(\)' is not"),
    ({"functions": (Function("f", "(Tensor x, float lr) -> ()", ranges=(("x", "[0, 1)"),)),)},
     r"ranges 'x', which is not an int or float argument"),
    ({"dtypes": (DtypeCombo("float32", "float64", "float32"),)}, r"dtype 'float64' is not one of"),
    ({"builds": (NativeBuild("B", "toy", "tpu", functions=("toy_step",)),)}, r"build 'toy' has backend 'tpu'"),
    ({"builds": (NativeBuild("B", "toy", "cpu", functions=("nope",)),)}, r"registers unknown functions \['nope'\]"),
    ({"builds": (NativeBuild("B", "toy-op", "cpu", functions=("toy_step",)),)}, r"'toy-op' must be an identifier"),
    ({"builds": (NativeBuild("B", "toy", "cpu", sources=("csrc/toy.cpp",), functions=("toy_step",),
                             source_cxx_args=(("csrc/other.cpp", ("-O1",)),)),)},
     r"gives source_cxx_args for \['csrc/other.cpp'\], which are not among its .cpp sources"),
    ({"implementations": (Implementation("a", 1, ("cpu",), build="toy"),
                          Implementation("a", 2, ("cpu",), build="toy"))},
     r"implementation names repeat"),
    ({"implementations": (Implementation("a", 1, ("cpu",)),)}, r"needs exactly one of build= and module="),
    ({"implementations": (Implementation("a", 1, ("cpu",), build="toy", module="m:f"),)}, r"needs exactly one of"),
    ({"implementations": (Implementation("a", 1, ("cpu",), build="gone"),)}, r"names unknown build 'gone'"),
])
def test_malformed_specs_are_refused(changes: dict, pattern: str) -> None:
    with pytest.raises(SpecError, match=pattern):
        _toy(**changes).validate()


def test_a_malformed_range_is_a_spec_error_naming_the_function() -> None:
    bad = _toy(functions=(Function("f", "(Tensor x, float lr) -> ()", ranges=(("lr", "0..1"),)),))
    with pytest.raises(SpecError, match=r"op 'toy': function 'f' range of 'lr': '0\.\.1' is not an interval"):
        bad.validate()


def test_spec_error_is_a_value_error() -> None:
    assert issubclass(SpecError, ValueError)


# --------------------------------------------------------------------------------------------------------
# Builder aliases
# --------------------------------------------------------------------------------------------------------


def _toy(**changes: object) -> OpSpec:
    base = OpSpec(
        family="toy",
        summary="toy",
        functions=(Function("toy_step", "(Tensor(a!)[] params, float lr) -> ()"),),
        builds=(NativeBuild("CPUToyBuilder", "cpu_toy", "cpu", sources=("x.cpp",), functions=("toy_step",),
                            accelerators=("*",)),
                NativeBuild("FusedToyBuilder", "fused_toy", "cuda", sources=("x.cu",), functions=("toy_step",),
                            accelerators=("cuda",))),
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_build_rows_are_the_specs_own_builder_names():
    cpu, cuda = _toy().builds
    assert cpu.rows() == (("CPUToyBuilder", "*"),) and cpu.builder_names == ("CPUToyBuilder",)
    assert cuda.builder_names == ("FusedToyBuilder",)
    _toy().validate()


def test_a_row_served_twice_is_refused():
    cpu, cuda = _toy().builds
    clash = dataclasses.replace(cpu, name="cpu_toy2", accelerators=("*",))
    with pytest.raises(SpecError, match=r"\('CPUToyBuilder', '\*'\)"):
        _toy(builds=(cpu, clash, cuda)).validate()


def test_alias_builder_class_is_the_build_under_deepspeeds_name():
    primary = registry.get_builder_class("CPUAdamBuilder", "cpu")
    alias = registry.get_builder_class("FusedAdamBuilder", "cpu")
    assert alias is not None and primary is not None
    # DeepSpeed's name is its own checked-in class on the build's bases, not a subclass of the native class
    assert alias.__name__ == "FusedAdamBuilder" and alias.__bases__ == primary.__bases__
    assert alias.NAME == primary.NAME == "cpu_adam" and alias.BUILD is primary.BUILD
    assert registry.get_builder_class("FusedAdamBuilder", "cpu") is alias  # made once
    assert classes.builder_class("adam", "cpu_adam", "CPUAdamBuilder") is primary
    cuda = registry.get_builder_class("FusedAdamBuilder", "cuda")
    assert cuda is not None and cuda.NAME == "fused_adam"
    assert registry.get_builder_class("FusedLionBuilder", "cpu").NAME == "cpu_lion"  # type: ignore[union-attr]
    assert registry.get_builder_class("FusedLambBuilder", "cpu").NAME == "cpu_lamb"  # type: ignore[union-attr]
    assert registry.get_builder_class("FusedAdamBuilder", "mps") is None  # the alias names cpu only
    with pytest.raises(SpecError, match="answers to"):
        classes.builder_class("adam", "cpu_adam", "FusedLionBuilder")


def test_adagrad_spec_is_a_host_family_under_deepspeeds_builder_name():
    s = spec_mod.op_spec("adagrad")
    assert [b.builder for b in s.builds] == ["CPUAdagradBuilder"]
    assert registry.get_builder_class("CPUAdagradBuilder", "cuda").NAME == "cpu_adagrad"  # type: ignore[union-attr]
