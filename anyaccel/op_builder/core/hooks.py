"""What an op build is, as data, and the hooks a backend overrides: `BuilderHooks`.

The base of [`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder]. A builder is data: the op spec's build
([`anyaccel.spec.NativeBuild`][anyaccel.spec.NativeBuild]: sources, functions, flags) plus its backend base
(``backends/``),
which overrides the hooks declared here ([`isa`][anyaccel.op_builder.core.hooks.BuilderHooks.isa],
[`extra_key_inputs`][anyaccel.op_builder.core.hooks.BuilderHooks.extra_key_inputs],
[`nvcc_args`][anyaccel.op_builder.core.hooks.BuilderHooks.nvcc_args], ...). This module also derives the cache key from
that data
([`key_inputs`][anyaccel.op_builder.core.hooks.BuilderHooks.key_inputs]), and spawns no process doing so: the key uses
the compiler's path, size and
mtime, never its ``--version``. Sources are compiled against torch's stable ABI
(`anyaccel.op_builder.toolchains.torch_abi`): the key carries the ABI target, not the torch version, so a
torch upgrade reuses every artifact.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any, ClassVar

from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.core import registration
from anyaccel.op_builder.errors import OpBuilderError, ToolchainError
from anyaccel.op_builder.toolchains import schema, torch_abi
from anyaccel.op_builder.toolchains.host import file_identity, find_cxx
from anyaccel.spec import NativeBuild, OpSpec
from anyaccel.version import __version__

#: anyaccel's package directory (the root of its own ops' sources).
PACKAGE_DIR = Path(__file__).resolve().parent.parent.parent
#: Manifest input fields compared by "not newer than" instead of equality.
ABI_TARGET_FIELD = "abi_target"


def torch_version() -> str:
    """The running torch's version string (imports torch)."""
    import torch

    return str(torch.__version__)


