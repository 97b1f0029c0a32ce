"""The op-builder layer: op specs -> cached, crash-safe stable-ABI builds -> loaded torch ops.

Grouped by the question a reader asks:

- ``core/``: the load path (``OpBuilder``), cache, locks, manifest, errors, the loaded ``OpModule``;
- ``toolchains/``: compilers, ninja, the CPU ISA level, CUDA/SYCL toolkits, torch's stable ABI and the
  schema header generated from the op specs;
- ``backends/``: one base per backend (CPU, CUDA, SYCL, NPU), mostly data;
- ``cli/``: ``anyaccel build`` / ``anyaccel cache`` and the AOT (install-time) builds;
- ``builders``: the builder class of each native build of the op specs, generated and checked in
  (``class CPUAdamBuilder(TorchCPUOpBuilder):``; ``scripts/gen_builders.py``);
- ``classes``: which of those classes a build name gives (which class answers a builder name on an
  accelerator is the op registry's view, [`anyaccel.ops.registry`][anyaccel.ops.registry]).

Importing this package is cheap: ``builders`` is imported on first attribute access, DeepSpeed-style
(``from anyaccel.op_builder import CPUAdamBuilder``). See docs/op_builders.md.
"""

from __future__ import annotations

from typing import Any

from anyaccel.lazy_exports import lazy_exports

_CORE = {
    "OpBuilder": "anyaccel.op_builder.core.builder:OpBuilder",
    "OpModule": "anyaccel.op_builder.core.module:OpModule",
    "TorchCPUOpBuilder": "anyaccel.op_builder.backends.cpu:TorchCPUOpBuilder",
    "CUDAOpBuilder": "anyaccel.op_builder.backends.cuda:CUDAOpBuilder",
    "SYCLOpBuilder": "anyaccel.op_builder.backends.sycl:SYCLOpBuilder",
    "NPUOpBuilder": "anyaccel.op_builder.backends.npu:NPUOpBuilder",
    "builder_class": "anyaccel.op_builder.classes:builder_class",
    "BuildError": "anyaccel.op_builder.errors:BuildError",
    "OpBuilderError": "anyaccel.op_builder.errors:OpBuilderError",
}


def _builder_class(name: str) -> Any:
    """A builder class by its DeepSpeed name, made from the op specs (the host row, else CUDA's); not stored.

    This is the op-builder layer's own view (specs only): a row replaced through
    [`anyaccel.ops.registry.register`][anyaccel.ops.registry.register] is seen through ``create_op_builder`` and the
    registry.

    Raises:
        AttributeError: ``name`` is no known builder.
    """
    if name.endswith("Builder"):
        from anyaccel.op_builder.classes import spec_builder_class

        cls = spec_builder_class(name)
        if cls is not None:
            return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _builder_names() -> list[str]:
    from anyaccel.op_builder.classes import spec_rows

    return list(spec_rows())


__getattr__, __dir__ = lazy_exports(__name__, _CORE, fallback=_builder_class, more_names=_builder_names,
                                    dir_lists_globals=False)
