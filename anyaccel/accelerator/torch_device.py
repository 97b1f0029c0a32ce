"""``TorchDeviceAccelerator``: the base of every built-in accelerator whose runtime is a torch device module.

The runtime members are written once, in [`DeepSpeedAccelerator`][anyaccel.accelerator.abstract.DeepSpeedAccelerator],
forwarding to ``torch.get_device_module(device_type)``. This class adds what the built-ins share on top of
that: DeepSpeed's private attributes set in ``__init__``, availability from the device module, and the
communication backend from data. Concrete classes (``cuda.py``, ``xpu.py``...) only hold their differences.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import ClassVar

from typing_extensions import override

from anyaccel.accelerator.abstract import DeepSpeedAccelerator
from anyaccel.accelerator.device_module import optional_attribute
from anyaccel.accelerator.registry import ProbeResult

logger = logging.getLogger(__name__)

__all__ = ["TorchDeviceAccelerator", "package_installed"]


def package_installed(name: str) -> bool:
    """True when the top-level package ``name`` can be imported, found without importing it.

    Side effects: none beyond a ``sys.path`` scan (``importlib.util.find_spec``).
    """
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class TorchDeviceAccelerator(DeepSpeedAccelerator):
    """An accelerator served by ``torch.<device_type>``; subclasses set the class attributes.

    Attributes:
        accelerator_priority: probe order in selection (see ``registry._BUILTINS``).
        _communication_backend: the ``torch.distributed`` backend name used when no alternative applies.
        _ccl_package: a package whose presence switches the backend to ``"ccl"`` (oneCCL bindings), or None.
    """

    accelerator_priority: ClassVar[int] = 0
    _communication_backend: ClassVar[str] = "gloo"
    _ccl_package: ClassVar[str | None] = None

    def __init__(self) -> None:
        """Set DeepSpeed's private attributes; does not touch the device.

        Side effects: reads whether ``_ccl_package`` is installed (``find_spec``, no import).
        """
        self._name = type(self)._name
        self._compile_backend = "inductor"
        use_ccl = self._ccl_package is not None and package_installed(self._ccl_package)
        self._communication_backend_name = "ccl" if use_ccl else self._communication_backend

    @override
    def is_available(self) -> bool:
        """True when ``torch.<type>.is_available()`` and at least one device is visible."""
        available = optional_attribute(self.device_type, "is_available")
        return bool(available is not None and available() and self.device_count() > 0)

    @override
    def communication_backend_name(self) -> str:
        """The ``torch.distributed`` backend: ``"ccl"`` when ``_ccl_package`` is installed, else the default."""
        return str(getattr(self, "_communication_backend_name", None) or self._communication_backend)

    @classmethod
    def probe(cls) -> ProbeResult:
        """Cheap availability check used by selection; subclasses override it.

        Returns:
            A [`ProbeResult`][anyaccel.accelerator.torch_device.ProbeResult]; this default reports the device module's
            ``is_available()``.
        """
        device_type = cls._device_type or str(cls._name)
        available = optional_attribute(device_type, "is_available")
        if available is None:
            return ProbeResult(False, f"torch has no torch.{device_type} module")
        if available():
            return ProbeResult(True, f"torch.{device_type}.is_available() is True", stack_present=True)
        return ProbeResult(False, f"torch.{device_type}.is_available() is False")