class BuilderHooks:
    """Base of every op builder (DeepSpeed's ``OpBuilder`` vocabulary): the build as data, and its key.

    Builders of anyaccel's own ops are made from op specs
    ([`anyaccel.op_builder.classes.builder_class`][anyaccel.op_builder.classes.builder_class]),
    which set `SPEC` and `BUILD`; a hand-written builder sets ``NAME``/``BUILD_VAR`` and overrides
    [`sources`][anyaccel.op_builder.core.hooks.BuilderHooks.sources] and
    [`functions`][anyaccel.op_builder.core.hooks.BuilderHooks.functions] instead.

    Class attributes:
        NAME: the op build's name, e.g. "cpu_adam"; the cache directory and namespace prefix.
        BUILD_VAR: the variable that selects the op for AOT builds, e.g. "ANYACCEL_BUILD_CPU_ADAM".
        BACKEND: the backend family, part of the key ("cpu", "cuda", ...).
        DEVICE_TYPE: the torch device type the kernels serve (the fakes check it).
        BUILD_HOST_FIELDS: key inputs that describe the build machine rather than the binary's runtime
            contract; they are ignored when matching a prebuilt artifact (a user needs no compiler to use
            one).
        HEADER_SUFFIXES: which files under [`include_paths`][anyaccel.op_builder.core.hooks.BuilderHooks.include_paths]
            are part of the key.
        SPEC, BUILD: the op spec and its build this builder was made from (None for hand-written ones).
    """

    NAME: ClassVar[str] = ""
    BUILD_VAR: ClassVar[str] = ""
    BACKEND: ClassVar[str] = "generic"
    DEVICE_TYPE: ClassVar[str] = "cpu"
    BUILD_HOST_FIELDS: ClassVar[tuple[str, ...]] = ("compiler", "built_with_torch")
    HEADER_SUFFIXES: ClassVar[tuple[str, ...]] = (".h", ".hpp", ".hh", ".inl")
    SPEC: ClassVar[OpSpec | None] = None
    BUILD: ClassVar[NativeBuild | None] = None

    def __init__(self) -> None:
        """Check the builder's ``NAME``.

        Raises:
            ValueError: ``NAME`` is empty or not an identifier.
        """
        if not self.NAME or not self.NAME.isidentifier():
            raise ValueError(f"{type(self).__name__}.NAME={self.NAME!r} must be a non-empty identifier")

    # ----- DeepSpeed vocabulary: data -------------------------------------------------------------------
    @property
    def name(self) -> str:
        """DeepSpeed's builder attribute ``name``: the op build's ``NAME``."""
        return self.NAME

    def absolute_name(self) -> str:
        """The dotted name DeepSpeed uses for AOT extensions, ``anyaccel.ops.<NAME>_op``."""
        return f"anyaccel.ops.{self.NAME}_op"

    def source_root(self) -> Path:
        """The directory [`sources`][anyaccel.op_builder.core.hooks.BuilderHooks.sources] are relative to: anyaccel's
        package directory, or, for a spec
        contributed by another package (``anyaccel.ops`` entry point), that package's top directory."""
        top = self.SPEC.source.partition(".")[0] if self.SPEC is not None and self.SPEC.source else "anyaccel"
        if top == "anyaccel":
            return PACKAGE_DIR
        import importlib.util

        found = importlib.util.find_spec(top)
        if found is None or not found.submodule_search_locations:
            raise OpBuilderError(f"op {self.NAME}: the package {top!r} of its spec cannot be found")
        return Path(next(iter(found.submodule_search_locations)))

    def sources(self) -> list[str]:
        """Source files relative to [`source_root`][anyaccel.op_builder.core.hooks.BuilderHooks.source_root] (the spec
        build's ``sources``)."""
        if self.BUILD is None:
            raise NotImplementedError(f"{type(self).__name__} must define sources()")
        return list(self.BUILD.sources)

    def include_paths(self) -> list[str]:
        """Include directories (relative to [`source_root`][anyaccel.op_builder.core.hooks.BuilderHooks.source_root], or
        absolute); every header in them is part
        of the key. anyaccel's shared headers (``csrc/includes``: stable-ABI tensors, checks, SIMD, multi-tensor
        apply) are always one."""
        shared = PACKAGE_DIR / "csrc" / "includes"
        return ["csrc/includes"] if self.source_root() == PACKAGE_DIR else [str(shared)]

    def cxx_args(self) -> list[str]:
        """Extra C++ compiler flags (the spec build's ``cxx_args``; backends add theirs)."""
        return list(self.BUILD.cxx_args) if self.BUILD else []

    def source_cxx_args(self, source: str) -> list[str]:
        """Host-compiler flags for the one source ``source`` (a
        [`sources`][anyaccel.op_builder.core.hooks.BuilderHooks.sources] entry), after every other flag:
        the spec build's ``source_cxx_args`` for it, else none."""
        if self.BUILD is None:
            return []
        return [flag for src, flags in self.BUILD.source_cxx_args if src == source for flag in flags]

    def nvcc_args(self) -> list[str]:
        """Extra device-compiler flags (GPU builders)."""
        return list(self.BUILD.nvcc_args) if self.BUILD else []

    def extra_ldflags(self) -> list[str]:
        """Extra linker flags."""
        return []

    def isa(self) -> str | None:
        """The CPU ISA level compiled in, or None for builders without one."""
        return None

    def extra_key_inputs(self) -> dict[str, Any]:
        """Backend-specific key inputs (e.g. the nvcc identity and GPU arch list). Must not spawn processes."""
        return {}

    def functions(self) -> list[str]:
        """The torch op names the library registers in its namespace (the spec build's functions; empty for a
        hand-written builder that does not override this, whose library is then not checked after loading)."""
        if self.SPEC is None or self.BUILD is None:
            return []
        return [fn.name for fn in self.SPEC.functions_of(self.BUILD)]

    def expected_schemas(self, namespace: str) -> dict[str, str]:
        """The full schema each function must have been registered with in ``namespace`` (spec builds only)."""
        if self.SPEC is None or self.BUILD is None:
            return {}
        return {fn.name: f"{namespace}::{fn.full_schema}" for fn in self.SPEC.functions_of(self.BUILD)}

    def variant_label(self) -> str:
        """What tells this build of the op from its others, for progress and logs (the ISA level; "" if none)."""
        return self.isa() or ""

    def verify_functions(self, namespace: str) -> str:
        """Check that a loaded library registered ``namespace`` with every function of
        [`functions`][anyaccel.op_builder.core.hooks.BuilderHooks.functions], each
        with the spec's schema (`verify_functions`).

        Returns:
            "" when it did; else what is missing or different, in words.
        """
        return registration.verify_functions(namespace, self.functions(), self.expected_schemas(namespace))

    def schema_header(self) -> str:
        """The generated schema header the sources include as ``anyaccel_op.h`` ("" without a spec)."""
        if self.SPEC is None or self.BUILD is None:
            return ""
        return schema.generate(self.SPEC, self.BUILD)

    def generated_headers(self) -> dict[str, str]:
        """Every header generated from the spec, by file name (``anyaccel_op.h``, ``anyaccel_dtypes.h``);
        empty without a spec. Written into the build's private include directory; part of the key."""
        if self.SPEC is None or self.BUILD is None:
            return {}
        return {schema.HEADER_NAME: self.schema_header(),
                schema.DTYPES_HEADER_NAME: schema.generate_dtypes(self.SPEC, self.BUILD)}

    def write_generated_headers(self, gen_dir: Path) -> None:
        """Write [`generated_headers`][anyaccel.op_builder.core.hooks.BuilderHooks.generated_headers] into
        ``gen_dir``."""
        for name, text in self.generated_headers().items():
            (gen_dir / name).write_text(text)

    def register_fakes(self, namespace: str) -> None:
        """Register the spec's validating fake of every function in ``namespace`` (for ``torch.compile``,
        ``opcheck`` and meta tensors) and the fallback kernel explaining calls no native kernel takes
        (`registration`); a hand-written builder overrides this.

        Side effects: registers with the torch dispatcher.
        """
        if self.SPEC is None or self.BUILD is None:
            return
        functions = self.SPEC.functions_of(self.BUILD)
        registration.register_fakes(namespace, functions, self.DEVICE_TYPE)
        registration.register_fallbacks(namespace, functions, self.DEVICE_TYPE)

    def _variant_or_empty(self) -> str:
        """[`variant_label`][anyaccel.op_builder.core.hooks.BuilderHooks.variant_label], or "" when it cannot be told (a
        bad ``ANYACCEL_CPU_ISA``)."""
        try:
            return self.variant_label()
        except OpBuilderError:
            return ""

    # ----- key --------------------------------------------------------------------------------------------
    def _files_in_key(self) -> list[Path]:
        """The sources, every header under [`include_paths`][anyaccel.op_builder.core.hooks.BuilderHooks.include_paths],
        and the headers beside the sources (a
        ``"cpu_adam.h"`` included by ``cpu_adam.cpp`` changes the binary as much as the source does)."""
        root = self.source_root()
        files = [root / s for s in self.sources()]
        for inc in self.include_paths():
            files.extend(p for p in (root / inc).rglob("*") if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        for src_dir in sorted({f.parent for f in files[:len(self.sources())]}):
            files.extend(p for p in src_dir.iterdir() if p.suffix in self.HEADER_SUFFIXES and p.is_file())
        return files

    def key_inputs(self) -> dict[str, Any]:
        """Every input that changes the binary (see `anyaccel.op_builder.core.manifest`). Spawns no process.

        The torch version is not an input: the sources use only the stable ABI, so the stable-ABI target
        (``abi_target``) stands for torch; ``built_with_torch`` is recorded for the report but ignored when
        matching (a build-host field).

        Raises:
            OSError: a source file is missing.
            ISAError: ``ANYACCEL_CPU_ISA`` is invalid or unsupported (CPU builders).
            TorchABIError: ``ANYACCEL_TORCH_TARGET`` is invalid.
        """
        try:
            cxx = find_cxx()
        except ToolchainError:
            cxx = None
        headers = self.generated_headers()
        return {
            "op": self.NAME,
            "backend": self.BACKEND,
            "package_version": __version__,
            "files": mf.hash_files(self._files_in_key(), self.source_root()),
            "schema_header": mf.hash_text("".join(headers[k] for k in sorted(headers))) if headers else None,
            "include_paths": list(self.include_paths()),
            "cxx_args": self.cxx_args(),
            "source_cxx_args": {src: self.source_cxx_args(src) for src in self.sources() if self.source_cxx_args(src)},
            "nvcc_args": self.nvcc_args(),
            "ldflags": self.extra_ldflags(),
            ABI_TARGET_FIELD: torch_abi.format_version(torch_abi.target()),
            "built_with_torch": torch_version(),
            "platform": f"{sys.platform}-{platform.machine()}",
            "compiler": file_identity(cxx) if cxx else None,
            "isa": self.isa(),
            **self.extra_key_inputs(),
        }

    def namespace(self, key: str) -> str:
        """The torch op namespace of a build: ``anyaccel_<NAME>_<key[:10]>``."""
        return f"anyaccel_{self.NAME}_{key[:10]}"

