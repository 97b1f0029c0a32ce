"""The op-builder layer: op specs -> cached, crash-safe stable-ABI builds -> loaded torch ops.

Grouped by the question a reader asks:

- ``core/``: the load path (``OpBuilder``), cache, locks, manifest, errors, the loaded ``OpModule``;
- ``toolchains/``: compilers, ninja, the CPU ISA level, CUDA/SYCL toolkits, torch's stable ABI and the
  schema header generated from the op specs;
- ``backends/``: one base per backend (CPU, CUDA, SYCL, NPU), mostly data;
- ``cli/``: ``anyaccel build`` / ``anyaccel cache`` and the AOT (install-time) builds;
- ``classes``: the builder classes made from the op specs' native builds (which class answers a builder name
  on an accelerator is the op registry's view, :mod:`anyaccel.ops.registry`).

Importing this package is cheap: builder classes are made on first attribute access, DeepSpeed-style
(``from anyaccel.op_builder import CPUAdamBuilder``), from the op specs. See docs/op_builders.md.
"""

from __future__ import annotations

from typing import Any

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


def __getattr__(name: str) -> Any:
    """``OpBuilder`` & co, or a builder class by its DeepSpeed name (the host row, else CUDA's).

    Raises:
        AttributeError: neither a core name nor a known builder.
    """
    from anyaccel.spec import resolve

    if name in _CORE:
        return resolve(_CORE[name])
    if name.endswith("Builder"):
        from anyaccel.op_builder.classes import spec_builder_class

        cls = spec_builder_class(name)
        if cls is not None:
            return cls
    raise AttributeError(f"module 'anyaccel.op_builder' has no attribute {name!r}")


def __dir__() -> list[str]:
    from anyaccel.op_builder.classes import spec_rows

    return sorted(set(_CORE) | set(spec_rows()))
