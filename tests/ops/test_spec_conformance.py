"""Everything derived from the op specs agrees with them, and every host build honours its spec.

Parametrised by the specs themselves (``all_op_specs()``), so a new op family is checked by adding its spec:
its schema header carries every function, the registry and the implementation loader are derived from it,
and each host (CPU) build runs every tensor function through ``torch.library.opcheck`` for every accepted
dtype combination, under ``torch.compile(fullgraph=True)``, and against its validating fake with the same
bad inputs (the same message). (``test_spec.py`` covers the spec vocabulary itself.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from anyaccel.op_builder import classes
from anyaccel.op_builder.core import aliases, module_functions
from anyaccel.op_builder.toolchains import schema
from anyaccel.ops import registry
from anyaccel.spec import OpSpec, all_op_specs
from anyaccel.testing.op_samples import sample_args

PACKAGE = Path(__import__("anyaccel").__file__).parent
SPECS = all_op_specs()
HOST_BUILDS = [(s, b) for s in SPECS for b in s.builds if b.backend == "cpu"]
#: The host builds of element-wise optimizer families (those with dtype combinations), whose calls
#: ``sample_args`` can make; the others (``aio``: files and handles) run opcheck and the fake-versus-kernel
#: message check in their own tests (``tests/ops/aio``).
HOST_BUILDS_WITH_DTYPES = [(s, b) for s, b in HOST_BUILDS if s.dtypes]
HOST_IDS = [f"{s.family}-{b.name}" for s, b in HOST_BUILDS_WITH_DTYPES]


@pytest.mark.parametrize("s", SPECS, ids=[s.family for s in SPECS])
def test_sources_exist_and_tensor_functions_have_fakes(s: OpSpec) -> None:
    for b in s.builds:
        for src in b.sources:
            assert (PACKAGE / src).is_file(), f"{s.family}: build {b.name} names a missing source {src}"
        assert b.module or b.sources, f"{s.family}: build {b.name} has neither sources nor a module"
    for fn in s.functions:
        if any(a.type.startswith("Tensor") for a in fn.arguments):
            assert fn.fake is not None and callable(fn.load_fake()), f"{fn.name} has tensor arguments but no fake"


@pytest.mark.parametrize("s", SPECS, ids=[s.family for s in SPECS])
def test_schema_headers_carry_every_function_range_and_dtype(s: OpSpec) -> None:
    for b in s.builds:
        if b.module:
            continue
        text = schema.generate(s, b)
        for fn in s.functions_of(b):
            assert f'"{fn.full_schema}"' in text
            assert f"using {fn.name}_fn = {fn.cxx_signature()};" in text
            for name, _ in fn.ranges:
                assert f'"{name}"' in text
        dtypes = schema.generate_dtypes(s, b)
        combos = next(line for line in dtypes.splitlines() if line.startswith("#define ANYACCEL_DTYPE_COMBOS(X)"))
        assert combos.count(" X(") == len(s.dtypes)
        assert f"kNumCombos = {len(s.dtypes)};" in dtypes


@pytest.mark.parametrize("s", SPECS, ids=[s.family for s in SPECS])
def test_registry_and_loader_are_derived_from_the_spec(s: OpSpec) -> None:
    for b in s.builds:
        contributed = [(a.name, acc) for a in aliases.contributed() if (a.family, a.build) == (s.family, b.name)
                       for acc in a.accelerators]
        for builder, acc in (*b.rows(), *contributed):  # the build's own rows and the integrations' aliases
            cls = registry.get_builder_class(builder, "cuda" if acc == "*" else acc)
            assert cls is not None and cls.NAME == b.name and cls.BUILD == b and cls.__name__ == builder
    assert {i.name for i in registry.implementations(s.family)} == {i.name for i in s.implementations}


@pytest.mark.parametrize("s", SPECS, ids=[s.family for s in SPECS])
def test_integration_functions_are_offered_by_the_builds_they_name(s: OpSpec) -> None:
    for b in s.builds:
        extras = classes.builder_class(s.family, b.name)()._module_extras()
        expected = module_functions.for_build(s.family, b.builder_names)
        assert extras.get("functions") == expected


@pytest.fixture(scope="module")
def host_modules(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every host build of every spec, loaded from a private cache."""
    root = tmp_path_factory.mktemp("spec-cache")
    root.chmod(0o700)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANYACCEL_CACHE_DIR", str(root))
        return {b.name: classes.builder_class(s.family, b.name)().load() for s, b in HOST_BUILDS}


