"""DeepSpeed on anyaccel on NVIDIA GPUs: ZeRO-2 on two GPUs with NCCL and DeepSpeed's
``FusedAdam`` running anyaccel's CUDA kernel (``multi_tensor_adam`` over the ``fused_adam`` build), and
ZeRO-Offload (``DeepSpeedCPUAdam`` over anyaccel's ``cpu_adam``) on one GPU; each against the same run on
DeepSpeed's own CUDA accelerator, and with DeepSpeed building nothing itself.

    python -m pytest -m gpu tests/integrations            # on a machine with 2 GPUs, DeepSpeed 0.19.8 installed

Skipped without DeepSpeed or without enough CUDA GPUs. Step times and first-step latency:
``benchmarks/deepspeed_zero.py`` (timings are never asserted).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.ds_helpers import (
    assert_anyaccel_ran_everything,
    compare_losses,
    needs_deepspeed,
    train,
)


def _cuda_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


pytestmark = [needs_deepspeed, pytest.mark.gpu, pytest.mark.slow]


@pytest.fixture(scope="module")
def ds_extensions_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSpeed's JIT cache for the reference runs (its cold fused_adam + cpu_adam builds take minutes)."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("deepspeed-torch-extensions-gpu")) if cache is not None else \
        tmp_path_factory.mktemp("torch-extensions")


def _env(extensions: Path, op_cache_dir: Path) -> dict[str, str]:
    return {"TORCH_EXTENSIONS_DIR": str(extensions), "ANYACCEL_CACHE_DIR": str(op_cache_dir)}


@pytest.mark.skipif(_cuda_gpus() < 2, reason="needs two CUDA GPUs")
def test_zero2_on_two_gpus_runs_fused_adam_on_anyaccels_cuda_kernel(ds_extensions_dir, op_cache_dir, tmp_path):
    reference = train("deepspeed", 2, 2, _env(ds_extensions_dir, op_cache_dir), "Adam", "none")
    extensions = tmp_path / "torch-extensions"
    extensions.mkdir()
    ours = train("anyaccel", 2, 2, _env(extensions, op_cache_dir), "Adam", "none")
    assert [r["optimizer"] for r in reference] == ["FusedAdam", "FusedAdam"]
    assert_anyaccel_ran_everything(ours, extensions, "FusedAdam", "fused_adam", accelerator="CUDA_Accelerator")
    compare_losses("ZeRO-2 2xGPU NCCL FusedAdam", reference, ours)


@pytest.mark.skipif(_cuda_gpus() < 1, reason="needs a CUDA GPU")
def test_zero_offload_on_one_gpu_runs_cpu_adam_on_anyaccels_kernel(ds_extensions_dir, op_cache_dir, tmp_path):
    reference = train("deepspeed", 2, 1, _env(ds_extensions_dir, op_cache_dir), "AdamW", "cpu")
    extensions = tmp_path / "torch-extensions"
    extensions.mkdir()
    ours = train("anyaccel", 2, 1, _env(extensions, op_cache_dir), "AdamW", "cpu")
    assert reference[0]["optimizer"] == "DeepSpeedCPUAdam"
    assert_anyaccel_ran_everything(ours, extensions, "DeepSpeedCPUAdam", "cpu_adam", accelerator="CUDA_Accelerator")
    compare_losses("ZeRO-Offload 1xGPU CPU Adam", reference, ours)
