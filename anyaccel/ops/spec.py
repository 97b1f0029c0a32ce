"""Op specs: every op family described once.

An :class:`OpSpec` is the single source of truth for one op family (Adam, Lion, ...): its functions and
their schemas, the dtype combinations its kernels accept, the native builds (sources and flags per
backend, published under DeepSpeed's builder names), its implementations with their priorities, and what
later layers attach to it (DeepSpeed's module ABI, benchmarks). Everything else is derived from the specs:

- the builder registry (:mod:`anyaccel.op_builder.registry`): builder names, aliases and classes, including
  the extra DeepSpeed builder names a build answers on given accelerators (:class:`BuilderAlias`);
- DeepSpeed's module ABI on the modules ``load()`` returns (:class:`DeepSpeedABI`: ``create_adam``,
  ``multi_tensor_adam``...), and the integration's table of what DeepSpeed's callers need per builder;
- the schema header each native build compiles against (:mod:`anyaccel.op_builder.toolchains.schema`):
  the ``m.def`` schema strings, the C++ signature every kernel must have, and the accepted dtypes;
- the validating fakes registered for ``torch.compile`` and ``opcheck``;
- the implementation loader (:mod:`anyaccel.ops.dispatch`), AOT selection, ``anyaccel report`` and
  ``anyaccel build``;
- the tests' parametrisation (``tests/ops/test_specs.py`` walks every spec).

Specs live in ``anyaccel/ops/<family>/spec.py`` as a module-level ``SPEC``, or deeper for a group of
families (``anyaccel/ops/nn/families/<family>/spec.py``: the model ops); :func:`all_specs` finds them by that
convention (and through the ``anyaccel.ops`` entry-point group for plug-in op families), so adding an op
family edits no table. Importing a spec module is cheap: it imports neither torch nor a builder; fakes
and loaders are named as ``"module:attribute"`` strings and imported on first use.

Schemas use torch's schema language (``torch/csrc/jit/frontend/function_schema_parser.cpp``), written
without the function name: ``"(Tensor(a!)[] params, Tensor[] grads, float lr) -> ()"``. Functions a native
build registers use the subset with a C++ mapping (:data:`CXX_TYPES`, :data:`CXX_RETURNS`); functions
offered only by Python-level implementations (``custom_op``/``triton_op``) may also take optional tensors
(``Tensor? weight``) and dtypes (``ScalarType accum_dtype``) and return tuples (``-> (Tensor, Tensor)``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import logging
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Entry-point group through which other packages contribute op specs (``name = "module:SPEC"``).
ENTRY_POINT_GROUP = "anyaccel.ops"

#: Schema argument type -> the C++ parameter type a kernel declares for it (``csrc/includes/stable/boxing.h``).
CXX_TYPES: dict[str, str] = {
    "Tensor[]": "const ::anyaccel::stable::TensorList&",
    "Tensor": "const ::anyaccel::stable::Tensor&",
    "int": "int64_t",
    "float": "double",
    "bool": "bool",
    "str": "std::string",
}
#: Schema return type -> the C++ return type.
CXX_RETURNS: dict[str, str] = {"()": "void", "str": "std::string", "int": "int64_t",
                               "Tensor": "::anyaccel::stable::Tensor"}

#: torch dtype name -> ``c10::ScalarType`` enumerator name (what the C++ X-macros use).
SCALAR_TYPES: dict[str, str] = {"float32": "Float", "bfloat16": "BFloat16", "float16": "Half", "none": "Undefined"}

_ARG = re.compile(r"^(?P<type>Tensor\??|int|float|bool|str|ScalarType)(?P<alias>\([a-z]!?\))?(?P<list>\[\])?"
                  r"\s+(?P<name>[A-Za-z_]\w*)$")
#: Return types a Python-level function may have (one of these, or a parenthesised tuple of them, or ``()``).
PYTHON_RETURNS = frozenset({"Tensor", "int", "float", "bool", "str"})


class SpecError(ValueError):
    """An op spec is malformed (bad schema, unknown function or build); the message names the spec and field."""


@dataclass(frozen=True)
class Argument:
    """One parsed schema argument.

    Attributes:
        name: the argument name (``"params"``).
        type: the base schema type with ``[]`` for lists (``"Tensor[]"``, ``"float"``).
        mutable: whether the schema marks it written in place (``Tensor(a!)``).
    """

    name: str
    type: str
    mutable: bool


@dataclass(frozen=True)
class Function:
    """One function of an op family.

    Attributes:
        name: the function name, also the torch op name inside a build's namespace (``"adam_step"``).
        schema: arguments and returns in torch's schema language, without the name.
        fake: ``"module:function"`` of the validating fake (meta) implementation, or None for functions
            without tensor arguments.
        ranges: ``(argument, interval)`` pairs for scalar arguments, e.g. ``("beta1", "[0, 1)")``: checked
            by the kernels (generated into the schema header), the fakes and the front ends
            (:mod:`anyaccel.ops.validation`), so the range is written once.
        doc: one line for the report and docs.
    """

    name: str
    schema: str
    fake: str | None = None
    ranges: tuple[tuple[str, str], ...] = ()
    doc: str = ""

    @property
    def full_schema(self) -> str:
        """``name + schema``, the string passed to ``torch.library.define`` / ``m.def``."""
        return f"{self.name}{self.schema}"

    @functools.cached_property
    def arguments(self) -> tuple[Argument, ...]:
        """The parsed arguments.

        Raises:
            SpecError: an argument is not of the form ``<type>[(x!)][[]] <name>`` with a type of :data:`CXX_TYPES`.
        """
        args_text = self._split()[0]
        out = []
        for raw in filter(None, (a.strip() for a in args_text.split(","))):
            m = _ARG.match(raw)
            if m is None:
                raise SpecError(f"function {self.name!r}: argument {raw!r} is not '<type>[(a!)][[]] <name>' with a "
                                f"type in {sorted(CXX_TYPES) + ['ScalarType', 'Tensor?']}")
            out.append(Argument(m["name"], m["type"] + (m["list"] or ""), bool(m["alias"] and "!" in m["alias"])))
        return tuple(out)

    @property
    def returns(self) -> str:
        """The return type text (``"()"``, ``"str"``)."""
        return self._split()[1]

    @property
    def return_types(self) -> tuple[str, ...]:
        """The returned types in order: ``()`` for none, ``("Tensor", "Tensor")`` for a tuple.

        Raises:
            SpecError: a returned type is not one of :data:`PYTHON_RETURNS`.
        """
        text = self.returns
        inner = text[1:-1] if text.startswith("(") and text.endswith(")") else text
        types = tuple(t.strip() for t in inner.split(",") if t.strip())
        bad = [t for t in types if t not in PYTHON_RETURNS]
        if bad:
            raise SpecError(f"function {self.name!r}: return type {bad[0]!r} is not one of {sorted(PYTHON_RETURNS)}")
        return types

    @property
    def mutated(self) -> tuple[str, ...]:
        """Names of the arguments written in place (``custom_op``'s ``mutates_args``)."""
        return tuple(a.name for a in self.arguments if a.mutable)

    def cxx_signature(self) -> str:
        """The C++ function type every kernel of this function must have, e.g.
        ``void(const ::anyaccel::stable::TensorList&, int64_t, double)``.

        Raises:
            SpecError: an argument or return type has no C++ mapping.
        """
        if self.returns not in CXX_RETURNS:
            raise SpecError(f"function {self.name!r}: return type {self.returns!r} is not one of {sorted(CXX_RETURNS)}")
        missing = [f"{a.type} {a.name}" for a in self.arguments if a.type not in CXX_TYPES]
        if missing:
            raise SpecError(f"function {self.name!r}: argument(s) {', '.join(missing)} have no C++ type; a native "
                            f"kernel takes only {sorted(CXX_TYPES)}")
        params = ", ".join(CXX_TYPES[a.type] for a in self.arguments)
        return f"{CXX_RETURNS[self.returns]}({params})"

    def load_fake(self) -> Callable[..., Any] | None:
        """The fake implementation, imported on first use (None when the function has none)."""
        return resolve(self.fake) if self.fake else None

    def _split(self) -> tuple[str, str]:
        m = re.fullmatch(r"\s*\((?P<args>.*)\)\s*->\s*(?P<ret>.+?)\s*", self.schema)
        if m is None:
            raise SpecError(f"function {self.name!r}: schema {self.schema!r} is not '(<arguments>) -> <returns>'")
        return m["args"], m["ret"]


@dataclass(frozen=True)
class DtypeCombo:
    """One accepted dtype combination of an optimizer op's tensor lists.

    Attributes:
        param: dtype of ``params`` (the tensors the kernel updates).
        grad: dtype of ``grads``.
        state: dtype of every optimizer-state list.
        copy: dtype of ``model_copies``, or ``"none"`` when the list must be empty.
    """

    param: str
    grad: str
    state: str
    copy: str = "none"

    def as_tuple(self) -> tuple[str, str, str, str]:
        """``(param, grad, state, copy)``."""
        return (self.param, self.grad, self.state, self.copy)


@dataclass(frozen=True)
class BuilderAlias:
    """One more DeepSpeed builder name a build answers to, on some accelerators.

    A build is compiled once, under its own ``NAME``; an alias publishes the same build (same sources, same
    cache entry, same loaded library) under another builder class name where DeepSpeed asks for it by
    that name. Example: DeepSpeed's ``FusedAdam`` on the CPU asks for ``FusedAdamBuilder``, which anyaccel
    serves with its CPU Adam build (``BuilderAlias("FusedAdamBuilder", ("cpu",))`` on ``cpu_adam``).

    Attributes:
        builder: the builder class name (``"FusedAdamBuilder"``).
        accelerators: the accelerators (``_name``) on which ``create_op_builder(builder)`` returns the build;
            never ``"*"`` (an alias serves named accelerators only, so it cannot hide another build's row).
    """

    builder: str
    accelerators: tuple[str, ...]


@dataclass(frozen=True)
class DeepSpeedABI:
    """DeepSpeed's module ABI over an op family: the functions DeepSpeed's Python callers call on the module
    their builder's ``load()`` returns (``create_adam``, ``adam_update``, ``multi_tensor_adam``...).

    The functions are Python adapters over the family's torch ops (anyaccel's own functions stay on the
    module). Which of them a loaded module offers follows from the builder names its build answers to
    (the build's ``builder`` and its :class:`BuilderAlias` names): the CPU Adam build offers
    ``CPUAdamBuilder``'s functions and, as ``FusedAdamBuilder`` on the CPU, ``multi_tensor_adam``.

    Attributes:
        adapter: ``"module:factory"``; the factory is called once per loaded module with that module and
            the tuple of function names it offers, and returns the object whose attributes those functions
            are (:class:`anyaccel.op_builder.core.module.OpModule` forwards names it lacks to it).
        builders: ``(DeepSpeed builder name, function names)`` pairs: what DeepSpeed's callers use on a
            module loaded through that builder name (sources: DeepSpeed's ``ops/<family>/*.py``).
        platform_functions: ``(function name, sys.platform prefix)`` pairs for functions offered only on
            some platforms (DeepSpeed defines ZenFlow's cross-process control on Linux only).
    """

    adapter: str
    builders: tuple[tuple[str, tuple[str, ...]], ...]
    platform_functions: tuple[tuple[str, str], ...] = ()

    def functions_for(self, builder_names: tuple[str, ...] | list[str], platform: str | None = None
                      ) -> tuple[str, ...]:
        """The ABI functions a module serving ``builder_names`` offers on ``platform`` (default: this one).

        Returns:
            The names, in :attr:`builders` order, without repeats.
        """
        import sys

        here = sys.platform if platform is None else platform
        only = dict(self.platform_functions)
        out: list[str] = []
        for builder, names in self.builders:
            if builder in builder_names:
                out.extend(n for n in names if n not in out and here.startswith(only.get(n, "")))
        return tuple(out)


#: Host-compiler flags for a CPU build's registration translation unit (the stable-ABI wrappers and the
#: per-call list validation; the SIMD loops are in the ``*_kernel.cpp`` unit, at ``-O3``). Parsing torch's
#: stable headers makes that unit the slowest of a build, and ``-O3`` adds about a third to its compile
#: time for no measured per-call difference.
REGISTRATION_CXX_ARGS: tuple[str, ...] = ("-O1",)


@dataclass(frozen=True)
class NativeBuild:
    """One compiled build of an op family: sources and flags for one backend, under a DeepSpeed builder name.

    Attributes:
        builder: the builder class name DeepSpeed callers pass to ``create_op_builder`` (``"CPUAdamBuilder"``).
        name: the build's ``NAME``: the cache directory, the namespace prefix and the AOT variable
            (``ANYACCEL_BUILD_<NAME>``).
        backend: ``"cpu"``, ``"cuda"``, ``"xpu"`` or ``"npu"``: which op-builder backend base compiles it.
        sources: source files relative to the package directory.
        functions: the spec functions the sources register (a subset of the spec's).
        accelerators: the accelerators whose ``create_op_builder(builder)`` returns this build; ``("*",)``
            for host ops, which serve every accelerator.
        isa_levels: for CPU builds, the SIMD levels the sources implement (best first).
        cxx_args: extra host-compiler flags.
        nvcc_args: extra device-compiler flags.
        source_cxx_args: ``(source, flags)`` pairs: host-compiler flags for one ``.cpp`` source only, after
            every other flag (so ``"-O1"`` overrides the backend's ``-O3``). For translation units whose code
            is registration and per-call validation (torch's stable-ABI headers make them the slowest to
            compile) rather than the vectorised kernels.
        module: for builds that compile nothing (NPU delegation), ``"module:load"`` returning the op module.
        aliases: more builder names the build answers to on given accelerators (:class:`BuilderAlias`).
    """

    builder: str
    name: str
    backend: str
    sources: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    isa_levels: tuple[str, ...] = ()
    cxx_args: tuple[str, ...] = ()
    nvcc_args: tuple[str, ...] = ()
    source_cxx_args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    module: str | None = None
    aliases: tuple[BuilderAlias, ...] = ()

    @property
    def build_var(self) -> str:
        """The variable that selects this build for AOT builds (``ANYACCEL_BUILD_CPU_ADAM``)."""
        return f"ANYACCEL_BUILD_{self.name.upper()}"

    @property
    def builder_names(self) -> tuple[str, ...]:
        """Every builder class name the build answers to: :attr:`builder`, then its aliases'."""
        return (self.builder, *(a.builder for a in self.aliases if a.builder != self.builder))

    def rows(self) -> tuple[tuple[str, str], ...]:
        """``(builder name, accelerator)`` for every registry row the build fills (aliases included)."""
        return (tuple((self.builder, acc) for acc in self.accelerators)
                + tuple((a.builder, acc) for a in self.aliases for acc in a.accelerators))


@dataclass(frozen=True)
class Implementation:
    """One implementation of an op family on some device types, for the priority loader.

    Attributes:
        name: unique within the family (``"cuda"``, ``"triton"``, ``"cpu"``, ``"sycl"``, ``"npu"``).
        priority: higher wins among the available ones.
        device_types: torch device types it runs on.
        build: the :attr:`NativeBuild.name` whose builder loads it (probe: the builder's ``compatibility()``).
        module: for Python-level implementations (Triton), ``"module:load"`` returning the op module.
        requires: Python packages that must be importable (checked with ``find_spec``, never imported).
        probe: ``"module:function"`` of a further cheap availability check returning ``(available, reason)``
            (e.g. "the Triton interpreter is switched on"), run after ``requires``; None for none.
        description: one line for ``anyaccel report``.

    ``device_types`` may be ``("*",)``: every device type (portable torch implementations).
    """

    name: str
    priority: int
    device_types: tuple[str, ...]
    build: str | None = None
    module: str | None = None
    requires: tuple[str, ...] = ()
    probe: str | None = None
    description: str = ""


@dataclass(frozen=True)
class OpSpec:
    """An op family, described once.

    Attributes:
        family: the family's name (``"adam"``); the loader's op name and ``ANYACCEL_IMPL_<FAMILY>``.
        summary: one line for the report and docs.
        functions: every function any build or implementation offers.
        dtypes: the dtype combinations the kernels accept (empty for ops without tensor-list dtypes).
        builds: the native builds.
        implementations: the implementations the loader chooses among, per device type.
        deepspeed: DeepSpeed's module ABI over the family (:class:`DeepSpeedABI`), attached to the modules
            its builds load, or None.
        benchmarks: benchmark scripts (``benchmarks/<file>``) that measure the family.
        source: the module that defined the spec (set by :func:`all_specs`).
    """

    family: str
    summary: str
    functions: tuple[Function, ...]
    dtypes: tuple[DtypeCombo, ...] = ()
    builds: tuple[NativeBuild, ...] = ()
    implementations: tuple[Implementation, ...] = ()
    deepspeed: DeepSpeedABI | None = None
    benchmarks: tuple[str, ...] = ()
    source: str = field(default="", compare=False)

    def function(self, name: str) -> Function:
        """The function called ``name``.

        Raises:
            SpecError: no such function (the message lists the spec's functions).
        """
        for fn in self.functions:
            if fn.name == name:
                return fn
        raise SpecError(f"op {self.family!r} has no function {name!r}; it has {[f.name for f in self.functions]}")

    def build(self, name: str) -> NativeBuild:
        """The native build whose ``name`` (``NAME``) or ``builder`` is ``name``.

        Raises:
            SpecError: no such build.
        """
        for b in self.builds:
            if name in (b.name, b.builder):
                return b
        raise SpecError(f"op {self.family!r} has no build {name!r}; it has {[b.name for b in self.builds]}")

    def functions_of(self, build: NativeBuild) -> tuple[Function, ...]:
        """The functions ``build`` registers, in spec order."""
        return tuple(fn for fn in self.functions if fn.name in build.functions)

    def accepted_dtypes_text(self) -> str:
        """The accepted combinations in words, for error messages (``"(float32, float32, float32, none), ..."``)."""
        return ", ".join("(" + ", ".join(c.as_tuple()) + ")" for c in self.dtypes)

    def validate(self) -> None:
        """Check the spec's internal consistency.

        Raises:
            SpecError: a schema does not parse (or, for a function a native build registers, has no C++
                mapping), a build names an unknown function or backend or gives per-source flags for a file
                that is not one of its ``.cpp`` sources, an implementation names an unknown build, or names
                are not unique.
        """
        names = [f.name for f in self.functions]
        if len(set(names)) != len(names):
            raise SpecError(f"op {self.family!r}: function names repeat: {names}")
        native = {name for b in self.builds if not b.module for name in b.functions}
        for fn in self.functions:
            _ = fn.arguments, fn.return_types  # parse them (SpecError when malformed)
            if fn.name in native:
                fn.cxx_signature()
            arg_types = {a.name: a.type for a in fn.arguments}
            for arg, interval in fn.ranges:
                if arg_types.get(arg) not in ("int", "float"):
                    raise SpecError(f"op {self.family!r}: function {fn.name!r} ranges {arg!r}, which is not an int "
                                    "or float argument")
                from anyaccel.ops.validation import Interval

                try:
                    Interval.parse(interval)
                except ValueError as exc:
                    raise SpecError(f"op {self.family!r}: function {fn.name!r} range of {arg!r}: {exc}") from None
        for c in self.dtypes:
            bad = [d for d in c.as_tuple() if d not in SCALAR_TYPES]
            if bad:
                raise SpecError(f"op {self.family!r}: dtype {bad[0]!r} is not one of {sorted(SCALAR_TYPES)}")
        for b in self.builds:
            if b.backend not in BACKENDS:
                raise SpecError(f"op {self.family!r}: build {b.name!r} has backend {b.backend!r}; accepted: "
                                f"{sorted(BACKENDS)}")
            unknown = [f for f in b.functions if f not in names]
            if unknown:
                raise SpecError(f"op {self.family!r}: build {b.name!r} registers unknown functions {unknown}")
            if not b.name.isidentifier():
                raise SpecError(f"op {self.family!r}: build name {b.name!r} must be an identifier")
            stray = [src for src, _ in b.source_cxx_args if src not in b.sources or not src.endswith(".cpp")]
            if stray:
                raise SpecError(f"op {self.family!r}: build {b.name!r} gives source_cxx_args for {stray}, which are "
                                f"not among its .cpp sources {list(b.sources)}")
            for alias in b.aliases:
                if not alias.builder.isidentifier() or not alias.accelerators or "*" in alias.accelerators:
                    raise SpecError(f"op {self.family!r}: build {b.name!r} has alias {alias!r}; accepted: an "
                                    "identifier and at least one named accelerator (not '*')")
        rows = [row for b in self.builds for row in b.rows()]
        repeated = sorted({row for row in rows if rows.count(row) > 1})
        if repeated:
            raise SpecError(f"op {self.family!r}: (builder, accelerator) rows {repeated} are served by more than "
                            "one build; give each row to exactly one build")
        if self.deepspeed is not None:
            served = {name for b in self.builds for name in b.builder_names}
            unknown_builders = [name for name, _ in self.deepspeed.builders if name not in served]
            if unknown_builders:
                raise SpecError(f"op {self.family!r}: deepspeed ABI names builders {unknown_builders} that no build "
                                f"answers to; builds answer to {sorted(served)}")
            clash = [fn for _, fns in self.deepspeed.builders for fn in fns if fn in names]
            if clash:
                raise SpecError(f"op {self.family!r}: deepspeed ABI functions {clash} have the names of spec "
                                "functions (torch ops), which would hide them on the loaded module; rename the spec "
                                "function")
        builds = {b.name for b in self.builds}
        impl_names = [i.name for i in self.implementations]
        if len(set(impl_names)) != len(impl_names):
            raise SpecError(f"op {self.family!r}: implementation names repeat: {impl_names}")
        for impl in self.implementations:
            if (impl.build is None) == (impl.module is None):
                raise SpecError(f"op {self.family!r}: implementation {impl.name!r} needs exactly one of build= "
                                "and module=")
            if impl.build is not None and impl.build not in builds:
                raise SpecError(f"op {self.family!r}: implementation {impl.name!r} names unknown build {impl.build!r}")


#: The op-builder backends a :class:`NativeBuild` may name.
BACKENDS = frozenset({"cpu", "cuda", "xpu", "npu"})


def resolve(target: str) -> Any:
    """Import ``"package.module:attribute"`` and return the attribute.

    Raises:
        ImportError: the module is missing; AttributeError: the attribute is.
    """
    module_name, _, attr = target.partition(":")
    return getattr(importlib.import_module(module_name), attr)


@functools.lru_cache(maxsize=1)
def all_specs() -> tuple[OpSpec, ...]:
    """Every op spec: ``anyaccel/ops/<family>/spec.py`` modules, then the ``anyaccel.ops`` entry points.

    Each spec is validated once. A plug-in spec that fails to import or validate is logged and skipped; a
    built-in one raises.

    Returns:
        The specs, sorted by family.

    Raises:
        SpecError: a built-in spec is malformed, or two specs share a family name.

    Side effects: imports the spec modules (cheap: no torch, no builders) on the first call; cached.
    """
    import anyaccel.ops as ops_pkg

    found: dict[str, OpSpec] = {}

    def add(spec: OpSpec, origin: str) -> None:
        spec.validate()
        if spec.family in found:
            raise SpecError(f"op family {spec.family!r} is defined twice ({found[spec.family].source} and {origin})")
        found[spec.family] = _with_source(spec, origin)

    for module_name in _spec_modules(ops_pkg.__path__):
        add(importlib.import_module(module_name).SPEC, module_name)
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            add(ep.load(), ep.value)
        except (ImportError, AttributeError, SpecError) as exc:
            logger.warning("op spec entry point %s (%s) skipped: %s", ep.name, ep.value, exc)
    return tuple(found[k] for k in sorted(found))


def _spec_modules(paths: list[str], prefix: str = "anyaccel.ops", depth: int = 3) -> list[str]:
    """``<prefix>.<pkg>.spec`` for each package with a ``spec.py``; packages without one (groups such as
    ``nn/families``) are searched in turn, ``depth`` levels deep at most."""
    found = []
    for info in sorted(pkgutil.iter_modules(paths), key=lambda i: i.name):
        if not info.ispkg:
            continue
        dirs = [Path(p) / info.name for p in paths]
        if any((d / "spec.py").is_file() for d in dirs):
            found.append(f"{prefix}.{info.name}.spec")
        elif depth > 1:
            found += _spec_modules([str(d) for d in dirs if d.is_dir()], f"{prefix}.{info.name}", depth - 1)
    return found


def spec(family: str) -> OpSpec:
    """The spec of ``family``.

    Raises:
        SpecError: no such family (the message lists the known ones).
    """
    for s in all_specs():
        if s.family == family:
            return s
    raise SpecError(f"unknown op family {family!r}; known: {[s.family for s in all_specs()]}")


def _with_source(spec: OpSpec, origin: str) -> OpSpec:
    import dataclasses

    return dataclasses.replace(spec, source=origin)
