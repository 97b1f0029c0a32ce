"""``OpBuilder``: DeepSpeed's op-builder vocabulary on a crash-safe, content-addressed load path.

The class is assembled from one module per concern, each a base of the next:

- `hooks`: the build as data (sources, flags, functions, the spec) and the
  hooks a backend overrides, and the cache key derived from them;
- `registration`: what a loaded library must have registered with torch, and
  the fakes and fallback kernels registered beside it;
- `compiling`: the toolchain hooks, the ninja build, the atomic publication and
  ahead-of-time builds;
- `loading`: the load path (in-process table, prebuilt artifacts, the cache,
  quarantine of damaged entries).

Backends (``backends/``: ``TorchCPUOpBuilder``, ``CUDAOpBuilder``, ``SYCLOpBuilder``, ``NPUOpBuilder``)
subclass [`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder] and override the hooks.
"""

from __future__ import annotations

from anyaccel.op_builder.core.loading import LoadingBuilder

__all__ = ["OpBuilder"]


class OpBuilder(LoadingBuilder):
    """Base of every op builder (DeepSpeed's ``OpBuilder`` vocabulary).

    Builders of anyaccel's own ops are made from op specs (`anyaccel.op_builder.registry.builder_class`),
    which set ``SPEC`` and ``BUILD``; a hand-written builder sets ``NAME``/``BUILD_VAR`` and overrides
    ``sources()`` and ``functions()`` instead. The class attributes and hooks are described in
    `BuilderHooks`; [`load`][anyaccel.op_builder.core.builder.OpBuilder.load] is the entry point.
    """
