"""The aten-override mode: enable/disable/use_ops replace aten's CPU kernels with anyaccel's (Triton
kernels in Triton's interpreter here; CUDA on a GPU), route each call by the per-shape policy, and
restore aten exactly on exit, nested and across threads."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import anyaccel.ops
from anyaccel.ops.override import aten_ops, mode
from anyaccel.ops.override.policy import Policy, key
from anyaccel.testing.tolerances import assert_close

#: bound of every thread wait in these tests (seconds): a failure must not hang the suite
WAIT_S = 120.0


class CountingPolicy(Policy):
    """Policy "always" that counts the calls routed to anyaccel."""

    def __init__(self, mode_: str = "always") -> None:
        super().__init__(mode_)
        self.ours: list[str] = []

    def use_ours(self, k: str) -> bool:
        decision = super().use_ours(k)
        if decision:
            self.ours.append(k.split("|")[0])
        return decision


def _training_step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = F.layer_norm(x, x.shape[-1:], w, b)
    y = F.silu(h)
    p = torch.softmax(y, -1)
    q = torch.log_softmax(y, -1)
    (p.square().sum() + q.mean()).backward()
    return p.detach(), q.detach()


def test_use_ops_routes_to_anyaccel_and_matches_aten(interpreter_impls: None) -> None:
    x = torch.randn(6, 40, dtype=torch.float64).float().requires_grad_()
    w, b = torch.randn(40, requires_grad=True), torch.randn(40, requires_grad=True)
    ref = _training_step(x, w, b)
    ref_grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(policy=pol) as replaced:
        assert {"_softmax", "_log_softmax", "native_layer_norm", "native_layer_norm_backward", "silu",
                "silu_backward", "_softmax_backward_data", "_log_softmax_backward_data"} <= set(replaced)
        got = _training_step(x, w, b)
    assert {"native_layer_norm", "native_layer_norm_backward", "silu", "silu_backward", "_softmax",
            "_softmax_backward_data", "_log_softmax", "_log_softmax_backward_data"} <= set(pol.ours)
    for g, r in zip(got, ref, strict=True):
        assert_close(g, r.double())
    for t, r in zip((x, w, b), ref_grads, strict=True):
        torch.testing.assert_close(t.grad, r, rtol=1e-5, atol=1e-5)


def test_exit_restores_aten_and_nesting_unwinds(interpreter_impls: None) -> None:
    x = torch.randn(3, 16)
    outer, inner = CountingPolicy(), CountingPolicy()
    anyaccel.ops.enable(include=["softmax"], policy=outer)
    with anyaccel.ops.use_ops(include=["_softmax"], policy=inner):
        torch.softmax(x, -1)
        assert inner.ours == ["_softmax"] and outer.ours == []  # the newest layer runs
    torch.softmax(x, -1)
    assert outer.ours == ["_softmax"]  # the enclosing enable() is back
    assert mode.replaced_ops() == ["_log_softmax", "_log_softmax_backward_data", "_softmax",
                                   "_softmax_backward_data"]
    anyaccel.ops.disable()
    torch.softmax(x, -1)
    assert outer.ours == ["_softmax"] and mode.replaced_ops() == []  # aten's own kernel again
    torch.testing.assert_close(torch.softmax(x, -1), torch.softmax(x.double(), -1).float())


def test_out_of_order_exit_across_threads_restores_aten(interpreter_impls: None) -> None:
    pols = [CountingPolicy() for _ in range(4)]
    # every wait is bounded: a worker that fails inside use_ops breaks the barrier instead of hanging the others
    entered, release = threading.Barrier(4, timeout=WAIT_S), threading.Event()
    errors: list[BaseException] = []

    def worker(p: Policy) -> None:
        try:
            with anyaccel.ops.use_ops(include=["silu"], policy=p):
                entered.wait()
                assert release.wait(WAIT_S), "the main thread never released the workers"
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            errors.append(exc)
            entered.abort()

    threads = [threading.Thread(target=worker, args=(p,), daemon=True) for p in pols]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(WAIT_S)
    assert not any(t.is_alive() for t in threads), f"a worker is still waiting after {WAIT_S} s"
    assert not errors, errors
    F.silu(torch.randn(5))
    assert all(p.ours == [] for p in pols) and mode.replaced_ops() == []


def test_tuned_policy_routes_by_the_table(interpreter_impls: None) -> None:
    x = torch.randn(8, 32)
    k = key("_softmax", torch.float32, 8, 32)
    pol = CountingPolicy("tuned")
    with anyaccel.ops.use_ops(include=["softmax"], policy=pol) as replaced:
        assert replaced == []  # nothing measured: nothing registered, aten untouched
    pol.record(k, 1.5, 0.99)
    pol.record(key("_softmax", torch.float32, 64, 32), 0.8, 0.97)
    with anyaccel.ops.use_ops(include=["softmax"], policy=pol) as replaced:
        assert replaced == ["_softmax"]  # the only op with a win
        torch.softmax(x, -1)
        assert pol.ours == ["_softmax"]  # measured faster: anyaccel
        torch.softmax(torch.randn(9, 32), -1)  # 9 rows bucket to 16: unmeasured, aten
        torch.softmax(torch.randn(64, 32), -1)  # measured slower: aten
        assert pol.ours == ["_softmax"]


def test_tuned_policy_skips_ops_whose_fallback_costs_too_much(interpreter_impls: None) -> None:
    pol = CountingPolicy("tuned")
    pol.record(key("_softmax", torch.float32, 8, 32), 1.5, 0.99)
    pol.record(key("_softmax", torch.float32, 1, 8), 0.5, 0.6)  # a small shape the mode's overhead would slow
    with anyaccel.ops.use_ops(include=["softmax"], policy=pol) as replaced:
        assert replaced == []


def test_ineligible_calls_go_to_aten(interpreter_impls: None) -> None:
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(include=["softmax"], policy=pol):
        torch.softmax(torch.randn(4, 6, dtype=torch.float64), -1)  # float64
        torch.softmax(torch.randn(4, 0), -1)  # no element
    assert pol.ours == []


#: (shape, dim, layout): the reduced dimension innermost, in the middle, outermost; transposed, sliced and
#: permuted views (strided reads, and one layout that must be copied once)
_ANY_DIM_CASES = [
    ((7, 13), 0, "contiguous"), ((3, 37, 5), 1, "contiguous"), ((3, 37, 5), -1, "contiguous"),
    ((5, 9), -1, "transposed"), ((5, 9), 0, "transposed"), ((4, 10, 3), 1, "sliced"),
    ((3, 4, 5, 6), 2, "permuted"), ((2, 300, 67), 1, "contiguous"),
]


def _layout(shape: tuple[int, ...], layout: str, dtype: torch.dtype) -> torch.Tensor:
    if layout == "transposed":
        return torch.randn(*reversed(shape), dtype=torch.float64).to(dtype).t()
    if layout == "sliced":
        return torch.randn(shape[0], 2 * shape[1], shape[2], dtype=torch.float64).to(dtype)[:, ::2]
    if layout == "permuted":
        return torch.randn(shape[1], shape[3], shape[0], shape[2], dtype=torch.float64).to(dtype).permute(2, 0, 3, 1)
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("shape", "dim", "layout"), _ANY_DIM_CASES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
def test_softmax_any_dim_and_layout_routes_to_anyaccel(interpreter_impls: None, shape: tuple[int, ...], dim: int,
                                                       layout: str, dtype: torch.dtype, log: bool) -> None:
    """Softmax / log-softmax along any dimension of any layout, and their backwards, go to anyaccel's kernels
    and match a float64 reference within FlagGems's tolerance (the backward's reference reads the saved
    output rounded to the dtype, as the kernel does)."""
    x = _layout(shape, layout, dtype).requires_grad_()
    assert x.shape == shape
    fn = torch.log_softmax if log else torch.softmax
    grad = torch.randn(shape, dtype=torch.float64).to(dtype)
    pol = CountingPolicy()
    with anyaccel.ops.use_ops(include=["softmax"], policy=pol):
        y = fn(x, dim)
        (dx,) = torch.autograd.grad(y, x, grad)
    op = "_log_softmax" if log else "_softmax"
    assert pol.ours == [op, f"{op}_backward_data"]
    assert y.is_contiguous() and y.dtype == dtype
    ref = fn(x.detach().double(), dim)
    assert_close(y, ref)
    yr, g = y.detach().double(), grad.double()  # the saved (rounded) output
    want = g - yr.exp() * g.sum(dim, keepdim=True) if log else yr * (g - (g * yr).sum(dim, keepdim=True))
    assert_close(dx, want, shape[dim])


def test_portable_implementations_are_not_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYACCEL_IMPL_SOFTMAX", "torch")
    with anyaccel.ops.use_ops(include=["softmax"], policy="always") as replaced:
        assert replaced == []  # the portable op calls aten::_softmax itself


def test_unknown_names_and_policies_raise() -> None:
    with pytest.raises(ValueError, match="accepted: .*_softmax"):
        aten_ops.select(["softmx"], None)
    with pytest.raises(ValueError, match="policy mode"):
        Policy("sometimes")


def test_tune_writes_a_table_the_policy_reads(interpreter_impls: None, tmp_path: object,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from anyaccel.ops import tune

    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    measured = tune.tune(["_softmax"], [(4, 8)], ["float32"], reps=1, accelerator=anyaccel.get_accelerator())
    k = key("_softmax", torch.float32, 4, 8)
    assert set(measured) == {k} and measured[k] > 0
    table = Policy.load("cpu")
    assert table.speedups[k] == pytest.approx(measured[k]) and table.fallbacks[k] > 0


def test_the_mode_and_the_tuner_take_the_device_from_their_caller(interpreter_impls: None, tmp_path: object,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The op layer does not reach up to ``anyaccel.get_accelerator()`` (the accelerator layer, above it): the
    mode takes ``device=`` (else torch's current accelerator, else the CPU) and the tuner the accelerator its
    caller passes."""
    import anyaccel
    from anyaccel.ops import tune
    from anyaccel.ops.override import mode

    accelerator = anyaccel.get_accelerator()

    def refuse() -> None:
        raise AssertionError("the op layer asked anyaccel.get_accelerator()")

    monkeypatch.setattr(anyaccel, "get_accelerator", refuse)
    monkeypatch.setenv("ANYACCEL_CACHE_DIR", str(tmp_path))
    assert mode.device_type_of("cpu") == mode.device_type_of(torch.device("cpu")) == "cpu"
    assert mode.device_type_of("cuda:1") == "cuda"
    current = torch.accelerator.current_accelerator(check_available=True)
    assert mode.device_type_of() == (current.type if current is not None else "cpu")
    with anyaccel.ops.use_ops(include=["_softmax"], policy="always", device="cpu"):
        pass
    assert mode.load_policy("always", device="cpu").mode == "always"
    measured = tune.tune(["_softmax"], [(4, 8)], ["float32"], reps=1, accelerator=accelerator)
    assert len(measured) == 1


def test_a_gpu_build_of_torch_without_a_gpu_works_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.accelerator names the build's accelerator unless asked to check it is there: a CUDA torch on a
    machine without a GPU said "cuda", and use_ops() then replaced nothing the CPU runs."""

    def built_for_cuda(check_available: bool = False) -> torch.device | None:
        return None if check_available else torch.device("cuda")

    monkeypatch.setattr(torch.accelerator, "current_accelerator", built_for_cuda)
    assert mode.device_type_of() == "cpu"
