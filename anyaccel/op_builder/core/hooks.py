"""The package constants an op build's key is made from: the package directory and the ABI-target field.

The build as data and the hooks a backend overrides are methods of
[`OpBuilder`][anyaccel.op_builder.core.builder.OpBuilder] (its "key" section).
"""

from __future__ import annotations

from pathlib import Path

#: anyaccel's package directory (the root of its own ops' sources).
PACKAGE_DIR = Path(__file__).resolve().parent.parent.parent
#: Manifest input fields compared by "not newer than" instead of equality.
ABI_TARGET_FIELD = "abi_target"


def torch_version() -> str:
    """The running torch's version string (imports torch)."""
    import torch

    return str(torch.__version__)
