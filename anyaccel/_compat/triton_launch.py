"""A faster eager launch of ``@triton.jit`` kernels: Triton's own launcher, called with the compiled kernel
this module cached for the call's specialization.

``kernel[grid](*args)`` runs ``JITFunction.run`` (Triton 3.x, ``triton/runtime/jit.py``), which per launch
reads several knobs, binds and specializes the arguments, turns the options into a string for its cache
key, checks the kernel's globals, builds a launch-metadata dictionary for the launch hooks and calls two
(usually empty) hook chains around the launch. For a model op that launches one or two kernels of twenty
to thirty arguments, that is a large part of an eager call's host time (the GPU idles while the host
works at small and medium shapes). FlagGems's ``libentry`` answers the same problem the same way.

Private Triton internals used: ``JITFunction.device_caches`` (the binder), ``JITFunction.used_global_vals``,
``JITFunction.pre_run_hooks``, ``knobs.runtime.launch_enter_hook``/``launch_exit_hook``/
``add_stages_inspection_hook`` and ``CompiledKernel.run``/``function``/``packed_metadata``. The members are
checked once per kernel. Tested with Triton 3.6.0 (torch 2.10.0 on the CPU, torch 2.11.0 launching on an
H100/H200) and Triton 3.9.0 (torch 2.13.0 and 2.15.0 on the CPU); where a member is missing every launch is
the public ``kernel[grid](...)``.

[`FastLaunch`][anyaccel._compat.triton_launch.FastLaunch] keeps, per device and per specialization, the
``CompiledKernel`` that ``JITFunction.run`` returned, and launches it directly:

- the specialization is Triton's own: the kernel's binder (``JITFunction.device_caches[device]``,
  ``create_function_from_signature``) classifies each argument exactly as ``run`` does (dtype, 16-byte
  alignment of pointers, integers equal to 1 or divisible by 16, constexpr values), so a cached kernel is
  only reused where ``run`` would pick the same one;
- the launch is Triton's: ``CompiledKernel.run`` (the generated C launcher) with the grid, the current
  stream, the kernel's function handle and packed metadata, and every bound argument.

Everything else falls back to ``JITFunction.run``, unchanged: the first call of a specialization (it
compiles or loads the kernel, and the result is cached here), launches while a launch hook (profilers such
as Proton add them), a pre-run hook or a stages-inspection hook (Triton 3.9's custom pass pipelines) is set,
a changed global the kernel reads (``run`` raises), an
interpreted kernel (``TRITON_INTERPRET=1``), and a Triton whose ``JITFunction`` lacks the members used here
(checked once per kernel). ``ANYACCEL_TRITON_FAST_LAUNCH=0`` (read at the first launch in the process) or
[`set_enabled`][anyaccel._compat.triton_launch.set_enabled] turns the fast path off.

Consequence: a compiled kernel is chosen per (device, specialization, launch options such as
``num_warps``) when first seen; Triton options read from the environment at compile time
(``TRITON_DEBUG``, instrumentation) apply to the kernels compiled after they are set, as in Triton, but a
change does not evict kernels this module already holds for that process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from anyaccel import settings

#: ``ANYACCEL_TRITON_FAST_LAUNCH``: "0" turns the fast path off (read once, at the first launch in the process).
ENV = settings.TRITON_FAST_LAUNCH.name

#: Specializations (over all devices) kept per kernel before the oldest is dropped (each is one compiled kernel
#: that Triton keeps anyway; this bounds only this module's table).
MAX_ENTRIES = 256

_LOCK = threading.Lock()

#: whether the fast path is on: None until the first launch reads ``ENV`` (or `set_enabled` sets it)
_enabled: bool | None = None


def set_enabled(flag: bool | None) -> None:
    """Turn the fast path on or off for the process (None: back to ``ANYACCEL_TRITON_FAST_LAUNCH``, read at the
    next launch). Off, every launch is Triton's ``kernel[grid](...)``; for A/B measurements and as an escape
    hatch."""
    global _enabled
    if flag is not None and not isinstance(flag, bool):
        raise TypeError(f"set_enabled: flag={flag!r}; accepted: True, False or None (back to {ENV})")
    _enabled = flag


def enabled() -> bool:
    """Whether launches take the fast path (reads ``ANYACCEL_TRITON_FAST_LAUNCH`` once)."""
    global _enabled
    if _enabled is None:
        _enabled = settings.TRITON_FAST_LAUNCH.get()
    return _enabled


class FastLaunch:
    """``FastLaunch(kernel)[grid](*args, **kwargs)``: launch a ``triton.jit`` kernel as ``kernel[grid](...)``
    does, with less host work once the specialization has been launched before (see the module docstring).

    Args:
        kernel: a ``triton.runtime.jit.JITFunction``.

    Raises:
        TypeError: ``kernel`` is not a Triton kernel (no ``run`` or ``[grid]`` launch).

    At launch it raises whatever ``JITFunction.run`` raises for the same call (compilation errors, out of
    resources, a changed global); the fast path itself raises nothing of its own.
    """

    __slots__ = ("kernel", "_table", "_triton")

    def __init__(self, kernel: Any) -> None:
        if not (callable(getattr(kernel, "run", None)) and hasattr(type(kernel), "__getitem__")):
            raise TypeError(f"FastLaunch: {kernel!r} is not a Triton kernel; accepted: a @triton.jit function "
                            "(triton.runtime.jit.JITFunction)")
        self.kernel = kernel
        #: (device, specialization, options) -> (launcher, function handle, packed metadata, compiled kernel)
        self._table: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        #: (knobs.runtime, the driver config) once the fast path is found usable; False when it is not
        self._triton: tuple[Any, Any] | bool | None = None

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        return lambda *args, **kwargs: self.launch(grid, *args, **kwargs)

    def launch(self, grid: tuple[int, ...], *args: Any, **kwargs: Any) -> None:
        """Launch on the current device and stream with ``grid`` (a tuple of 1 to 3 program counts)."""
        kernel = self.kernel
        if self._triton is None:
            self._triton = _supported(kernel)
        if self._triton is False or not enabled():
            kernel[grid](*args, **kwargs)
            return
        runtime, driver = self._triton  # type: ignore[misc]
        if (runtime.launch_enter_hook.calls or runtime.launch_exit_hook.calls or kernel.pre_run_hooks
                or getattr(runtime, "add_stages_inspection_hook", None) is not None):
            kernel[grid](*args, **kwargs)
            return
        active = driver.active
        device = active.get_current_device()
        binder = kernel.device_caches[device][4]
        bound, specialization, options = binder(*args, **kwargs)
        key = (device, tuple(specialization), tuple(options.items()))
        try:
            entry = self._table.get(key)
        except TypeError:  # an unhashable option or constexpr value: Triton's own path keys it by its string
            kernel[grid](*args, **kwargs)
            return
        if entry is None or not _globals_unchanged(kernel):
            self._compile_and_launch(key, grid, args, kwargs)
            return
        launcher, function, packed, _ = entry
        n = len(grid)
        launcher(grid[0], grid[1] if n > 1 else 1, grid[2] if n > 2 else 1, active.get_current_stream(device),
                 function, packed, None, None, None, *bound.values())

    def _compile_and_launch(self, key: tuple[Any, ...], grid: tuple[int, ...], args: tuple[Any, ...],
                            kwargs: dict[str, Any]) -> None:
        compiled = self.kernel.run(*args, grid=grid, warmup=False, **kwargs)
        if compiled is None or not hasattr(compiled, "packed_metadata"):
            return
        entry = (compiled.run, compiled.function, compiled.packed_metadata, compiled)
        with _LOCK:
            if len(self._table) >= MAX_ENTRIES:
                self._table.pop(next(iter(self._table)))
            self._table[key] = entry

    def cached(self) -> int:
        """How many specializations this launcher holds (for tests and reports)."""
        return len(self._table)


def _supported(kernel: Any) -> tuple[Any, Any] | bool:
    """``(triton.knobs.runtime, triton.runtime.driver.driver)`` when ``kernel`` is a compiled (not interpreted)
    ``JITFunction`` of a Triton with the members used here; else False."""
    try:
        from triton import knobs
        from triton.runtime.driver import driver
        from triton.runtime.jit import JITFunction
    except ImportError:
        return False
    runtime = knobs.runtime
    if not isinstance(kernel, JITFunction) or runtime.interpret:
        return False
    members = ((kernel, "device_caches"), (kernel, "pre_run_hooks"), (kernel, "used_global_vals"),
               (runtime.launch_enter_hook, "calls"), (runtime.launch_exit_hook, "calls"))
    return (runtime, driver) if all(hasattr(obj, name) for obj, name in members) else False


def _globals_unchanged(kernel: Any) -> bool:
    """``JITFunction.run``'s check that the globals the kernel read when compiled still hold those values."""
    missing = object()
    for (name, _), (value, scope) in kernel.used_global_vals.items():
        if scope.get(name, missing) != value:
            return False
    return True


#: the attribute of a kernel object that holds its `FastLaunch`
_ATTR = "_anyaccel_fast_launch"


def fast(kernel: Any) -> FastLaunch:
    """The `FastLaunch` of ``kernel``, made on first use and kept on the kernel object (so it lives and
    dies with it).

    Raises:
        TypeError: ``kernel`` is not a Triton kernel.
    """
    launcher = getattr(kernel, _ATTR, None)
    if launcher is None:
        with _LOCK:
            launcher = getattr(kernel, _ATTR, None)
            if launcher is None:
                launcher = FastLaunch(kernel)
                setattr(kernel, _ATTR, launcher)
    return launcher
