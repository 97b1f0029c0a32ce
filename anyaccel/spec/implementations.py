"""Implementations: the declared ways to run an op family on some device types, for the priority loader."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Implementation:
    """One implementation of an op family on some device types, for the priority loader.

    Attributes:
        name: unique within the family (``"cuda"``, ``"triton"``, ``"cpu"``, ``"sycl"``, ``"npu"``).
        priority: higher wins among the available ones.
        device_types: torch device types it runs on.
        build: the `NativeBuild.name` whose builder loads it (probe: the builder's ``compatibility()``).
        module: for Python-level implementations (Triton), ``"module:load"`` returning the op module.
        requires: Python packages that must be importable (checked with ``find_spec``, never imported).
        probe: ``"module:function"`` of a further cheap availability check returning ``(available, reason)``
            (e.g. "the Triton interpreter is switched on"), run after ``requires``; None for none.
        description: one line for ``anyaccel report``.

    ``device_types`` may be ``("*",)``: every device type (portable torch implementations).
    """

    name: str
    priority: int
    device_types: tuple[str, ...]
    build: str | None = None
    module: str | None = None
    requires: tuple[str, ...] = ()
    probe: str | None = None
    description: str = ""


