"""The eager fast launcher of Triton kernels (`anyaccel._compat.triton_launch`).

On the CPU the kernel's compiled path is faked at its two seams (the binder that classifies arguments and
``JITFunction.run``, which compiles and returns a compiled kernel), so the caching and every fallback are
checked without a GPU; on a GPU the real kernels are launched both ways and compared bit for bit.
"""

from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch

# as the suite's other Triton modules do before Triton is imported (the interpreter is chosen at import)
if importlib.util.find_spec("triton") is not None and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from triton import knobs  # noqa: E402
from triton.runtime.driver import driver as triton_driver  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from anyaccel._compat import triton_launch as fast_launch  # noqa: E402
from anyaccel._compat.triton_launch import FastLaunch, fast  # noqa: E402

_GLOBAL_SCALE = 2


def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # type: ignore[name-defined]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


class _Compiled:
    """A stand-in for ``CompiledKernel``: its launcher records its arguments."""

    def __init__(self, launches: list[tuple[Any, ...]], tag: str) -> None:
        self.function = f"function-{tag}"
        self.packed_metadata = f"packed-{tag}"
        self.launches = launches

    def run(self, *args: Any) -> None:  # the C launcher's positional protocol
        self.launches.append(args)


class _Fake:
    """A real ``JITFunction`` whose binder and ``run`` are replaced: ``run`` counts compiles and returns a
    compiled stand-in per specialization; the binder classifies ints by ``== 1`` and tensors by dtype."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kernel = JITFunction(_copy_kernel)
        self.runs: list[tuple[Any, ...]] = []
        self.launches: list[tuple[Any, ...]] = []
        self.compiled: dict[tuple[Any, ...], _Compiled] = {}

        def binder(*args: Any, **kwargs: Any) -> tuple[dict[str, Any], list[Any], dict[str, Any]]:
            names = ["x_ptr", "y_ptr", "n", "BLOCK"]
            bound = dict(zip(names, args, strict=False))
            bound.update({k: v for k, v in kwargs.items() if k in names})
            options = {k: v for k, v in kwargs.items() if k not in names}
            spec = [("*" + str(bound["x_ptr"].dtype), "D"), ("*" + str(bound["y_ptr"].dtype), "D"),
                    ("i32", "one" if bound["n"] == 1 else ""), ("constexpr", bound["BLOCK"])]
            return bound, spec, options

        def run(*args: Any, grid: Any, warmup: bool, **kwargs: Any) -> _Compiled:
            bound, spec, options = binder(*args, **kwargs)
            self.runs.append((grid, tuple(spec)))
            key = (tuple(spec), str(options))  # Triton keys options by their string
            compiled = self.compiled.setdefault(key, _Compiled(self.launches, str(len(self.compiled))))
            compiled.run(*grid, "stream", compiled.function, compiled.packed_metadata, "metadata", "enter", "exit",
                         *bound.values())
            return compiled

        self.kernel.device_caches = {0: ({}, {}, None, None, binder)}
        self.kernel.run = run
        driver = SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: 1234)
        monkeypatch.setattr(triton_driver, "_active", driver)
        monkeypatch.setattr(knobs.runtime, "interpret", False)
        monkeypatch.delenv(fast_launch.ENV, raising=False)
        monkeypatch.setattr(fast_launch, "_enabled", None)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> _Fake:
    return _Fake(monkeypatch)


def test_second_launch_of_a_specialization_skips_run(fake: _Fake) -> None:
    x, y = torch.ones(4), torch.empty(4)
    launcher = FastLaunch(fake.kernel)
    launcher[(3,)](x, y, 4, BLOCK=16, num_warps=2)
    assert len(fake.runs) == 1 and launcher.cached() == 1
    launcher[(5, 2)](x, y, 4, BLOCK=16, num_warps=2)
    assert len(fake.runs) == 1  # no second compile or bind-through-run
    grid0, grid1, grid2, stream, function, packed, metadata, enter, exit_, *args = fake.launches[-1]
    assert (grid0, grid1, grid2, stream, function, packed) == (5, 2, 1, 1234, "function-0", "packed-0")
    assert (metadata, enter, exit_) == (None, None, None)  # no hooks are set, so none are passed
    assert args[0] is x and args[1] is y and args[2:] == [4, 16]


def test_a_new_specialization_or_option_goes_through_run(fake: _Fake) -> None:
    x, y = torch.ones(4), torch.empty(4)
    launcher = FastLaunch(fake.kernel)
    launcher[(1,)](x, y, 4, BLOCK=16, num_warps=2)
    launcher[(1,)](x, y, 1, BLOCK=16, num_warps=2)  # n == 1 specializes
    launcher[(1,)](x, y, 4, BLOCK=32, num_warps=2)  # another constexpr
    launcher[(1,)](x, y, 4, BLOCK=16, num_warps=4)  # another launch option
    launcher[(1,)](x.double(), y.double(), 4, BLOCK=16, num_warps=2)  # another dtype
    assert len(fake.runs) == 5 and launcher.cached() == 5
    launcher[(1,)](x, y, 1, BLOCK=16, num_warps=2)
    assert len(fake.runs) == 5
    assert fake.launches[-1][4] == "function-1"  # the n == 1 kernel


def test_hooks_and_changed_globals_fall_back_to_run(fake: _Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = torch.ones(4), torch.empty(4)
    launcher = FastLaunch(fake.kernel)
    launcher[(1,)](x, y, 4, BLOCK=16)

    def hook(*args: Any) -> None:
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        launcher[(1,)](x, y, 4, BLOCK=16)
        assert len(fake.runs) == 2  # a profiler's hook is served by Triton's own path
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    fake.kernel.pre_run_hooks.append(hook)
    launcher[(1,)](x, y, 4, BLOCK=16)
    assert len(fake.runs) == 3
    fake.kernel.pre_run_hooks.clear()
    launcher[(1,)](x, y, 4, BLOCK=16)
    assert len(fake.runs) == 3
    if hasattr(knobs.runtime, "add_stages_inspection_hook"):  # Triton 3.9: it changes the specialization
        monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", lambda: ("key", "hash"))
        launcher[(1,)](x, y, 4, BLOCK=16)
        assert len(fake.runs) == 4
        monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", None)
        fake.runs.pop()
        launcher[(1,)](x, y, 4, BLOCK=16)
        assert len(fake.runs) == 3
    fake.kernel.used_global_vals = {("_GLOBAL_SCALE", 0): (1, globals())}  # compiled when it was 1
    launcher[(1,)](x, y, 4, BLOCK=16)
    assert len(fake.runs) == 4  # Triton's run checks (and raises on) a changed global


def test_switched_off_interpreted_or_unhashable_launches_use_run(fake: _Fake, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    x, y = torch.ones(4), torch.empty(4)
    monkeypatch.setenv(fast_launch.ENV, "0")
    off = FastLaunch(fake.kernel)
    off[(1,)](x, y, 4, BLOCK=16)
    monkeypatch.delenv(fast_launch.ENV)  # read once, at the first launch
    off[(1,)](x, y, 4, BLOCK=16)
    assert len(fake.runs) == 2 and off.cached() == 0
    fast_launch.set_enabled(True)
    off[(1,)](x, y, 4, BLOCK=16)
    off[(1,)](x, y, 4, BLOCK=16)
    assert len(fake.runs) == 3 and off.cached() == 1
    fast_launch.set_enabled(None)
    off.launch((1,), x, y, 4, BLOCK=16)
    assert len(fake.runs) == 3  # the environment no longer says "0"
    runs = len(fake.runs)
    monkeypatch.setattr(knobs.runtime, "interpret", True)
    interpreted = FastLaunch(fake.kernel)
    interpreted[(1,)](x, y, 4, BLOCK=16)
    assert interpreted.cached() == 0
    monkeypatch.setattr(knobs.runtime, "interpret", False)
    launcher = FastLaunch(fake.kernel)
    launcher[(1,)](x, y, 4, BLOCK=16, extra=[1])  # an unhashable option
    launcher[(1,)](x, y, 4, BLOCK=16, extra=[1])
    assert launcher.cached() == 0 and len(fake.runs) == runs + 3


def test_table_is_bounded(fake: _Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_launch, "MAX_ENTRIES", 3)
    x, y = torch.ones(4), torch.empty(4)
    launcher = FastLaunch(fake.kernel)
    for block in (8, 16, 32, 64, 128):
        launcher[(1,)](x, y, 4, BLOCK=block)
    assert launcher.cached() == 3


def test_bad_arguments_raise_typed_errors() -> None:
    with pytest.raises(TypeError, match="not a Triton kernel"):
        FastLaunch(lambda x: x)
    with pytest.raises(TypeError, match="not a Triton kernel"):
        fast(42)
    with pytest.raises(TypeError, match="accepted: True, False or None"):
        fast_launch.set_enabled("0")  # type: ignore[arg-type]


def test_fast_is_one_launcher_per_kernel(fake: _Fake) -> None:
    assert fast(fake.kernel) is fast(fake.kernel)
    assert fast(JITFunction(_copy_kernel)) is not fast(fake.kernel)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fast_launch_matches_triton_on_the_gpu(dtype: torch.dtype) -> None:
    """The same results as ``kernel[grid]``, across sizes, pointer alignments (a view one element in is not
    16-byte aligned, which Triton specializes on) and dtypes; the launcher holds one kernel per specialization."""
    kernel = triton.jit(_copy_kernel)
    launcher = FastLaunch(kernel)
    base = torch.randn(10_007, device="cuda", dtype=dtype)
    for offset in (0, 1, 0, 3):
        for n in (1, 17, 4096, 10_000):
            x = base[offset:offset + n]
            ours, theirs = torch.empty_like(x), torch.empty_like(x)
            grid = (triton.cdiv(n, 1024),)
            kernel[grid](x, theirs, n, BLOCK=1024)
            launcher[grid](x, ours, n, BLOCK=1024)
            launcher[grid](x, ours, n, BLOCK=1024)  # the cached path
            torch.cuda.synchronize()
            assert torch.equal(ours, theirs) and torch.equal(ours, x * 2)
    assert 2 <= launcher.cached() <= 8


def test_a_triton_without_the_private_members_launches_through_run(fake: _Fake,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback where a Triton release renames a member the fast path reads: every launch is
    ``kernel[grid](...)`` (Triton's ``run``), with the same results."""
    x, y = torch.zeros(4), torch.zeros(4)
    monkeypatch.delattr(fake.kernel, "device_caches")
    launcher = FastLaunch(fake.kernel)
    for _ in range(3):
        launcher[(1,)](x, y, 4, BLOCK=4)
    assert len(fake.runs) == 3 and launcher.cached() == 0
