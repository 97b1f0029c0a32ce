"""Real DeepSpeed runs on this machine's CPU with anyaccel installed by the one call (or the environment):
ZeRO-2 and ZeRO-3 with CPU optimizer offload at world size 1 and 2 (gloo) train with the same losses as
DeepSpeed's own CPU accelerator; the ``deepspeed`` launcher and ``ds_report`` run.

The optimizer kernel: DeepSpeed's ``DeepSpeedCPUAdam`` calls ``create_adam``/``adam_update``/... on the module
``CPUAdamBuilder().load()`` returns. Until anyaccel's op modules offer that ABI (issue 11, op-ABI half),
the integration falls back to DeepSpeed's own ``CPUAdamBuilder`` (one warning), so these runs pass now and
:func:`test_deepspeed_built_nothing_itself` is the one that depends on the op ABI (xfail until it lands).
"""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integrations.ds_helpers import HERE, base_env, last_json, needs_deepspeed, run_python

pytestmark = [needs_deepspeed, pytest.mark.slow]

TRAIN = str(HERE / "ds_train.py")
VIEW = "anyaccel.integrations.deepspeed.view.CPU_Accelerator"
STEPS = 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def ds_extensions_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """DeepSpeed's JIT cache for the reference runs (and the interim fallback), kept across sessions in
    pytest's cache when it is on: DeepSpeed's cold build of cpu_adam + shm_comm takes ~2 min on 2 cores."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("deepspeed-torch-extensions")) if cache is not None else \
        tmp_path_factory.mktemp("torch-extensions")


def train(accelerator: str, stage: int, world_size: int, env_extra: dict[str, str]) -> list[dict]:
    """Run ``ds_train.py`` on ``world_size`` gloo ranks; return each rank's JSON facts, rank order."""
    port = str(_free_port())
    procs = []
    for rank in range(world_size):
        env = base_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **env_extra)
        procs.append(subprocess.Popen([sys.executable, TRAIN, accelerator, str(stage), str(STEPS)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=900)
        completed = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        assert proc.returncode == 0, f"{accelerator} rank failed:\n{err[-6000:]}"
        results.append(last_json(completed))
    return sorted(results, key=lambda r: r["rank"])


@pytest.mark.parametrize("stage,world_size", list(itertools.product((2, 3), (1, 2))),
                         ids=lambda v: str(v))
def test_zero_offload_losses_equal_deepspeeds_own(stage, world_size, ds_extensions_dir, op_cache_dir):
    env = {"TORCH_EXTENSIONS_DIR": str(ds_extensions_dir), "ANYACCEL_CACHE_DIR": str(op_cache_dir)}
    reference = train("deepspeed", stage, world_size, env)
    ours = train("anyaccel", stage, world_size, env)
    for theirs, mine in zip(reference, ours):
        assert theirs["accelerator"] == "deepspeed.accelerator.cpu_accelerator.CPU_Accelerator"
        assert mine["accelerator"] == VIEW and mine["world_size"] == world_size
        assert mine["optimizer"] == theirs["optimizer"] == "DeepSpeedCPUAdam"
        assert mine["zero_optimizer"] == theirs["zero_optimizer"]
        assert len(mine["losses"]) == STEPS and mine["losses"][-1] < mine["losses"][0]
        largest = max(abs(a - b) for a, b in zip(theirs["losses"], mine["losses"]))
        print(f"\nZeRO-{stage} ws={world_size} rank {mine['rank']}: anyaccel {mine['losses']}\n"
              f"{'':>22}deepspeed {theirs['losses']}\n{'':>22}max |diff| {largest:.3g}")
        # the same kernel runs in both for now (see the module doc), so the losses are bit-identical; once
        # anyaccel's kernel runs, rounding may differ in the last bits
        assert mine["losses"] == pytest.approx(theirs["losses"], rel=1e-5, abs=1e-7)


def test_offload_states_round_trip_like_deepspeeds_own(op_cache_dir):
    """``engine.offload_states()`` (issue 11: it stopped on the missing ``pin_empty_like``) and back."""
    results = {}
    for accelerator in ("deepspeed", "anyaccel"):
        env = base_env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
                       ANYACCEL_CACHE_DIR=str(op_cache_dir))
        proc = run_python([str(HERE / "ds_offload_states.py"), accelerator], env)
        assert proc.returncode == 0, proc.stderr[-6000:]
        results[accelerator] = last_json(proc)
    assert results["anyaccel"]["accelerator"] == VIEW
    assert results["anyaccel"]["losses"] == pytest.approx(results["deepspeed"]["losses"], rel=1e-6)


@pytest.mark.xfail(strict=False, reason=(
    "depends on the op ABI (issue 11, op-ABI half): anyaccel's cpu_adam module has no create_adam/adam_update/"
    "destroy_adam yet, so with the interim fallback off DeepSpeedCPUAdam cannot get a kernel from anyaccel"))
def test_deepspeed_built_nothing_itself(tmp_path, op_cache_dir):
    """With the fallback off, ZeRO-2 offload trains and DeepSpeed's TORCH_EXTENSIONS_DIR stays empty:
    the kernels came from anyaccel's cache. THE assertion that depends on the op ABI."""
    extensions = tmp_path / "torch-extensions"
    extensions.mkdir()
    env = {"TORCH_EXTENSIONS_DIR": str(extensions), "ANYACCEL_CACHE_DIR": str(op_cache_dir),
           "ANYACCEL_DEEPSPEED_ABI_FALLBACK": "0"}
    (result,) = train("anyaccel", 2, 1, env)
    assert result["losses"][-1] < result["losses"][0]
    assert list(extensions.iterdir()) == [], "DeepSpeed JIT-built ops itself"
    assert "anyaccel" in result["kernel_module"]


@pytest.mark.parametrize("how,ranks", [("visible-devices", 1), ("num-gpus", 2)])
def test_deepspeed_launcher_runs_a_script_with_anyaccel(hook_dir, tmp_path, how, ranks):
    """``deepspeed`` (its runner and launch.py) with the startup hook, every rank on anyaccel.

    visible-devices: the runner reads ``get_accelerator().visible_devices_envs()[0]`` (the IndexError of issue
    11 with an empty list) and turns ``CUDA_VISIBLE_DEVICES=0`` into ``--include localhost:0``; num-gpus:
    ``--num_gpus 2`` starts two gloo ranks that all-reduce.
    """
    launcher = shutil.which("deepspeed", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("the deepspeed launcher script is not installed next to this Python")
    out = tmp_path / "out"
    out.mkdir()
    env = base_env(hook_dir, ANYACCEL_DEEPSPEED="1")
    args = [launcher, "--master_port", str(_free_port())]
    if how == "visible-devices":
        env["CUDA_VISIBLE_DEVICES"] = "0"
    else:
        args += ["--num_gpus", str(ranks)]
    proc = subprocess.run([*args, str(HERE / "ds_launched.py"), str(out)], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    if how == "visible-devices":
        assert "Detected VISIBLE_DEVICES=0: setting --include=localhost:0" in output
    facts = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
    for rank, rank_facts in enumerate(facts):
        assert rank_facts["rank"] == rank and rank_facts["world_size"] == ranks
        assert rank_facts["all_reduce"] == sum(range(1, ranks + 1))
        assert rank_facts["accelerator"] == VIEW
        assert rank_facts["visible_devices"] == {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(ranks)))}


def test_ds_report_runs_with_anyaccel(hook_dir):
    report = shutil.which("ds_report", path=str(Path(sys.executable).parent))
    args = [report] if report else None
    env = base_env(hook_dir, ANYACCEL_DEEPSPEED="1")
    if args is None:
        proc = run_python(["-m", "deepspeed.env_report"], env)
    else:
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout
    assert "DeepSpeed C++/CUDA extension op report" in lines
    for op in ("cpu_adam", "cpu_lion", "deepspeed_not_implemented"):
        assert op in lines, op
    assert "async_io" not in lines  # DeepSpeed's own CPU builders are not listed: anyaccel's are