def _tensor_functions(s: OpSpec, b: Any) -> list[Any]:
    return [fn for fn in s.functions_of(b) if any(a.type.startswith("Tensor") for a in fn.arguments)]


@pytest.mark.slow
@pytest.mark.parametrize(("s", "b"), HOST_BUILDS_WITH_DTYPES, ids=HOST_IDS)
def test_host_build_passes_opcheck_for_every_dtype_combination(s: OpSpec, b: Any, host_modules: dict) -> None:
    module = host_modules[b.name]
    for fn in _tensor_functions(s, b):
        op = getattr(getattr(torch.ops, module.namespace), fn.name).default
        for combo in s.dtypes:
            torch.library.opcheck(op, tuple(sample_args(fn, combo)))


@pytest.mark.slow
@pytest.mark.parametrize(("s", "b"), HOST_BUILDS_WITH_DTYPES, ids=HOST_IDS)
def test_host_build_offers_the_integrations_functions(s: OpSpec, b: Any, host_modules: dict) -> None:
    module = host_modules[b.name]
    expected = (module_functions.for_build(s.family, b.builder_names) or (None, ()))[1]
    assert module.adapted_functions == expected
    for name in expected:
        assert callable(getattr(module, name))


@pytest.mark.slow
@pytest.mark.parametrize(("s", "b"), HOST_BUILDS_WITH_DTYPES, ids=HOST_IDS)
def test_host_build_compiles_without_graph_break(s: OpSpec, b: Any, host_modules: dict) -> None:
    module = host_modules[b.name]
    torch._dynamo.reset()
    for fn in _tensor_functions(s, b):
        op = getattr(module, fn.name)
        args = sample_args(fn, s.dtypes[0])
        expected = [[t.clone() for t in a] if isinstance(a, list) else a for a in args]
        op(*expected)

        def call(*a: Any, op: Any = op) -> None:
            op(*a)

        torch.compile(call, fullgraph=True, backend="aot_eager")(*args)
        for got, want in zip(args, expected, strict=True):
            if isinstance(got, list):
                for g, w in zip(got, want, strict=True):
                    torch.testing.assert_close(g, w, rtol=0, atol=0)


def _bad_calls(args: list[Any]) -> dict[str, list[Any]]:
    """Bad variants of a valid call: a short list, a float32 overflow, a wrong dtype, a wrong shape."""
    short = list(args)
    short[1] = short[1][:-1]
    huge = list(args)
    huge[next(i for i, a in enumerate(args) if isinstance(a, float))] = 1e39
    dtype = list(args)
    dtype[0] = [dtype[0][0].double(), *dtype[0][1:]]
    shape = list(args)
    shape[1] = [torch.zeros(shape[1][0].numel() + 1, dtype=shape[1][0].dtype), *shape[1][1:]]
    return {"lengths": short, "float32 overflow": huge, "dtype": dtype, "shape": shape}


@pytest.mark.slow
@pytest.mark.parametrize(("s", "b"), HOST_BUILDS_WITH_DTYPES, ids=HOST_IDS)
def test_fake_and_kernel_reject_bad_calls_with_the_same_message(s: OpSpec, b: Any, host_modules: dict) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    module = host_modules[b.name]
    for fn in _tensor_functions(s, b):
        op = getattr(module, fn.name)
        for what, args in _bad_calls(sample_args(fn, s.dtypes[0])).items():
            with pytest.raises(RuntimeError) as kernel_error:
                op(*args)
            with FakeTensorMode() as mode:
                fake_args = [[mode.from_tensor(t) for t in a] if isinstance(a, list) else
                             mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
                with pytest.raises(RuntimeError) as fake_error:
                    op(*fake_args)
            assert str(kernel_error.value) == str(fake_error.value), what
