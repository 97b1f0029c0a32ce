"""The SYCL optimizer kernels (FusedAdam, FusedLion, FusedLamb) compiled by a real SYCL compiler and run.

The XPU builds' sources (``anyaccel/csrc/{adam,lion,lamb}/fused_*_sycl.sycl`` and
``csrc/includes/sycl/multi_tensor_apply.hpp``) are built through the SYCL op builder an XPU user's build goes
through, as a host-device build (``SYCLOpBuilder(host_device=True)``: the same sources with
``ANYACCEL_SYCL_HOST_DEVICE=1``, registered for the CPU dispatch key), and run on the SYCL runtime's CPU
device over torch CPU tensors: Intel's OpenCL CPU device under icpx, AdaptiveCpp's OpenMP backend under acpp.
The compiler is the one the builder finds (``ANYACCEL_SYCL_CXX``, else icpx, else acpp on ``PATH``); without
one these tests skip, naming what to install.

Each step is compared with a float64 evaluation of the op spec's formula (``anyaccel/ops/*/spec.py``) from
the same inputs, one step at a time (the kernel's own states feed the next step), over every dtype
combination of the spec. Tolerances, and why:

- fp32 parameters and states: ``rtol=1e-5, atol=1e-6`` (the kernel's fp32 arithmetic, a few roundings per
  element; LAMB's trust ratio adds an fp32 sum of up to 40001 squares);
- 16-bit values: within one unit in the last place of their dtype (``rtol`` = the dtype's eps) of the
  reference rounded to that dtype: the kernel rounds its fp32 result once where the reference rounds the
  float64 one, and near a rounding boundary the two may land on neighbouring values; plus ``atol=1e-6``
  for results near 0 (``m = b1 m + (1 - b1) g`` cancels: the fp32 result is off by up to 2^-24 of the
  terms, about 1e-8 here, which is many ulps of a 16-bit value that small);
- Lion's ``sign(c)``: where ``|c|`` is below 1e-5 of its terms, fp32 and float64 may disagree on its sign,
  so those elements (a handful of 40001) may differ by ``2 lr``.

Sizes 1, 7, 257, 16385 (one element past a chunk) and 40001 are odd; one case steps 41 tensors (one empty) of
three dtype combinations in one call, and two calls with different hyper-parameters per step play two
parameter groups.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from anyaccel.op_builder.classes import builder_class
from anyaccel.op_builder.toolchains import sycl as sycl_toolchain
from anyaccel.ops.adam.spec import SPEC as ADAM_SPEC
from anyaccel.testing.references import adam_step_float64

pytestmark = [
    pytest.mark.sycl_toolchain,
    pytest.mark.slow,
    pytest.mark.skipif(
        sycl_toolchain.find_sycl_compiler() is None,
        reason="no SYCL compiler: install Intel's icpx (oneAPI DPC++/C++ compiler, then source setvars.sh) or "
               "AdaptiveCpp (its acpp on PATH), or set ANYACCEL_SYCL_CXX to one",
    ),
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Every (param, grad, state, copy) combination the specs accept (Adam's; Lion and LAMB share it).
COMBOS = [c.as_tuple() for c in ADAM_SPEC.dtypes]
SIZES = (1, 7, 257, 16385, 40001)


@pytest.fixture(scope="module")
def ops(op_cache_dir: Any) -> Iterator[Callable[[str, str], Any]]:
    """Loads (building once per session) the host-device build of a family's SYCL op into the session's cache."""
    loaded: dict[str, Any] = {}

    def load(family: str, build: str) -> Any:
        if build not in loaded:
            loaded[build] = builder_class(family, build)(host_device=True).load()
        return loaded[build]

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ANYACCEL_CACHE_DIR", str(op_cache_dir))
        yield load


def _dtype(name: str) -> torch.dtype | None:
    return None if name == "none" else DTYPES[name]


def _close(actual: torch.Tensor, expected64: torch.Tensor) -> None:
    """``actual`` against the float64 reference, within the tolerance of its dtype (module docstring)."""
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual.double(), expected64, rtol=1e-5, atol=1e-6)
    else:
        torch.testing.assert_close(actual.double(), expected64.to(actual.dtype).double(),
                                   rtol=torch.finfo(actual.dtype).eps, atol=1e-6)


def _tensors(combo: tuple[str, str, str, str], sizes: tuple[int, ...], seed: int, states: int) -> dict[str, Any]:
    p_t, g_t, s_t, c_t = (_dtype(n) for n in combo)
    assert p_t is not None and g_t is not None and s_t is not None
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(n, generator=gen).to(p_t) for n in sizes]
    grads = [torch.randn(n, generator=gen).to(g_t) for n in sizes]
    # states start as a step's would (m any sign, v non-negative), not at zero, so every term counts
    st = [[(torch.randn(n, generator=gen) * 0.1).abs().to(s_t) if k == 1 else (torch.randn(n, generator=gen) * 0.1)
           .to(s_t) for n in sizes] for k in range(states)]
    copies = [torch.empty(n, dtype=c_t) for n in sizes] if c_t is not None else []
    return {"params": params, "grads": grads, "states": st, "copies": copies}


def _check_copies(t: dict[str, Any]) -> None:
    if not t["copies"]:
        return
    for p, c in zip(t["params"], t["copies"], strict=True):
        assert torch.equal(c, p.to(c.dtype)), "the model copy is the updated parameter rounded once"


# ---- Adam -------------------------------------------------------------------------------------------------


def _adam_ref(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, step: int, lr: float, b1: float,
              b2: float, eps: float, wd: float, bias_correction: bool, adamw: bool) -> tuple[torch.Tensor, ...]:
    return adam_step_float64(p, g, m, v, step=step, lr=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd,
                             bias_correction=bias_correction, adamw=adamw)


ADAM_CASES = {  # step, lr, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode
    "adamw": (3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True),
    "adam_l2": (1, 1e-3, 0.8, 0.99, 1e-6, 0.1, True, False),
    "no_bias_correction": (7, 5e-3, 0.9, 0.95, 1e-8, 0.0, False, True),
}


def _adam_step(op: Any, t: dict[str, Any], case: tuple[Any, ...]) -> None:
    refs = [_adam_ref(p, g, m, v, *case) for p, g, m, v in zip(t["params"], t["grads"], *t["states"], strict=True)]
    op.adam_step(t["params"], t["grads"], t["states"][0], t["states"][1], t["copies"], *case)
    for (rp, rm, rv), p, m, v in zip(refs, t["params"], *t["states"], strict=True):
        _close(p, rp)
        _close(m, rm)
        _close(v, rv)
    _check_copies(t)


@pytest.mark.parametrize("combo", COMBOS, ids=["-".join(c) for c in COMBOS])
@pytest.mark.parametrize("case", list(ADAM_CASES), ids=list(ADAM_CASES))
def test_adam_matches_the_float64_reference(ops: Any, combo: tuple[str, str, str, str], case: str) -> None:
    op = ops("adam", "fused_adam_sycl")
    t = _tensors(combo, SIZES, seed=1, states=2)
    step, *rest = ADAM_CASES[case]
    for k in range(3):  # three steps, the kernel's states feeding the next
        _adam_step(op, t, (step + k, *rest))


def test_adam_many_tensors_mixed_combos_and_two_groups(ops: Any) -> None:
    op = ops("adam", "fused_adam_sycl")
    sizes = (0, *(1 + 37 * i for i in range(40)))  # an empty tensor among them
    # one call over tensors of three dtype combinations (the kernel groups them), interleaved
    parts = [_tensors(c, sizes[i::3], seed=10 + i, states=2) for i, c in enumerate(COMBOS[:3])]
    mixed = {k: [x for part in parts for x in part[k]] for k in ("params", "grads")}
    mixed["states"] = [[x for part in parts for x in part["states"][s]] for s in range(2)]
    mixed["copies"] = []
    _adam_step(op, mixed, ADAM_CASES["adamw"])
    # two parameter groups: two calls with their own hyper-parameters in one optimizer step
    g1 = _tensors(COMBOS[0], (5, 300), seed=20, states=2)
    g2 = _tensors(COMBOS[0], (9, 17000), seed=21, states=2)
    _adam_step(op, g1, ADAM_CASES["adamw"])
    _adam_step(op, g2, ADAM_CASES["adam_l2"])


def test_adam_refuses_bad_lists_before_writing(ops: Any) -> None:
    op = ops("adam", "fused_adam_sycl")
    t = _tensors(COMBOS[0], (5, 6), seed=3, states=2)
    before = [p.clone() for p in t["params"]]
    with pytest.raises(RuntimeError, match=r"adam_step: got 2 params, 1 grads"):
        op.adam_step(t["params"], t["grads"][:1], t["states"][0], t["states"][1], [], *ADAM_CASES["adamw"])
    with pytest.raises(RuntimeError, match=r"float64"):
        op.adam_step([t["params"][0], t["params"][1].double()], t["grads"], t["states"][0], t["states"][1], [],
                     *ADAM_CASES["adamw"])
    assert all(torch.equal(a, b) for a, b in zip(before, t["params"], strict=True))


# ---- Lion -------------------------------------------------------------------------------------------------


def _lion_ref(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, lr: float, b1: float, b2: float,
              wd: float) -> tuple[torch.Tensor, ...]:
    """The spec's Lion in float64, and where the sign of ``c`` is too close to call in fp32."""
    p, g, m = (x.double() for x in (p, g, m))
    c = b1 * m + (1 - b1) * g
    unsure = c.abs() <= 1e-5 * (b1 * m.abs() + (1 - b1) * g.abs())
    return p * (1 - lr * wd) - lr * torch.sign(c), b2 * m + (1 - b2) * g, unsure


