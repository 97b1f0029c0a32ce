"""The DeepSpeed-facing view of anyaccel's chosen accelerator: the same object's state, DeepSpeed's contract.

DeepSpeed's ``get_accelerator()`` gets a *view* of anyaccel's accelerator: an instance of a generated
subclass of the accelerator's own class
([`DeepSpeedFacingAccelerator`][anyaccel.integrations.deepspeed.view.DeepSpeedFacingAccelerator] mixed in front) that
shares the
original instance's ``__dict__``, so every piece of state (compile backend, peak-memory gauges, plug-in
attributes) is one, while the few members whose DeepSpeed contract differs from anyaccel's own are
answered DeepSpeed's way:

- ``get_op_builder``/``create_op_builder``: DeepSpeed's placeholder instead of ``UnknownOpError`` for a
  builder anyaccel does not implement, and anyaccel's builders adapted to DeepSpeed's builder contract
  (`anyaccel.integrations.deepspeed.builders`); they still call anyaccel's own lookup first, which is
  ``anyaccel.ops.registry.get_builder_class(name, accelerator_name)``;
- ``op_builder_dir``: DeepSpeed's package for the device (``ds_report``'s ``all_ops`` iterates it);
- pinned memory: DeepSpeed's native backend (``DS_PIN_MEMORY_BACKEND=native``,
  ``deepspeed/utils/pin_memory.py``) and pinned-byte tracker (``utils/pin_memory_tracker.py``).

``anyaccel.get_accelerator()`` keeps returning the original object, whose API stays anyaccel's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from typing_extensions import override

from anyaccel.accelerator.abstract import DeepSpeedAccelerator
from anyaccel.integrations.deepspeed.builders import deepspeed_builder_class

__all__ = ["DEEPSPEED_OP_BUILDER_DIRS", "DeepSpeedFacingAccelerator", "deepspeed_view", "view_class"]

#: anyaccel accelerator name -> the package DeepSpeed 0.19.8's accelerator for that device returns from
#: ``op_builder_dir()`` (``deepspeed/accelerator/*_accelerator.py``); others get DeepSpeed's top level.
DEEPSPEED_OP_BUILDER_DIRS: dict[str, str] = {
    "cpu": "deepspeed.ops.op_builder.cpu",
    "cuda": "deepspeed.ops.op_builder",
    "xpu": "deepspeed.ops.op_builder.xpu",
    "npu": "deepspeed.ops.op_builder.npu",
    "mps": "deepspeed.ops.op_builder.mps",
}
_DEFAULT_OP_BUILDER_DIR = "deepspeed.ops.op_builder"

_lock = threading.Lock()
_view_classes: dict[type, type] = {}


class DeepSpeedFacingAccelerator(DeepSpeedAccelerator):
    """Mixin placed in front of an accelerator class for DeepSpeed (see the module doc). Never used alone."""

    @override
    def op_builder_dir(self) -> str:
        """DeepSpeed's op-builder package for this device (``"deepspeed.ops.op_builder.cpu"`` on CPU)."""
        return DEEPSPEED_OP_BUILDER_DIRS.get(str(self._name), _DEFAULT_OP_BUILDER_DIR)

    @override
    def get_op_builder(self, class_name: str) -> type:
        """The builder class DeepSpeed gets for ``class_name``: anyaccel's, adapted, or DeepSpeed's placeholder.

        Never raises for an unknown name and never returns None (see
        `anyaccel.integrations.deepspeed.builders.deepspeed_builder_class`).
        """
        from anyaccel.op_builder.errors import UnknownOpError

        try:
            anyaccel_class = super().get_op_builder(class_name)
        except UnknownOpError:
            anyaccel_class = None
        return deepspeed_builder_class(anyaccel_class, class_name, str(self._name))

    @override
    def create_op_builder(self, class_name: str) -> Any:
        """An instance of
        [`get_op_builder`][anyaccel.integrations.deepspeed.view.DeepSpeedFacingAccelerator.get_op_builder]'s class."""
        return self.get_op_builder(class_name)()

    @override
    def _native_pinned_memory(self) -> Any:
        """DeepSpeed's shared native pinned-memory manager when ``DS_PIN_MEMORY_BACKEND=native``, else None.

        DeepSpeed's manager loads its op through ``PinMemoryBuilder``, which is anyaccel's ``pin_memory`` build
        (its ``pin_handle``), so the regions are anyaccel's and DeepSpeed keeps its own bookkeeping.

        Raises:
            RuntimeError: (DeepSpeed's) native pinning is selected but the ``pin_memory`` op cannot load.
        """
        from deepspeed.utils.pin_memory import get_active_native_pinned_memory

        return get_active_native_pinned_memory()

    @override
    def _track_pinned_memory(self, num_bytes: int) -> None:
        """Count ``num_bytes`` in DeepSpeed's process-wide pinned-memory tracker, and in anyaccel's."""
        from deepspeed.utils.pin_memory_tracker import track_pinned_memory

        super()._track_pinned_memory(num_bytes)
        track_pinned_memory(num_bytes)

    @override
    def __repr__(self) -> str:
        return f"<{type(self).__name__} name={self._name!r} (DeepSpeed view of anyaccel's accelerator)>"

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        base = type(self).__mro__[2]  # [view class, DeepSpeedFacingAccelerator, the accelerator's class, ...]
        return _rebuild_view, (base, self.__dict__)


def _rebuild_view(accelerator_class: type, state: dict[str, Any]) -> DeepSpeedAccelerator:
    """Unpickle a view: a new accelerator of ``accelerator_class`` with ``state``, viewed for DeepSpeed."""
    accelerator: Any = object.__new__(accelerator_class)
    accelerator.__dict__.update(state)
    return deepspeed_view(accelerator)


def view_class(accelerator_class: type) -> type:
    """The DeepSpeed-facing subclass of ``accelerator_class`` (created once per class).

    Its ``__name__`` is the accelerator class's (DeepSpeed logs it), its MRO is
    ``[view, DeepSpeedFacingAccelerator, accelerator_class, ...]``.
    """
    with _lock:
        cls = _view_classes.get(accelerator_class)
        if cls is None:
            cls = type(accelerator_class.__name__, (DeepSpeedFacingAccelerator, accelerator_class), {
                "__module__": __name__,
                "__qualname__": accelerator_class.__name__,
                "__doc__": f"DeepSpeed's view of {accelerator_class.__module__}.{accelerator_class.__qualname__}.",
            })
            _view_classes[accelerator_class] = cls
    return cls


def deepspeed_view(accelerator: Any) -> Any:
    """The accelerator object to give DeepSpeed for anyaccel's ``accelerator``.

    Args:
        accelerator: anyaccel's accelerator (usually ``anyaccel.get_accelerator()``).

    Returns:
        A view sharing ``accelerator.__dict__`` (see the module doc); ``accelerator`` itself when it is
        already a view or is not an anyaccel accelerator (an instance of DeepSpeed's own classes given to
        ``anyaccel.set_accelerator``).
    """
    if isinstance(accelerator, DeepSpeedFacingAccelerator) or not isinstance(accelerator, DeepSpeedAccelerator):
        return accelerator
    cls = view_class(type(accelerator))
    view: Any = object.__new__(cls)
    view.__dict__ = accelerator.__dict__
    return view


def viewed_accelerator_dict(view: Any) -> dict[str, Any] | None:
    """The shared state dict of a view (None for other objects); two views of one accelerator share it."""
    return view.__dict__ if isinstance(view, DeepSpeedFacingAccelerator) else None
