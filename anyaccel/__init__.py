"""anyaccel: run PyTorch code unchanged on any accelerator, and build the native kernels it needs.

Importing this package is cheap: it imports nothing but its version until a public name is used. The names
below are loaded on first access (PEP 562, `anyaccel.lazy_exports`), so ``import anyaccel`` imports no
torch, and the ``anyaccel`` command can set up its warning filters before torch is imported (see
`anyaccel.cli`). Device detection happens on the first ``get_accelerator()`` call, never at import.
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
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

#: torch's warning at import when numpy is not installed (a UserWarning from ``tensor_numpy.cpp``). anyaccel
#: uses no numpy, and on such a machine the first anyaccel call that imports torch (``get_accelerator()``, an
#: op's load) printed it to a user who never asked for numpy.
NUMPY_WARNING = r"Failed to initialize NumPy"


def _quiet_torch_without_numpy() -> None:
    """Ignore `NUMPY_WARNING` (that one message, UserWarning only) when numpy is not installed and torch
    is not imported yet; with numpy installed nothing is filtered (a broken numpy still warns).

    Side effects: may add one entry to this process's ``warnings`` filters; looks numpy up (``find_spec``, no
    import).
    """
    if "torch" in sys.modules:
        return  # torch has said what it had to say
    try:
        absent = importlib.util.find_spec("numpy") is None
    except (ImportError, ValueError):  # a finder that refuses numpy, or numpy set to None in sys.modules
        absent = True
    if absent:
        warnings.filterwarnings("ignore", message=NUMPY_WARNING, category=UserWarning)


_quiet_torch_without_numpy()
