"""anyaccel: run PyTorch code unchanged on any accelerator, and build the native kernels it needs.

Importing this package is cheap: it imports torch and nothing else heavy, probes no device, spawns no
process and runs no compiler. Device detection happens on the first ``get_accelerator()`` call.
"""

from anyaccel.version import __version__
from anyaccel.accelerator import DeepSpeedAccelerator, get_accelerator, set_accelerator

__all__ = ["__version__", "DeepSpeedAccelerator", "get_accelerator", "set_accelerator"]
