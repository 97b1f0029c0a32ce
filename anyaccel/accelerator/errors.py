"""Typed errors of the accelerator layer.

Every error names the bad value, what would have been accepted and how to fix it, so a user reading the
message alone knows what to do, without reading anyaccel's source or a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "ReconstructibleError",
    "AcceleratorError",
    "UnknownAcceleratorError",
    "AcceleratorUnavailableError",
    "UnsupportedOperationError",
    "InvalidAcceleratorError",
    "UnsupportedCompileBackendError",
    "NotHostDeviceError",
    "HostRegistrationError",
]


def _rebuild(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> BaseException:
    """Unpickle a `ReconstructibleError` by calling its constructor again."""
    return cls(*args, **kwargs)


class ReconstructibleError(Exception):
    """An exception whose constructor takes structured arguments and that still pickles.

    ``Exception`` pickles as ``cls(*self.args)``, and ``self.args`` is the formatted message once
    ``__init__`` calls ``super().__init__(message)``, so unpickling an error with a richer constructor fails:
    in a ``multiprocessing`` pool that kills the result thread and the caller waits forever (DeepSpeed's
    ``DistributedTest`` does). The constructor's own arguments are kept and used instead.
    """

    _init_args: tuple[Any, ...] = ()
    _init_kwargs: dict[str, Any] = {}  # replaced per instance in __new__

    def __new__(cls, *args: Any, **kwargs: Any) -> ReconstructibleError:
        self = super().__new__(cls, *args, **kwargs)
        self._init_args = args
        self._init_kwargs = kwargs
        return self

    def __reduce__(self) -> tuple[Callable[..., BaseException], tuple[Any, ...]]:
        return _rebuild, (type(self), self._init_args, self._init_kwargs)


class AcceleratorError(ReconstructibleError):
    """Base class of every error raised by ``anyaccel.accelerator``."""


class UnknownAcceleratorError(AcceleratorError, ValueError):
    """An override (environment variable or argument) names an accelerator nobody registered.

    Args:
        name: the unknown name as given.
        valid: the names that would have been accepted.
        source: where the name came from, e.g. ``"ANYACCEL_ACCELERATOR"``.
    """

    def __init__(self, name: str, valid: Iterable[str], source: str) -> None:
        self.name = name
        self.valid = sorted(valid)
        self.source = source
        super().__init__(
            f"{source}={name!r} names no known accelerator; valid names are {', '.join(self.valid)}. "
            f"Set {source} to one of them, or unset it to let anyaccel detect the device."
        )


class AcceleratorUnavailableError(AcceleratorError, RuntimeError):
    """An accelerator was requested (override or strict mode) but its device is not usable here.

    Args:
        name: the accelerator's name.
        reason: the probe's explanation of why it is unavailable.
        source: where the request came from (``"ANYACCEL_ACCELERATOR"``, ``"ANYACCEL_STRICT"``, ...).
        fix: what the user can do about it.
    """

    def __init__(self, name: str, reason: str, source: str, fix: str) -> None:
        self.name = name
        self.reason = reason
        self.source = source
        super().__init__(f"accelerator {name!r} requested by {source} is unavailable: {reason}. {fix}")


class UnsupportedOperationError(AcceleratorError, NotImplementedError):
    """The device's torch module lacks the runtime function a member needs.

    Args:
        accelerator: the accelerator's name, e.g. ``"xpu"``.
        member: the interface member that was called, e.g. ``"memory_stats"``.
        needed: the torch function it needs, e.g. ``"torch.xpu.memory_stats"``.
    """

    def __init__(self, accelerator: str, member: str, needed: str) -> None:
        self.accelerator = accelerator
        self.member = member
        self.needed = needed
        super().__init__(
            f"{member}() is not supported on accelerator {accelerator!r}: this torch build has no "
            f"{needed}. Upgrade torch, or guard the call with hasattr()/try on this accelerator."
        )


class InvalidAcceleratorError(AcceleratorError, TypeError):
    """``set_accelerator()`` or an entry point produced something that is not an accelerator.

    Args:
        value: the offending object.
        problem: what is wrong with it.
        fix: how to make it acceptable.
    """

    def __init__(self, value: object, problem: str, fix: str) -> None:
        self.value = value
        super().__init__(f"{value!r} is not a usable accelerator: {problem}. {fix}")


class UnsupportedCompileBackendError(AcceleratorError, ValueError):
    """``set_compile_backend()`` got a name ``torch._dynamo`` does not know.

    Args:
        backend: the rejected name.
        supported: the names ``torch._dynamo.list_backends(exclude_tags=())`` returned.
    """

    def __init__(self, backend: str, supported: Iterable[str]) -> None:
        self.backend = backend
        self.supported = sorted(supported)
        super().__init__(
            f"{backend!r} is not a supported torch.compile backend; supported: {', '.join(self.supported)}. "
            f"Pass one of these to set_compile_backend()."
        )


class NotHostDeviceError(AcceleratorError, ValueError):
    """``pin_empty``/``pin_empty_like`` was asked for pinned memory on a device other than the host.

    A ``ValueError``, as DeepSpeed raises for the same call (``abstract_accelerator._require_host_device``).

    Args:
        device: the device given.
    """

    def __init__(self, device: object) -> None:
        self.device = device
        super().__init__(
            f"pinned memory is host memory: device must be 'cpu', got {device!r}. "
            f"Pass device='cpu' (the default) and copy to the accelerator afterwards."
        )


class HostRegistrationError(AcceleratorError, RuntimeError):
    """The device runtime refused to register (or unregister) host memory.

    Args:
        accelerator: the accelerator's name.
        action: ``"register"`` or ``"unregister"``.
        address: the host address passed.
        code: the runtime's error code.
    """

    def __init__(self, accelerator: str, action: str, address: int, code: int) -> None:
        self.accelerator = accelerator
        self.action = action
        self.address = address
        self.code = code
        super().__init__(
            f"{accelerator}: host-memory {action} at address {address:#x} failed with runtime error code {code} "
            f"(0 means success). Check that the address is aligned to pin_memory_alignment(), that the range "
            f"is page-locked and not already registered, and the memlock limit (ulimit -l)."
        )
