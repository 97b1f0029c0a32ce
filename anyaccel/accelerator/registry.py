"""The registry of accelerators: built-ins, programmatic registrations and entry-point plug-ins.

Selection is data, not an if/elif ladder: each accelerator is an
[`AcceleratorSpec`][anyaccel.accelerator.registry.AcceleratorSpec] (name, how to
build it, a cheap probe, a priority, where it came from). Third-party packages add theirs through the
entry-point group [`ENTRY_POINT_GROUP`][anyaccel.accelerator.registry.ENTRY_POINT_GROUP] (see ``docs/plugins.md``); the
entry point's name is the
accelerator's name and its object is an accelerator class (or a zero-argument factory returning an
accelerator instance). Modelled on Lightning's accelerator registry (errors list the valid names) and
HF accelerate's lazy availability checks.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "ENTRY_POINT_GROUP",
    "DEFAULT_PLUGIN_PRIORITY",
    "ProbeResult",
    "AcceleratorSpec",
    "register_accelerator",
    "unregister_accelerator",
    "builtin_specs",
    "entry_point_specs",
    "all_accelerator_specs",
]

#: Entry-point group third-party accelerators register under (``[project.entry-points."anyaccel.accelerators"]``).
ENTRY_POINT_GROUP = "anyaccel.accelerators"

#: Priority of a plug-in that declares none (``accelerator_priority`` class attribute): above every
#: built-in, because installing a device plug-in says the user wants that device when it is present.
DEFAULT_PLUGIN_PRIORITY = 500


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """The outcome of a cheap availability probe.

    Attributes:
        available: a device of this kind is present and usable by this process.
        reason: one human sentence explaining the result (shown by ``explain()`` and ``anyaccel report``).
        stack_present: the software stack is installed (e.g. a CUDA build of torch, ``torch_npu``) even
            though no device is usable; ``available=False`` with this True is the "installed but unusable"
            case that is warned about once and is an error under ``ANYACCEL_STRICT=1``.
    """

    available: bool
    reason: str
    stack_present: bool = False


@dataclasses.dataclass
class AcceleratorSpec:
    """One selectable accelerator.

    Attributes:
        name: the accelerator's name, as ``ANYACCEL_ACCELERATOR`` spells it.
        load: zero-argument callable returning the accelerator class or a factory of instances.
        priority: larger is probed first. Built-ins: cuda 400, xpu 300, npu 200, mps 100, cpu 0.
        source: ``"builtin"``, ``"entry-point"`` or ``"registered"``.
        description: one line for reports.
        probe: zero-argument callable returning a [`ProbeResult`][anyaccel.accelerator.registry.ProbeResult]; None means
            "instantiate and call
            ``is_available()``".
    """

    name: str
    load: Callable[[], Any]
    priority: int
    source: str
    description: str = ""
    probe: Callable[[], ProbeResult] | None = None

    def run_probe(self) -> ProbeResult:
        """Probe availability; never raises: a failure becomes an unavailable result naming the error.

        Side effects: may import the accelerator's module (and, for an installed vendor stack, its
        package); never initialises a device context except through the plug-in's own ``is_available``.
        """
        try:
            if self.probe is not None:
                return self.probe()
            factory = self.load()
            class_probe = getattr(factory, "probe", None)
            if isinstance(factory, type) and callable(class_probe):
                result = class_probe()
                if isinstance(result, ProbeResult):
                    return result
            instance = factory()
            available = bool(instance.is_available())
            return ProbeResult(available, "is_available() returned " + str(available), stack_present=True)
        except Exception as exc:  # a broken plug-in must not break selection of the others
            logger.debug("probe of accelerator %r failed", self.name, exc_info=True)
            return ProbeResult(False, f"probe failed: {type(exc).__name__}: {exc}", stack_present=True)


def _import_path(path: str) -> Callable[[], Any]:
    """A loader for ``"package.module:attribute"``, importing on first call."""

    def load() -> Any:
        module_name, _, attribute = path.partition(":")
        return getattr(importlib.import_module(module_name), attribute)

    return load


def _class_probe(path: str) -> Callable[[], ProbeResult]:
    """A probe calling the ``probe()`` classmethod of the class at ``path``."""

    def probe() -> ProbeResult:
        return _import_path(path)().probe()

    return probe


# name -> (import path, priority, description). Adding a built-in device is one row here.
_BUILTINS: dict[str, tuple] = {
    "cuda": ("anyaccel.accelerator.cuda:CUDA_Accelerator", 400, "NVIDIA CUDA, or AMD ROCm through torch's HIP build"),
    "xpu": ("anyaccel.accelerator.xpu:XPU_Accelerator", 300, "Intel GPU through torch.xpu (IPEX optional)"),
    "npu": ("anyaccel.accelerator.npu:NPU_Accelerator", 200, "Huawei Ascend through torch_npu"),
    "mps": ("anyaccel.accelerator.mps:MPS_Accelerator", 100, "Apple silicon through torch.mps"),
    "cpu": ("anyaccel.accelerator.cpu:CPU_Accelerator", 0, "the host CPU (always available)"),
}

_registered: dict[str, AcceleratorSpec] = {}


def builtin_specs() -> list[AcceleratorSpec]:
    """Specs of the five built-in accelerators (cheap: imports nothing)."""
    return [
        AcceleratorSpec(name, _import_path(path), priority, "builtin", description, _class_probe(path))
        for name, (path, priority, description) in _BUILTINS.items()
    ]


def register_accelerator(
    name: str,
    factory: Callable[[], Any],
    *,
    priority: int = DEFAULT_PLUGIN_PRIORITY,
    description: str = "",
    probe: Callable[[], ProbeResult] | None = None,
    override: bool = False,
) -> AcceleratorSpec:
    """Register an accelerator programmatically (the in-process twin of an entry point).

    Args:
        name: the accelerator's name; selectable through ``ANYACCEL_ACCELERATOR=<name>``.
        factory: an accelerator class or a zero-argument callable returning an accelerator instance.
        priority: probe order (larger first); see `DEFAULT_PLUGIN_PRIORITY`.
        description: one line for reports.
        probe: optional cheap availability probe; by default the instance's ``is_available()``.
        override: allow replacing an existing registration or a built-in of the same name.

    Returns:
        The spec that was registered.

    Raises:
        ValueError: ``name`` is already registered (or built in) and ``override`` is False.

    Side effects: the choice cached by ``get_accelerator()`` is not changed; call
    ``anyaccel.accelerator.reset_accelerator()`` to select again.
    """
    if not override and (name in _registered or name in _BUILTINS):
        raise ValueError(
            f"accelerator {name!r} is already registered; pass override=True to replace it, or pick "
            f"another name (taken: {', '.join(sorted(set(_registered) | set(_BUILTINS)))})"
        )
    spec = AcceleratorSpec(name, lambda: factory, priority, "registered", description, probe)
    _registered[name] = spec
    return spec


def unregister_accelerator(name: str) -> None:
    """Remove a programmatic registration; unknown names are ignored."""
    _registered.pop(name, None)


def entry_point_specs() -> list[AcceleratorSpec]:
    """Specs of the accelerators installed packages declare under
    [`ENTRY_POINT_GROUP`][anyaccel.accelerator.registry.ENTRY_POINT_GROUP].

    Reads installed distributions' metadata and imports each plug-in's module to read its priority (class
    attribute ``accelerator_priority``). Called only when selection must probe, never at ``import anyaccel``.
    """
    from importlib import metadata

    try:
        found = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10: entry_points() returns a dict
        found = metadata.entry_points().get(ENTRY_POINT_GROUP, [])  # type: ignore[arg-type]
    specs = []
    for entry_point in found:
        specs.append(_entry_point_spec(entry_point))
    return specs


def _entry_point_spec(entry_point: Any) -> AcceleratorSpec:
    """Build the spec of one entry point; loading errors surface in its probe, not here."""
    loaded: dict[str, Any] = {}

    def load() -> Any:
        if "value" not in loaded:
            loaded["value"] = entry_point.load()
        return loaded["value"]

    priority = DEFAULT_PLUGIN_PRIORITY
    try:
        priority = int(getattr(load(), "accelerator_priority", DEFAULT_PLUGIN_PRIORITY))
    except Exception as exc:  # reported by the probe; a broken plug-in must not break the others
        logger.warning("could not load accelerator entry point %s = %s: %s", entry_point.name, entry_point.value, exc)
    dist = getattr(getattr(entry_point, "dist", None), "name", None)
    description = f"plug-in {entry_point.value}" + (f" from {dist}" if dist else "")
    return AcceleratorSpec(entry_point.name, load, priority, "entry-point", description, None)


def all_accelerator_specs(include_entry_points: bool = True) -> list[AcceleratorSpec]:
    """Every known spec, highest priority first; later sources replace earlier ones of the same name.

    Order of precedence for a name: built-in < entry point < programmatic registration.
    """
    by_name: dict[str, AcceleratorSpec] = {spec.name: spec for spec in builtin_specs()}
    if include_entry_points:
        for spec in entry_point_specs():
            if spec.name in by_name:
                logger.info("accelerator plug-in %r replaces the %s one", spec.name, by_name[spec.name].source)
            by_name[spec.name] = spec
    by_name.update(_registered)
    return sorted(by_name.values(), key=lambda spec: (-spec.priority, spec.name))
