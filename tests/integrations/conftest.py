"""Fixtures of the DeepSpeed integration tests (helpers in ``ds_helpers.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integrations.ds_helpers import base_env, run_python


@pytest.fixture(scope="session")
def hook_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory standing in for site-packages with the startup hook: ``anyaccel-deepspeed.pth`` plus the
    ``sitecustomize.py`` that processes it (``python -m anyaccel.integrations.deepspeed write-pth DIR
    --sitecustomize``). Put it first on ``PYTHONPATH`` and set ``ANYACCEL_DEEPSPEED=1``.
    """
    directory = tmp_path_factory.mktemp("hook-site")
    proc = run_python(["-m", "anyaccel.integrations.deepspeed", "write-pth", str(directory), "--sitecustomize"],
                      base_env())
    assert proc.returncode == 0, proc.stderr
    assert (directory / "anyaccel-deepspeed.pth").is_file() and (directory / "sitecustomize.py").is_file()
    return directory