@pytest.mark.parametrize("combo", COMBOS, ids=["-".join(c) for c in COMBOS])
def test_lion_matches_the_float64_reference(ops: Any, combo: tuple[str, str, str, str]) -> None:
    op = ops("lion", "fused_lion_sycl")
    t = _tensors(combo, SIZES, seed=4, states=1)
    for lr, b1, b2, wd in ((1e-3, 0.9, 0.99, 0.01), (3e-4, 0.95, 0.98, 0.0), (1e-2, 0.9, 0.99, 0.1)):
        refs = [_lion_ref(p, g, m, lr, b1, b2, wd) for p, g, m in zip(t["params"], t["grads"], t["states"][0],
                                                                      strict=True)]
        op.lion_step(t["params"], t["grads"], t["states"][0], t["copies"], lr, b1, b2, wd)
        for (rp, rm, unsure), p, m in zip(refs, t["params"], t["states"][0], strict=True):
            assert int(unsure.sum()) <= 8, "the inputs keep sign(c) well-defined almost everywhere"
            rtol = 1e-5 if p.dtype == torch.float32 else torch.finfo(p.dtype).eps  # p's own rounding
            torch.testing.assert_close(p.double()[unsure], rp[unsure], rtol=rtol, atol=2 * lr)
            _close(p[~unsure], rp[~unsure])
            _close(m, rm)
        _check_copies(t)


