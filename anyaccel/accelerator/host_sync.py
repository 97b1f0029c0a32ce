"""Host-side ``Stream`` and ``Event`` classes for devices whose torch module has none (CPU, MPS).

Code written for CUDA creates streams and timing events unconditionally (``acc.Stream()``,
``acc.Event(enable_timing=True)``, ``e.elapsed_time(f)``). On a device that executes in order, or whose
torch module exposes no stream API, these classes give that code working objects: a stream whose
``synchronize()`` waits for the device, and an event that time-stamps with the host clock when recorded.
DeepSpeed's CPU and MPS accelerators return ``None`` instead, which breaks such callers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["HostEvent", "HostStream", "host_stream_class", "host_event_class"]


def _no_wait() -> None:
    """Synchronisation hook of a device that is always synchronised (CPU)."""


class HostEvent:
    """A timing event recorded with the host clock after waiting for the device.

    Args:
        enable_timing: accepted for compatibility; timing is always available.
        blocking: accepted for compatibility; ignored.
        interprocess: accepted for compatibility; ignored.

    ``elapsed_time(end)`` returns milliseconds (float), as ``torch.cuda.Event.elapsed_time`` does.
    """

    _synchronize: Callable[[], None] = staticmethod(_no_wait)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time_s: float | None = None

    def record(self, stream: Any = None) -> None:
        """Wait for queued device work, then time-stamp (seconds, ``time.perf_counter``)."""
        type(self)._synchronize()
        self._time_s = time.perf_counter()

    def query(self) -> bool:
        """True: the work before the event is complete once ``record`` returned."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for: ``record`` already waited."""

    def wait(self, stream: Any = None) -> None:
        """Nothing to order: host streams execute in order."""

    def elapsed_time(self, end_event: HostEvent) -> float:
        """Milliseconds between this event's and ``end_event``'s records.

        Raises:
            RuntimeError: either event was never recorded.
        """
        if self._time_s is None or end_event._time_s is None:
            raise RuntimeError("elapsed_time() needs both events recorded; call record() on each first")
        return (end_event._time_s - self._time_s) * 1000.0


class HostStream:
    """A stream object for a device without streams: work runs in issue order.

    Args:
        device: accepted for compatibility; ignored.
        priority: accepted for compatibility; ignored.
        **kwargs: accepted for compatibility; ignored.
    """

    _synchronize: Callable[[], None] = staticmethod(_no_wait)
    _event_class: type = HostEvent

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.device = device
        self.priority = priority

    def synchronize(self) -> None:
        """Wait for all queued work on the device."""
        type(self)._synchronize()

    def query(self) -> bool:
        """True once the device is idle; always true after ``synchronize``."""
        return True

    def wait_stream(self, stream: Any) -> None:
        """Nothing to order: there is only one queue."""

    def wait_event(self, event: Any) -> None:
        """Nothing to order: there is only one queue."""

    def record_event(self, event: HostEvent | None = None) -> HostEvent:
        """Record ``event`` (a new one when None) and return it."""
        event = event if event is not None else self._event_class()
        event.record(self)
        return event

    def __enter__(self) -> HostStream:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_EVENT_CLASSES: dict[str, type] = {}
_STREAM_CLASSES: dict[str, type] = {}


def host_event_class(device_type: str, synchronize: Callable[[], None]) -> type:
    """Return (once per device type) a ``HostEvent`` subclass that waits with ``synchronize``.

    Args:
        device_type: a torch device type string, used in the class name (``"mps"`` -> ``MpsHostEvent``).
        synchronize: a zero-argument function waiting for the device (``torch.mps.synchronize``).
    """
    if device_type not in _EVENT_CLASSES:
        _EVENT_CLASSES[device_type] = type(
            f"{device_type.capitalize()}HostEvent", (HostEvent,), {"_synchronize": staticmethod(synchronize)}
        )
    return _EVENT_CLASSES[device_type]


def host_stream_class(device_type: str, synchronize: Callable[[], None]) -> type:
    """Return (once per device type) a ``HostStream`` subclass that waits with ``synchronize``.

    Args:
        device_type: a torch device type string, used in the class name.
        synchronize: a zero-argument function waiting for the device.
    """
    if device_type not in _STREAM_CLASSES:
        _STREAM_CLASSES[device_type] = type(
            f"{device_type.capitalize()}HostStream",
            (HostStream,),
            {
                "_synchronize": staticmethod(synchronize),
                "_event_class": host_event_class(device_type, synchronize),
            },
        )
    return _STREAM_CLASSES[device_type]
