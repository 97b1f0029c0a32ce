"""CI-side tests of the GPU op builders and the implementation loader: no GPU, no compiler run."""

from __future__ import annotations

import pytest

from anyaccel.op_builder.toolchains import cuda_flags
from anyaccel.ops import dispatch as implementations
from anyaccel.op_builder.fused_adam import FusedAdamBuilder
from anyaccel.op_builder.fused_lion import FusedLionBuilder


@pytest.mark.parametrize(
    "arch_list,expected",
    [
        (["9.0"], ["-gencode=arch=compute_90,code=sm_90"]),
        (["9.0a"], ["-gencode=arch=compute_90a,code=sm_90a"]),
        (["8.0", "9.0+PTX"], ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                              "-gencode=arch=compute_90,code=compute_90"]),
        (["10.0f"], ["-gencode=arch=compute_100f,code=sm_100f"]),
        (["9.0", "9.0"], ["-gencode=arch=compute_90,code=sm_90"]),
    ],
)
def test_gencode_flags(arch_list, expected):
    assert cuda_flags.gencode_flags(arch_list) == expected


@pytest.mark.parametrize("bad", [["sm_90"], ["9"], ["9.0b"], []])
def test_gencode_rejects_bad_entries(bad):
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        cuda_flags.gencode_flags(bad)


def test_rocm_arch_flags_and_validation():
    assert cuda_flags.rocm_arch_flags(["gfx90a", "gfx942", "gfx90a"]) == ["--offload-arch=gfx90a",
                                                                          "--offload-arch=gfx942"]
    with pytest.raises(ValueError, match="PYTORCH_ROCM_ARCH"):
        cuda_flags.rocm_arch_flags(["9.0"])


@pytest.mark.parametrize(
    "hip,cuda,expected",
    [("6.2.41133", None, "rocm"), (None, "13.0", "cuda"), (None, None, None), ("6.2", "12.4", "rocm")],
)
def test_hipify_decision(hip, cuda, expected):
    tk = cuda_flags.toolkit_for(hip, cuda)
    assert (tk.name if tk else None) == expected
    if tk is not None:
        assert tk.hipify == (expected == "rocm")


@pytest.mark.parametrize("builder_cls", [FusedAdamBuilder, FusedLionBuilder])
def test_builder_flags_from_explicit_arch_list(builder_cls, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0a")
    b = builder_cls()
    monkeypatch.setattr(b, "toolkit", lambda: cuda_flags.TOOLKITS["cuda"])
    args = b.nvcc_args()
    assert "-gencode=arch=compute_90a,code=sm_90a" in args and "-gencode=arch=compute_80,code=sm_80" in args
    assert all(not a.startswith("-arch") for a in args)
    assert b.arch_list() == ["8.0", "9.0a"]
    assert not any(a.startswith("-std=") for a in args + b.cxx_args())  # torch passes the standard its headers need
    for src in b.sources():
        assert src.endswith(".cu")
        text = (b.source_root() / src).read_text(encoding="utf-8")
        assert "TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE" in text and "torch/extension.h" not in text


def test_builder_without_arch_list_or_gpu_raises(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    monkeypatch.setattr("anyaccel.op_builder.toolchains.cuda.visible_capabilities", lambda: [])
    with pytest.raises(ValueError, match="TORCH_CUDA_ARCH_LIST"):
        FusedAdamBuilder().arch_list()


def test_compatibility_reason_on_cpu_torch(monkeypatch):
    b = FusedAdamBuilder()
    monkeypatch.setattr(b, "toolkit", lambda: None)
    ok, reason = b.compatibility()
    assert not ok and "CPU-only" in reason


# ---- the implementation loader ---------------------------------------------------------------------


def _impl(name, priority, available, device_types=("cuda",), op="toy_op"):
    return implementations.Implementation(
        op=op, name=name, priority=priority, device_types=device_types,
        probe=lambda: (available, "ok" if available else "missing"),
        loader=lambda: type("M", (), {"which": name})(),
    )


@pytest.fixture
def toy_op(monkeypatch):
    monkeypatch.setattr(implementations, "_registry", {})
    monkeypatch.setattr(implementations, "_loaded", {})
    monkeypatch.setattr(implementations, "_chosen", {})
    monkeypatch.setattr(implementations, "_builtins_done", True)
    monkeypatch.delenv("ANYACCEL_IMPL_TOY_OP", raising=False)
    for impl in (_impl("fast", 20, False), _impl("mid", 10, True), _impl("slow", 1, True),
                 _impl("xpu_only", 30, True, ("xpu",))):
        implementations.register_implementation(impl)
    return "toy_op"


def test_priority_picks_highest_available(toy_op):
    assert implementations.choose(toy_op, "cuda").name == "mid"
    assert implementations.choose(toy_op, "xpu").name == "xpu_only"
    assert implementations.load(toy_op, "cuda").which == "mid"


def test_force_by_argument_and_env(toy_op, monkeypatch):
    assert implementations.choose(toy_op, "cuda", "slow").name == "slow"
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "slow")
    assert implementations.choose(toy_op, "cuda").name == "slow"
    assert implementations.choose(toy_op, "cuda", "mid").name == "mid"  # the argument wins over the variable


def test_forcing_unknown_or_unavailable_raises(toy_op, monkeypatch):
    with pytest.raises(implementations.UnknownImplementationError, match="registered"):
        implementations.choose(toy_op, "cuda", "nope")
    with pytest.raises(implementations.NoImplementationError, match="missing"):
        implementations.choose(toy_op, "cuda", "fast")
    with pytest.raises(implementations.NoImplementationError, match="not cuda"):
        implementations.choose(toy_op, "cuda", "xpu_only")


def test_register_user_implementation_and_explain(toy_op):
    implementations.register_implementation(_impl("mine", 99, True))
    with pytest.raises(ValueError, match="already registered"):
        implementations.register_implementation(_impl("mine", 5, True))
    assert implementations.choose(toy_op, "cuda").name == "mine"
    lines = {c.name: c for c in implementations.explain(toy_op, "cuda")}
    assert lines["mine"].chosen and not lines["mid"].chosen
    assert not lines["fast"].available and lines["fast"].reason == "missing"


def test_no_available_implementation_lists_reasons(toy_op):
    with pytest.raises(implementations.NoImplementationError, match="fast: serves cuda, not mps"):
        implementations.choose(toy_op, "mps")


def test_builtin_ops_are_registered_with_cuda_above_triton():
    for op in ("fused_adam", "fused_lion"):
        on_cuda = [i.name for i in implementations.implementations(op) if "cuda" in i.device_types]
        assert on_cuda == ["cuda", "triton"]
        on_xpu = [i.name for i in implementations.implementations(op) if "xpu" in i.device_types]
        assert on_xpu == ["sycl", "triton"]  # SYCL (priority 20) above Triton (10) on Intel GPUs
        assert [i.name for i in implementations.implementations(op) if "npu" in i.device_types] == ["npu"]


def test_load_probes_once_and_caches_the_choice(toy_op, monkeypatch):
    calls = []
    impl = _impl("counted", 50, True)
    probe = impl.probe
    implementations.register_implementation(implementations.Implementation(
        impl.op, impl.name, impl.priority, impl.device_types, lambda: calls.append(1) or probe(), impl.loader))
    first = implementations.load(toy_op, "cuda")
    assert first.which == "counted" and implementations.load(toy_op, "cuda") is first
    assert len(calls) == 1
    monkeypatch.setenv("ANYACCEL_IMPL_TOY_OP", "mid")  # the variable is read on every call
    assert implementations.load(toy_op, "cuda").which == "mid"
