"""anyaccel's op library: one package per op family (spec + front ends), plus the shared machinery.

- ``<family>/spec.py``: each family described once, in the vocabulary of [`anyaccel.spec`][anyaccel.spec];
- ``validation.py``: the checks shared by kernels, fakes and front ends;
- ``dispatch.py``: the implementation loader (priority, availability, forcing by name);
- ``adam/``, ``lion/``, ``lamb/``, ``adagrad/``: the optimizer families (``CPUAdam``, ``FusedAdam``, ``CPULion``,
  ``FusedLion``, ``FusedLamb``, ``CPUAdagrad``);
- ``registry.py``: the op registry (family -> builds and implementations) and its one hook, ``register``.

DeepSpeed's op-module ABI (``create_adam``, ``multi_tensor_adam``...) over these ops is the DeepSpeed
integration's ([`anyaccel.integrations.deepspeed.abi`][anyaccel.integrations.deepspeed.abi]).

Importing this package builds nothing and loads no native library; the optimizers are imported on first
attribute access and load their op on first use.
"""

from __future__ import annotations

from anyaccel.lazy_exports import lazy_exports

_EXPORTS = {
    "CPUAdam": "anyaccel.ops.adam.cpu:CPUAdam",
    "FusedAdam": "anyaccel.ops.adam.fused:FusedAdam",
    "CPULion": "anyaccel.ops.lion.cpu:CPULion",
    "FusedLion": "anyaccel.ops.lion.fused:FusedLion",
    "CPUAdagrad": "anyaccel.ops.adagrad.cpu:CPUAdagrad",
    "enable": "anyaccel.ops.override.mode:enable",
    "disable": "anyaccel.ops.override.mode:disable",
    "use_ops": "anyaccel.ops.override.mode:use_ops",
    "patch": "anyaccel.ops.nn.hf_patch:patch",
    "unpatch": "anyaccel.ops.nn.hf_patch:unpatch",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
