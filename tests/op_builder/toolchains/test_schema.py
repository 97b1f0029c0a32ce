"""The schema headers generated from the op specs (anyaccel/op_builder/toolchains/schema.py): each function's
schema string, C++ signature and range checks, the dtype table, and the static_assert that keeps a kernel's
signature equal to its schema (checked by compiling against torch's stable headers)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from opb_helpers import REAL_CXX

from anyaccel.op_builder.core.hooks import PACKAGE_DIR
from anyaccel.op_builder.toolchains import schema, torch_abi
from anyaccel.spec import SCALAR_TYPES, DtypeCombo, Function, NativeBuild, OpSpec, all_op_specs

NATIVE = [(s, b) for s in all_op_specs() for b in s.builds if b.module is None]


@pytest.mark.parametrize(("s", "b"), NATIVE, ids=[f"{s.family}-{b.name}" for s, b in NATIVE])
def test_every_native_build_gets_its_functions_ranges_and_dtypes(s: OpSpec, b: NativeBuild) -> None:
    text = schema.generate(s, b)
    assert text == schema.generate(s, b), "deterministic: the header is hashed into the cache key"
    assert f'#define ANYACCEL_OP_FAMILY "{s.family}"' in text and f'#define ANYACCEL_BUILD_NAME "{b.name}"' in text
    assert f'#include "{schema.DTYPES_HEADER_NAME}"' in text and '#include "stable/checks.h"' in text
    assert "#error" in text and "ANYACCEL_OP_NAMESPACE" in text
    defs = next(line for line in text.splitlines() if line.startswith("#define ANYACCEL_DEFINE_OPS(m)"))
    for fn in s.functions_of(b):
        assert f'kSchema_{fn.name}[] = "{fn.full_schema}";' in text
        assert f"using {fn.name}_fn = {fn.cxx_signature()};" in text
        assert f"m.def(::anyaccel::op::kSchema_{fn.name});" in defs
        checked = text[text.index(f"{fn.name}_checked("):]
        checked = checked[:checked.index("\n}\n")]
        calls = [line for line in checked.splitlines() if "::anyaccel::checks::scalar(" in line]
        assert [c.split('", "')[1].split('"')[0] for c in calls] == [name for name, _ in fn.ranges]
    for fn in (f for f in s.functions if f not in s.functions_of(b)):
        assert f"kSchema_{fn.name}[]" not in text, f"{b.name} does not build {fn.name}"
    dtypes = schema.generate_dtypes(s, b)
    assert f"kNumCombos = {len(s.dtypes)};" in dtypes and "#include <cstddef>" in dtypes
    xmacro = next(line for line in dtypes.splitlines() if line.startswith("#define ANYACCEL_DTYPE_COMBOS(X)"))
    for c in s.dtypes:
        assert "X(" + ", ".join(SCALAR_TYPES[d] for d in c.as_tuple()) + ")" in xmacro
    assert text.count("::anyaccel::stable::dtype_of(c10::ScalarType::") == 4 * len(s.dtypes)


def test_range_checks_spell_intervals_and_kinds() -> None:
    adam = next(s for s in all_op_specs() if s.family == "adam")
    text = schema.generate(adam, adam.build("cpu_adam"))
    assert ('::anyaccel::checks::scalar("adam_step", "step", step, ::anyaccel::checks::Interval{1.0, '
            'std::numeric_limits<double>::infinity(), true, false, "step >= 1"}, false);') in text
    assert ('::anyaccel::checks::scalar("adam_step", "beta1", beta1, ::anyaccel::checks::Interval{0.0, 1.0, true, '
            'false, "0 <= beta1 < 1"}, true);') in text
    assert '"eps > 0"}, true);' in text
    assert "Interval{0.0, std::numeric_limits<double>::infinity(), false, false" in text


def _toy_spec(signature: str = "(Tensor(a!)[] params, float lr, int n) -> ()") -> tuple[OpSpec, NativeBuild]:
    build = NativeBuild("ToyBuilder", "toy_schema", "cpu", sources=("x.cpp",), functions=("toy_step",))
    spec = OpSpec("toyschema", "a toy", (Function("toy_step", signature, ranges=(("lr", "(-inf, 2]"),)),),
                  dtypes=(DtypeCombo("float32", "float32", "float32"),), builds=(build,))
    spec.validate()
    return spec, build


def _compile(tmp_path: Path, kernel_params: str) -> subprocess.CompletedProcess:
    """-fsyntax-only of a kernel registered with ANYACCEL_IMPL against the toy spec's header."""
    spec, build = _toy_spec()
    gen = tmp_path / "gen"
    gen.mkdir(exist_ok=True)
    (gen / schema.HEADER_NAME).write_text(schema.generate(spec, build))
    (gen / schema.DTYPES_HEADER_NAME).write_text(schema.generate_dtypes(spec, build))
    tu = tmp_path / "tu.cpp"
    tu.write_text(f"""#include "anyaccel_op.h"
namespace {{
void toy_step({kernel_params}) {{}}
}}  // namespace
ANYACCEL_LIBRARY(m) {{ ANYACCEL_DEFINE_OPS(m); }}
ANYACCEL_LIBRARY_IMPL(CPU, m) {{ ANYACCEL_IMPL(m, toy_step, toy_step); }}
""")
    cmd = [REAL_CXX, "-std=c++17", "-fsyntax-only", torch_abi.target_macro(torch_abi.target()),
           "-DANYACCEL_OP_NAMESPACE=anyaccel_schema_test", f"-I{gen}", f"-I{PACKAGE_DIR / 'csrc' / 'includes'}",
           "-isystem", str(torch_abi.include_dir()), str(tu)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_toy_header_has_the_checked_wrapper() -> None:
    spec, build = _toy_spec()
    text = schema.generate(spec, build)
    assert ("using toy_step_fn = void(const ::anyaccel::stable::TensorList&, double, int64_t);") in text
    assert ('Interval{-std::numeric_limits<double>::infinity(), 2.0, false, true, "lr <= 2"}, true);') in text
    assert "  Kernel(params, lr, n);" in text


@pytest.mark.slow
def test_a_kernel_with_the_schemas_signature_compiles(tmp_path: Path) -> None:
    proc = _compile(tmp_path, "const anyaccel::stable::TensorList& params, double lr, int64_t n")
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_a_kernel_with_another_signature_is_refused_by_the_static_assert(tmp_path: Path) -> None:
    proc = _compile(tmp_path, "const anyaccel::stable::TensorList& params, float lr, int64_t n")  # float, not double
    assert proc.returncode != 0
    assert "does not have the C++ signature of toy_step" in proc.stderr and "schema in the op spec" in proc.stderr