# ---- LAMB -------------------------------------------------------------------------------------------------


def _lamb_ref(p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, s_dtype: torch.dtype, step: int,
              lr: float, b1: float, b2: float, eps: float, wd: float, scale: float, max_coeff: float,
              min_coeff: float, bias_correction: bool, eps_inside_sqrt: bool) -> tuple[Any, ...]:
    """The spec's LAMB in float64. As the kernels (and DeepSpeed's), the norms use the unrounded m and v and
    the update recomputes u from the stored (rounded to ``s_dtype``) ones."""
    p, g, m, v = (x.double() for x in (p, g, m, v))
    g = g / scale
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g

    def update(m: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return m / ((v + eps).sqrt() if eps_inside_sqrt else v.sqrt() + eps) + wd * p

    pn, un = float(p.norm()), float(update(m, v).norm())
    coeff = 1.0 if pn == 0 or un == 0 else min(max(pn / un, min_coeff), max_coeff)
    step_size = lr * math.sqrt(1 - b2**step) / (1 - b1**step) if bias_correction else lr
    m_s, v_s = m.to(s_dtype).double(), v.to(s_dtype).double()
    return p - step_size * coeff * update(m_s, v_s), m, v, coeff


LAMB_CASES = {  # step, lr, beta1, beta2, eps, weight_decay, grad_scale, max_coeff, min_coeff, bias_corr., eps_in
    "deepspeed_defaults": (1, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1.0, 10.0, 0.01, True, False),
    "scaled_eps_inside": (4, 1e-2, 0.9, 0.99, 1e-6, 0.0, 128.0, 10.0, 0.01, True, True),
    "clamped_no_bias_correction": (2, 1e-3, 0.8, 0.9, 1e-8, 0.1, 1.0, 0.5, 0.2, False, False),
}


def _lamb_step(op: Any, t: dict[str, Any], case: tuple[Any, ...]) -> None:
    s_dtype = t["states"][0][0].dtype
    refs = [_lamb_ref(p, g, m, v, s_dtype, *case) for p, g, m, v in zip(t["params"], t["grads"], *t["states"],
                                                                         strict=True)]
    coeffs = torch.full((len(t["params"]),), -1.0)
    op.lamb_step(t["params"], t["grads"], t["states"][0], t["states"][1], t["copies"], coeffs, *case)
    torch.testing.assert_close(coeffs.double(), torch.tensor([r[3] for r in refs], dtype=torch.float64),
                               rtol=1e-5, atol=1e-6)
    for (rp, rm, rv, _), p, m, v in zip(refs, t["params"], *t["states"], strict=True):
        _close(p, rp)
        _close(m, rm)
        _close(v, rv)
    _check_copies(t)


@pytest.mark.parametrize("combo", COMBOS, ids=["-".join(c) for c in COMBOS])
@pytest.mark.parametrize("case", list(LAMB_CASES), ids=list(LAMB_CASES))
def test_lamb_matches_the_float64_reference(ops: Any, combo: tuple[str, str, str, str], case: str) -> None:
    op = ops("lamb", "fused_lamb_sycl")
    t = _tensors(combo, SIZES, seed=5, states=2)
    step, *rest = LAMB_CASES[case]
    for k in range(3):
        _lamb_step(op, t, (step + k, *rest))


def test_lamb_many_tensors_mixed_combos_zero_tensors_and_two_groups(ops: Any) -> None:
    op = ops("lamb", "fused_lamb_sycl")
    sizes = (0, *(1 + 37 * i for i in range(40)))  # an empty tensor among them
    parts = [_tensors(c, sizes[i::3], seed=30 + i, states=2) for i, c in enumerate(COMBOS[:3])]
    mixed = {k: [x for part in parts for x in part[k]] for k in ("params", "grads")}
    mixed["states"] = [[x for part in parts for x in part["states"][s]] for s in range(2)]
    mixed["copies"] = []
    # an all-zero parameter: its norm is 0, so its coefficient is 1
    mixed["params"][5].zero_()
    _lamb_step(op, mixed, LAMB_CASES["deepspeed_defaults"])
    g1 = _tensors(COMBOS[0], (5, 300), seed=40, states=2)
    g2 = _tensors(COMBOS[0], (9, 17000), seed=41, states=2)
    _lamb_step(op, g1, LAMB_CASES["deepspeed_defaults"])
    _lamb_step(op, g2, LAMB_CASES["clamped_no_bias_correction"])


def test_lamb_refuses_bad_coefficients_and_bounds_before_writing(ops: Any) -> None:
    op = ops("lamb", "fused_lamb_sycl")
    t = _tensors(COMBOS[0], (5, 6), seed=6, states=2)
    before = [p.clone() for p in t["params"]]
    args = (t["params"], t["grads"], t["states"][0], t["states"][1], [])
    with pytest.raises(RuntimeError, match=r"min_coeff=0\.5 is larger than max_coeff=0\.1"):
        op.lamb_step(*args, torch.zeros(2), 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0, 0.1, 0.5, True, False)
    with pytest.raises(RuntimeError, match=r"lamb_coeffs must be a contiguous float32 tensor of 2 elements"):
        op.lamb_step(*args, torch.zeros(3), *LAMB_CASES["deepspeed_defaults"])
    assert all(torch.equal(a, b) for a, b in zip(before, t["params"], strict=True))
