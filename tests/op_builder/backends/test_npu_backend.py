"""NPUOpBuilder, CANN toolkit discovery and the NPU optimizer implementations, without an NPU.

Toolkit layouts are copied from tests/op_builder/fixtures/fake_toolchains/ascend; a fake ``torch_npu``
package on ``sys.path`` stands for the vendor package; the optimizer implementations run on the CPU
(torch's ``_foreach_*`` ops are the same calls torch_npu fuses) and through a fake
``torch_npu.npu_apply_adam_w`` that follows torch_npu's documented reference, against torch.optim.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch

from anyaccel.op_builder.backends import npu as npu_mod
from anyaccel.op_builder.core.errors import BuildError, ToolchainError
from anyaccel.op_builder.backends.npu import NPUOpBuilder, find_ascend_toolkit, find_torch_npu
from anyaccel.op_builder.npu_ops import NPUFusedAdamBuilder, NPUFusedLionBuilder
from anyaccel.ops.npu import adam as npu_adam
from anyaccel.ops.npu.lion import lion_step

FAKE_ASCEND = Path(__file__).resolve().parent / "fixtures" / "fake_toolchains" / "ascend" / "latest"


def _toolkit(root: Path) -> Path:
    shutil.copytree(FAKE_ASCEND, root)
    (root / "lib64").mkdir()
    (root / "lib64" / "libascendcl.so").write_bytes(b"fake libascendcl")
    return root


@pytest.fixture
def no_ascend(monkeypatch, tmp_path):
    for var in npu_mod.TOOLKIT_ENVS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(npu_mod, "DEFAULT_TOOLKIT", tmp_path / "no-default")
    return tmp_path


@pytest.fixture
def fake_torch_npu(monkeypatch, tmp_path):
    """A ``torch_npu`` package (importable, empty) on sys.path; returns its directory."""
    pkg = tmp_path / "site" / "torch_npu"
    (pkg / "include").mkdir(parents=True)
    (pkg / "lib").mkdir()
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    return pkg


class ToyNPUBuilder(NPUOpBuilder):
    NAME = "toy_npu_op"
    BUILD_VAR = "ANYACCEL_BUILD_TOY_NPU_OP"

    def sources(self) -> list[str]:
        return ["csrc/adam/cpu_adam.cpp"]  # any existing source: the compile is captured


# ---- discovery -------------------------------------------------------------------------------------------


def test_toolkit_found_by_variables_then_default(no_ascend, monkeypatch):
    assert find_ascend_toolkit() is None
    default = _toolkit(no_ascend / "default")
    tk = find_ascend_toolkit(default=default)
    assert tk.source == "default" and tk.version == "8.0.RC2"
    second = _toolkit(no_ascend / "second")
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(second))
    assert find_ascend_toolkit(default=default).home == second
    first = _toolkit(no_ascend / "first")
    (first / "x86_64-linux" / "ascend_toolkit_install.info").write_text("version=7.0.0\n")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(first))
    tk = find_ascend_toolkit(default=default)
    assert tk.home == first and tk.source == "ASCEND_HOME_PATH" and tk.version == "7.0.0"
    assert tk.include_dir == first / "include" and tk.lib_dir == first / "lib64"


def test_a_variable_naming_an_incomplete_toolkit_is_an_error(no_ascend, monkeypatch):
    broken = _toolkit(no_ascend / "broken")
    (broken / "lib64" / "libascendcl.so").unlink()
    monkeypatch.setenv("ASCEND_HOME_PATH", str(broken))
    with pytest.raises(ToolchainError, match="ASCEND_HOME_PATH") as err:
        find_ascend_toolkit()
    assert err.value.code == "library_missing" and "libascendcl.so" in str(err.value)
    monkeypatch.setenv("ASCEND_HOME_PATH", str(no_ascend / "nothing"))
    with pytest.raises(ToolchainError, match="acl.h") as err:
        find_ascend_toolkit()
    assert err.value.code == "header_missing"


def test_torch_npu_found_without_importing_it(no_ascend, fake_torch_npu):
    found = find_torch_npu()
    assert found is not None and found.root == fake_torch_npu
    assert found.include_dir == fake_torch_npu / "include" and found.lib_dir == fake_torch_npu / "lib"
    assert "torch_npu" not in sys.modules


# ---- NPUOpBuilder ------------------------------------------------------------------------------------------


def test_npu_builder_key_preflight_and_compile(no_ascend, fake_torch_npu, monkeypatch):
    with pytest.raises(BuildError) as err:  # torch_npu present, no toolkit
        ToyNPUBuilder().load()
    assert err.value.code == "header_missing" and "CANN toolkit" in str(err.value)
    home = _toolkit(no_ascend / "cann")
    monkeypatch.setenv("ASCEND_HOME_PATH", str(home))
    b = ToyNPUBuilder()
    inputs = b.key_inputs()
    assert inputs["backend"] == "npu" and inputs["ascend_toolkit"]["version"] == "8.0.RC2"
    assert ToyNPUBuilder().compatibility() == (True, "")
    from anyaccel.op_builder.core import manifest as mf

    key = mf.compute_key(inputs)
    (home / "x86_64-linux" / "ascend_toolkit_install.info").write_text("version=8.1.RC1\n")
    assert mf.compute_key(ToyNPUBuilder().key_inputs()) != key
    seen: dict = {}

    def fake_load(**kwargs):
        seen.update(kwargs)
        raise RuntimeError("Error building extension\ntoy.cpp:1: error: boom")

    monkeypatch.setattr("torch.utils.cpp_extension.load", fake_load)
    with pytest.raises(BuildError):
        ToyNPUBuilder().load()
    assert "-lascendcl" in seen["extra_ldflags"] and "-ltorch_npu" in seen["extra_ldflags"]
    assert f"-L{home / 'lib64'}" in seen["extra_ldflags"]
    assert str(home / "include") in seen["extra_include_paths"]
    assert str(fake_torch_npu / "include") in seen["extra_include_paths"]
    assert seen["with_cuda"] is False


def test_delegating_builders_need_torch_npu_and_compile_nothing(no_ascend, monkeypatch):
    monkeypatch.setattr(npu_mod, "find_torch_npu", lambda: None)
    monkeypatch.setattr("anyaccel.op_builder.npu_ops.find_torch_npu", lambda: None)
    ok, reason = NPUFusedAdamBuilder().compatibility()
    assert not ok and "torch_npu" in reason
    with pytest.raises(ImportError, match="torch_npu"):
        NPUFusedLionBuilder().load()


def test_delegating_builders_load_the_python_modules(no_ascend, fake_torch_npu):
    assert NPUFusedAdamBuilder().compatibility() == (True, "")
    assert NPUFusedAdamBuilder().load().adam_step is npu_adam.adam_step
    assert NPUFusedLionBuilder().load().lion_step is lion_step
    assert NPUFusedAdamBuilder().build_prebuilt(no_ascend).name == "adam.py"


# ---- the NPU optimizer implementations (CPU) -------------------------------------------------------------


def _params(dtype: torch.dtype, n: int = 3) -> list[torch.Tensor]:
    return [torch.randn(s, dtype=dtype) for s in (7, 33, 129)[:n]]


def _torch_adam(ps, gs, steps, lr, betas, eps, wd, adamw):
    ref = [p.detach().double().clone().requires_grad_(False) for p in ps]
    opt_cls = torch.optim.AdamW if adamw else torch.optim.Adam
    params = [torch.nn.Parameter(r) for r in ref]
    opt = opt_cls(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    for step_grads in steps:
        for p, g in zip(params, step_grads):
            p.grad = g.double()
        opt.step()
    return [p.detach() for p in params]


@pytest.mark.parametrize("adamw", [True, False])
@pytest.mark.parametrize("kernel", ["foreach", "fake_ascend"])
def test_adam_step_matches_torch_optim(adamw, kernel, monkeypatch):
    calls = []
    if kernel == "fake_ascend":
        def npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, eps, grad, max_grad_norm,
                             amsgrad, maximize, out):
            # torch_npu's documented reference of ApplyAdamW (its test_apply_adam_w cpu_op_exec).
            var, m, v = out
            calls.append((beta1_power, beta2_power))
            b1p, b2p = beta1_power * beta1, beta2_power * beta2
            var.mul_(1 - lr * weight_decay)
            m.mul_(beta1).add_(grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            denom = (v / (1 - b2p)).sqrt() + eps
            var.add_(-lr * m / (1 - b1p) / denom)
            return var, m, v

        monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: npu_apply_adam_w)
    else:
        monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    lr, betas, eps, wd = 3e-3, (0.85, 0.99), 1e-7, 0.05
    ps = _params(torch.float32)
    steps = [[torch.randn_like(p) for p in ps] for _ in range(3)]
    expected = _torch_adam(ps, None, steps, lr, betas, eps, wd, adamw)
    ms, vs = [torch.zeros_like(p) for p in ps], [torch.zeros_like(p) for p in ps]
    for t, grads in enumerate(steps, start=1):
        npu_adam.adam_step(ps, grads, ms, vs, [], t, lr, betas[0], betas[1], eps, wd, True, adamw)
    for p, e in zip(ps, expected):
        torch.testing.assert_close(p.double(), e, rtol=1e-5, atol=1e-6)
    if kernel == "fake_ascend":
        assert len(calls) == 3 * len(ps) and calls[len(ps)] == pytest.approx((betas[0], betas[1]))


def test_adam_step_16bit_params_fp32_state_master_copies_and_no_bias_correction(monkeypatch):
    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    lr, b1, b2, eps, wd = 1e-2, 0.9, 0.999, 1e-8, 0.0
    master = _params(torch.float32)
    copies = [p.to(torch.bfloat16) for p in master]
    grads = [torch.randn_like(p).to(torch.bfloat16) for p in master]
    ms, vs = [torch.rand_like(p) for p in master], [torch.rand_like(p) for p in master]
    ref_p = [p.double().clone() for p in master]
    ref_m = [m.double() * b1 + (1 - b1) * g.double() for m, g in zip(ms, grads)]
    ref_v = [v.double() * b2 + (1 - b2) * g.double() ** 2 for v, g in zip(vs, grads)]
    ref_p = [p - lr * m / (v.sqrt() + eps) for p, m, v in zip(ref_p, ref_m, ref_v)]
    npu_adam.adam_step(master, grads, ms, vs, copies, 5, lr, b1, b2, eps, wd, False, True)
    for p, c, e in zip(master, copies, ref_p):
        torch.testing.assert_close(p.double(), e, rtol=1e-5, atol=1e-6)
        assert torch.equal(c, p.to(torch.bfloat16))
    bf = [p.to(torch.bfloat16) for p in _params(torch.float32)]
    bf_ref = [p.float().clone() for p in bf]
    m32, v32 = [torch.zeros_like(p) for p in bf_ref], [torch.zeros_like(p) for p in bf_ref]
    g = [torch.randn_like(p) for p in bf]
    npu_adam.adam_step(bf, g, m32, v32, [], 1, lr, b1, b2, eps, 0.1, True, True)
    npu_adam.adam_step(bf_ref, [x.float() for x in g], [torch.zeros_like(p) for p in bf_ref],
                       [torch.zeros_like(p) for p in bf_ref], [], 1, lr, b1, b2, eps, 0.1, True, True)
    for p, e in zip(bf, bf_ref):
        assert torch.equal(p, e.to(torch.bfloat16))  # one rounding, at the store


def test_lion_step_matches_the_paper():
    lr, b1, b2, wd = 1e-3, 0.9, 0.99, 0.1
    ps = _params(torch.float32)
    ms = [torch.randn_like(p) for p in ps]
    gs = [torch.randn_like(p) for p in ps]
    exp_p = [p.double() * (1 - lr * wd) - lr * torch.sign(b1 * m.double() + (1 - b1) * g.double())
             for p, m, g in zip(ps, ms, gs)]
    exp_m = [b2 * m.double() + (1 - b2) * g.double() for m, g in zip(ms, gs)]
    copies = [torch.empty_like(p, dtype=torch.float16) for p in ps]
    lion_step(ps, gs, ms, copies, lr, b1, b2, wd)
    for p, m, c, ep, em in zip(ps, ms, copies, exp_p, exp_m):
        torch.testing.assert_close(p.double(), ep, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(m.double(), em, rtol=1e-6, atol=1e-6)
        assert torch.equal(c, p.to(torch.float16))


def test_npu_implementations_check_arguments_like_the_cuda_ops(monkeypatch):
    monkeypatch.setattr(npu_adam, "ascend_kernel", lambda: None)
    ps = _params(torch.float32, 2)
    z = [torch.zeros_like(p) for p in ps]
    with pytest.raises(ValueError, match="step must be >= 1"):
        npu_adam.adam_step(ps, z, z, z, [], 0, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(ValueError, match="got 2 params but 1 grads"):
        npu_adam.adam_step(ps, z[:1], z, z, [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(TypeError, match=r"exp_avgs\[1\] has dtype"):
        npu_adam.adam_step(ps, z, [z[0], z[1].half()], z, [], 1, 1e-3, 0.9, 0.999, 1e-8, 0.0, True, True)
    with pytest.raises(ValueError, match="beta1 must be in"):
        lion_step(ps, z, z, [], 1e-3, 1.5, 0.99, 0.0)
    with pytest.raises(ValueError, match="params is empty"):
        lion_step([], [], [], [], 1e-3, 0.9, 0.99, 0.0)
