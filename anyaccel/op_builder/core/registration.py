"""What a loaded op library registers with torch, checked, and the Python registrations added beside it.

After ``torch.ops.load_library`` the builder checks that the library defined the namespace and every function
of its spec with the spec's schema (`verify_functions`), then registers the spec's validating fakes
(`register_fakes`) and a fallback kernel that explains calls no native kernel takes
(`register_fallbacks`).

``torch.library.register_fake`` records where it was called from (file and line, for its duplicate-registration
message) with ``inspect.getframeinfo`` and ``inspect.getmodule``. When the calling module was imported after
the last time anything in the process asked ``inspect`` for a module, ``getmodule`` scans every module in
``sys.modules`` (about 60 us each for modules it has not mapped yet, through torch.package's ``getfile``), about
3 ms of a 6 ms warm ``load()`` in a fresh process. `register_fakes` first records this module's own file
in ``inspect.modulesbyfile``, the table that scan fills, with the entry the scan would make, so the lookup finds
it directly; torch's recorded source is unchanged (this file and line). See ``benchmarks/warm_load.py``.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anyaccel.spec import Function

#: The torch.library handles of the fallback kernels (a dropped handle would unregister them).
_FALLBACK_LIBRARIES: list[Any] = []


def verify_functions(namespace: str, functions: Sequence[str], expected_schemas: dict[str, str]) -> str:
    """Check that a loaded library registered ``namespace`` with ``functions``, each with its expected schema.

    Args:
        namespace: the torch op namespace of the build, e.g. ``"anyaccel_cpu_adam_0123456789"``.
        functions: the function names the library must define.
        expected_schemas: function name -> full schema (``"<namespace>::<name>(...) -> ..."``); names missing
            from it are only checked for presence.

    Returns:
        "" when it did; else what is missing or different, in words.

    Side effects: resolves the ops through ``torch.ops`` (cached by torch).
    """
    import torch

    from anyaccel._compat import dispatcher

    ns = getattr(torch.ops, namespace)
    missing = [name for name in functions if not hasattr(ns, name)]
    if missing:
        return f"namespace {namespace} has no function {', '.join(missing)}"
    for name, expected in expected_schemas.items():
        registered = dispatcher.registered_schema(getattr(ns, name))
        if registered is not None and \
                dispatcher.canonical_schema(registered) != dispatcher.canonical_schema(expected):
            return f"{namespace}::{name} was registered as {registered}, not {expected}"
    return ""


def _map_this_module() -> None:
    """Record this module's file in ``inspect``'s file -> module table (what ``inspect.getmodule``'s scan of
    ``sys.modules`` would record for it), so ``register_fake``'s source lookup from here needs no scan.

    Nothing happens if ``inspect`` has no such table (another Python): the lookup then scans, as before.
    """
    table = getattr(inspect, "modulesbyfile", None)
    if isinstance(table, dict):
        table.setdefault(os.path.normcase(os.path.abspath(__file__)), __name__)


def register_fakes(namespace: str, functions: Sequence[Function], device_type: str) -> None:
    """Register each function's validating fake (its spec's ``fake``, bound to ``device_type``) in ``namespace``.

    Args:
        namespace: the torch op namespace the library defined.
        functions: the spec's functions of the build; those without a fake are skipped.
        device_type: the torch device type the build's kernels serve; the fakes check the tensors' device.

    Raises:
        RuntimeError: torch refused the registration (a fake is already registered for the function).

    Side effects: imports the fakes' modules; registers with the torch dispatcher.
    """
    import torch

    fakes = [(fn.name, fake) for fn in functions if (fake := fn.load_fake()) is not None]
    if not fakes:
        return
    _map_this_module()
    for name, fake in fakes:
        torch.library.register_fake(f"{namespace}::{name}")(functools.partial(fake, device_type))


def register_fallbacks(namespace: str, functions: Sequence[Function], device_type: str) -> None:
    """Register a CompositeExplicitAutograd kernel that explains a call no native kernel takes.

    The dispatcher picks a kernel from the call's tensors: a call whose tensor lists are all empty has none
    ("no tensor arguments"), and tensors of another device type find no kernel of this build. Both then
    reach this kernel, which raises a ``RuntimeError`` in the ops' own words. Calls the native kernels
    serve never reach it (a backend kernel wins over a composite one).

    Args:
        namespace: the torch op namespace the library defined.
        functions: the spec's functions of the build; those without tensor arguments get no fallback.
        device_type: the torch device type the build's kernels serve (named in the error).

    Side effects: registers with the torch dispatcher (the handle is kept alive in this module).
    """
    import torch

    library = torch.library.Library(namespace, "IMPL")
    for fn in functions:
        if any(a.type.startswith("Tensor") for a in fn.arguments):
            library.impl(fn.name, functools.partial(_no_kernel, fn.name, device_type), "CompositeExplicitAutograd")
    _FALLBACK_LIBRARIES.append(library)


def _no_kernel(op: str, device_type: str, *args: Any) -> None:
    """The fallback kernel of `register_fallbacks`: always raises.

    Raises:
        RuntimeError: ``"<op>: every tensor list is empty ..."`` or ``"<op>: this build runs on <type> tensors;
            got tensors on <devices> ..."``.
    """
    import torch

    tensors = [t for a in args for t in (a if isinstance(a, (list, tuple)) else (a,)) if isinstance(t, torch.Tensor)]
    if not tensors:
        raise RuntimeError(f"{op}: every tensor list is empty; pass at least one parameter (anyaccel's optimizers "
                           "skip a step that has nothing to update)")
    devices = ", ".join(sorted({str(t.device) for t in tensors}))
    raise RuntimeError(f"{op}: this build runs on {device_type} tensors, got tensors on {devices}; load the "
                       f"implementation for their device (anyaccel.ops.dispatch.load(family, device_type)) or "
                       "move the tensors")
