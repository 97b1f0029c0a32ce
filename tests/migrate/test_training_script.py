"""The migrated CUDA-only training script runs on the CPU accelerator and gives the original's result.

The original (``examples/cuda_only_train.py``) runs CUDA-free through its ``torch.cuda.is_available()``
fallbacks; the migrated copy takes its accelerator branches instead (the CPU accelerator is available),
so ``.to(device_name())``, ``pin_memory``, ``on_accelerator``, ``torch.amp.GradScaler`` and
``synchronize`` all really run. Both must produce the same losses on fresh random data.
"""

from __future__ import annotations

import importlib.util
import random
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from anyaccel.migrate.engine import migrate_source

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "cuda_only_train.py"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp deprecation in the original
        spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="compares against the original's CUDA-free run")
def test_migrated_script_matches_original_on_cpu(tmp_path: Path) -> None:
    from anyaccel import get_accelerator

    assert get_accelerator().device_name() == "cpu"
    result = migrate_source(SCRIPT.read_text(encoding="utf-8"), str(SCRIPT))
    assert result.findings == () and result.changed
    code = result.rewritten.split('"""', 2)[2]  # after the module docstring, which mentions torch.cuda
    assert "torch.cuda" not in code and ".cuda(" not in code
    migrated = tmp_path / "migrated_train.py"
    migrated.write_text(result.rewritten, encoding="utf-8")

    seed = random.randrange(1, 2**31)
    original = _load(SCRIPT, "cuda_only_train_original")
    rewritten = _load(migrated, "cuda_only_train_migrated")
    assert original.use_cuda is False
    assert rewritten.use_cuda is True  # the accelerator branches run
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        expected = original.train(seed)
    actual = rewritten.train(seed)
    assert len(actual) == len(expected) == 5
    assert len(set(expected)) > 1  # a real training run, not a constant
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=1e-6, atol=1e-7)
