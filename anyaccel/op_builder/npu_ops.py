"""The NPU builders of the fused optimizers: they delegate to torch_npu's kernels instead of compiling.

torch_npu already ships fused Ascend kernels for these optimizers (``npu_apply_adam_w``, and multi-tensor
``_foreach_*`` ops), so ``create_op_builder("FusedAdamBuilder")`` on an NPU returns a builder whose
:meth:`load` imports :mod:`anyaccel.ops.npu.adam` (``adam_step`` with the CUDA op's signature) rather than
building anything, as DeepSpeed's NPU ``FusedAdamBuilder`` returns a Python class. :data:`IMPLEMENTATIONS`
holds the rows these modules add to :mod:`anyaccel.op_builder.implementations` for the ``npu`` device type.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from anyaccel.op_builder.implementations import ImplementationRow, builder_loader, builder_probe
from anyaccel.op_builder.npu import VENDOR_PACKAGE, NPUOpBuilder, find_torch_npu

logger = logging.getLogger(__name__)

__all__ = ["NPUDelegatingBuilder", "NPUFusedAdamBuilder", "NPUFusedLionBuilder", "IMPLEMENTATIONS"]


class NPUDelegatingBuilder(NPUOpBuilder):
    """An NPU op served by a Python module over torch_npu's own kernels: nothing to compile.

    Attributes:
        MODULE: the module whose functions are the op's (``"anyaccel.ops.npu.adam"``).
    """

    MODULE: ClassVar[str] = ""

    def sources(self) -> list[str]:
        """None: the op is Python over torch_npu's kernels."""
        return []

    def compatibility(self) -> tuple[bool, str]:
        """Available when torch_npu is installed (found without importing it); no toolkit or compiler needed."""
        if find_torch_npu() is None:
            return False, f"{VENDOR_PACKAGE} is not installed"
        return True, ""

    def is_built(self) -> bool:
        """Always True: there is nothing to build."""
        return True

    def load(self, verbose: bool = False) -> ModuleType:
        """The Python module with the op's functions (e.g. ``adam_step``); compiles nothing.

        Raises:
            ImportError: torch_npu is not installed (the message names it).

        Side effects: imports :attr:`MODULE` (which imports torch_npu at its first call).
        """
        ok, reason = self.compatibility()
        if not ok:
            raise ImportError(f"op {self.NAME} on NPU needs {VENDOR_PACKAGE}: {reason}; install the torch_npu build "
                              f"matching torch")
        if verbose:
            logger.info("op %s on NPU: %s (torch_npu kernels, nothing to build)", self.NAME, self.MODULE)
        return importlib.import_module(self.MODULE)

    def jit_load(self, verbose: bool = False) -> ModuleType:
        """Same as :meth:`load`."""
        return self.load(verbose)

    def build_prebuilt(self, dest_root: Any, verbose: bool = False) -> Path:
        """Nothing to compile ahead of time: returns the Python module's file (what will serve the op).

        Raises:
            ImportError: the module cannot be found.
        """
        spec = importlib.util.find_spec(self.MODULE)
        if spec is None or spec.origin is None:
            raise ImportError(f"module {self.MODULE} of op {self.NAME} is missing from the package")
        logger.info("op %s on NPU delegates to torch_npu (%s); nothing to build", self.NAME, self.MODULE)
        return Path(spec.origin)


class NPUFusedAdamBuilder(NPUDelegatingBuilder):
    """``FusedAdamBuilder`` on NPU: ``adam_step`` over ``torch_npu.npu_apply_adam_w``."""

    NAME: ClassVar[str] = "fused_adam"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_FUSED_ADAM"
    MODULE: ClassVar[str] = "anyaccel.ops.npu.adam"


class NPUFusedLionBuilder(NPUDelegatingBuilder):
    """``FusedLionBuilder`` on NPU: ``lion_step`` over torch_npu's multi-tensor ``_foreach_*`` kernels."""

    NAME: ClassVar[str] = "fused_lion"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_FUSED_LION"
    MODULE: ClassVar[str] = "anyaccel.ops.npu.lion"


#: (op, implementation name, priority, device types, probe, loader, description), the shape of
#: :mod:`anyaccel.op_builder.implementations`' built-in table.
IMPLEMENTATIONS: tuple[ImplementationRow, ...] = (
    ("fused_adam", "npu", 20, ("npu",), builder_probe(NPUFusedAdamBuilder), builder_loader(NPUFusedAdamBuilder),
     "torch_npu.npu_apply_adam_w (Ascend ApplyAdamW), foreach for fp32 moments of 16-bit params"),
    ("fused_lion", "npu", 20, ("npu",), builder_probe(NPUFusedLionBuilder), builder_loader(NPUFusedLionBuilder),
     "torch _foreach_* ops (torch_npu multi-tensor kernels)"),
)
