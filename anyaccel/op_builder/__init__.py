"""The op-builder layer: sources -> cached, crash-safe builds -> loaded torch ops.

Importing this package is cheap: the builders and torch.utils.cpp_extension are imported on first use.
See docs/op_builders.md.
"""

from __future__ import annotations

import importlib
from typing import Any

from anyaccel.op_builder.errors import BuildError
from anyaccel.op_builder.registry import all_builder_names, get_builder_class

_LAZY = {
    "OpBuilder": "anyaccel.op_builder.builder",
    "OpModule": "anyaccel.op_builder.module",
    "TorchCPUOpBuilder": "anyaccel.op_builder.cpu",
    "CPUAdamBuilder": "anyaccel.op_builder.cpu_adam",
    "CPULionBuilder": "anyaccel.op_builder.cpu_lion",
}

__all__ = ["OpBuilder", "OpModule", "TorchCPUOpBuilder", "CPUAdamBuilder", "CPULionBuilder", "BuildError",
           "get_builder_class",
           "all_builder_names"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'anyaccel.op_builder' has no attribute {name!r}")
