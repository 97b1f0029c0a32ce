"""anyaccel: run PyTorch code unchanged on any accelerator, and build the native kernels it needs.

Importing this package is cheap: it imports nothing but its version until a public name is used. The names
below are loaded on first access (PEP 562, :mod:`anyaccel.lazy_exports`), so ``import anyaccel`` imports no
torch, and the ``anyaccel`` command can set up its warning filters before torch is imported (see
:mod:`anyaccel.cli`). Device detection happens on the first ``get_accelerator()`` call, never at import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anyaccel.lazy_exports import lazy_exports
from anyaccel.version import __version__

if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from anyaccel.accelerator import DeepSpeedAccelerator, get_accelerator, set_accelerator
    from anyaccel.engine import EnvironmentTable, destroy_distributed, init_distributed

#: public name -> the module defining it, imported on first access.
_EXPORTS = {
    "DeepSpeedAccelerator": "anyaccel.accelerator",
    "get_accelerator": "anyaccel.accelerator",
    "set_accelerator": "anyaccel.accelerator",
    "EnvironmentTable": "anyaccel.engine",
    "init_distributed": "anyaccel.engine",
    "destroy_distributed": "anyaccel.engine",
}

__all__ = [
    "__version__",
    "DeepSpeedAccelerator",
    "get_accelerator",
    "set_accelerator",
    "EnvironmentTable",
    "init_distributed",
    "destroy_distributed",
]
assert set(__all__) == {"__version__", *_EXPORTS}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=True)
