"""``anyaccel.integrations.deepspeed.install()``: before and after ``import deepspeed``, through the startup hook,
idempotent, undoable, version-checked; builders as DeepSpeed's callers expect them; packaging of the hook.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.integrations.ds_helpers import HERE, REPO, base_env, last_json, needs_deepspeed, run_python

PROBE = str(HERE / "ds_probe.py")
VIEW_CLASS = "anyaccel.integrations.deepspeed.view.CPU_Accelerator"
ADAPTER = "anyaccel.integrations.deepspeed.builders."
DEEPSPEED_NOT_IMPLEMENTED = "deepspeed.ops.op_builder.cpu.no_impl.NotImplementedBuilder"


def _probe(*args: str, env: dict | None = None) -> dict:
    proc = run_python([PROBE, *args], env or base_env())
    assert proc.returncode == 0, proc.stderr[-6000:]
    return last_json(proc)


def _assert_wired(facts: dict) -> None:
    assert facts["accelerator_class"] == VIEW_CLASS and facts["accelerator_name"] == "cpu"
    assert facts["deepspeed_abc"] is True and facts["shares_state_with_anyaccel"] is True
    builders = facts["builders"]
    # anyaccel's builders where anyaccel implements one (the Fused* ones: its CPU builds under DeepSpeed's names)...
    for name in ("CPUAdamBuilder", "CPULionBuilder", "CPUAdagradBuilder", "FusedAdamBuilder", "FusedLionBuilder",
                 "FusedLambBuilder", "AsyncIOBuilder", "PinMemoryBuilder"):
        assert builders[name] == ADAPTER + name, name
    assert facts["cpu_adam_module_binding"] == ADAPTER + "CPUAdamBuilder"  # bound by name in ops/adam/cpu_adam
    # ...DeepSpeed's placeholder elsewhere, and DeepSpeed's own NotImplementedBuilder under its own name
    for name in ("ShareMemCommBuilder", "TransformerBuilder"):
        assert builders[name] == f"{ADAPTER}AnyaccelNotImplemented{name}", name
    assert builders["NotImplementedBuilder"] == DEEPSPEED_NOT_IMPLEMENTED
    assert facts["placeholder_is_not_implemented"] is True
    assert facts["placeholder_name"] == ["deepspeed_not_implemented", False]
    error, is_value_error, message = facts["placeholder_load"]
    assert error == "DeepSpeedBuilderNotImplementedError" and is_value_error
    assert "'ShareMemCommBuilder'" in message and "CPUAdamBuilder" in message and "ANYACCEL_DEEPSPEED" in message
    # ds_report's table and DeepSpeed's compatibility probe, with builder .name
    # (DeepSpeed's CPU FusedAdamBuilder is anyaccel's cpu_adam build: one entry; cpu_lamb, which DeepSpeed's CPU
    # package lacks, is there because anyaccel answers FusedLambBuilder on the CPU)
    assert facts["all_ops"] == ["async_io", "cpu_adagrad", "cpu_adam", "cpu_lamb", "cpu_lion",
                                "deepspeed_not_implemented", "pin_memory"]
    assert facts["compatible_ops"] == {"deepspeed_not_implemented": False, "cpu_adam": True, "cpu_lion": True,
                                       "cpu_adagrad": True, "async_io": True, "cpu_lamb": True, "pin_memory": True}
    assert facts["cpu_adam_name"] == ["cpu_adam", "cpu_adam"]
    # DeepSpeed's return values where its code depends on them
    assert facts["visible_devices_envs"] == ["CUDA_VISIBLE_DEVICES"] and facts["fp64"] is True
    assert facts["op_builder_dir"] == "deepspeed.ops.op_builder.cpu"
    assert facts["runtime_utils_bound_to_current"] is True
    # anyaccel's own API stays strict: an unknown name lists the valid ones
    assert "unknown op builder 'ShareMemCommBuilder'" in facts["anyaccel_unknown_op"]
    assert "CPUAdamBuilder" in facts["anyaccel_unknown_op"]


@needs_deepspeed
def test_install_before_import_deepspeed():
    facts = _probe("before", "--twice")
    assert facts["install_returned"] == "None"  # wired when DeepSpeed's real_accelerator is imported
    assert facts["twice_same_object"] is True
    _assert_wired(facts)


@needs_deepspeed
def test_install_after_import_deepspeed_rebinds_and_uninstall_restores():
    facts = _probe("after", "--uninstall")
    assert facts["install_returned_is_current"] is True
    _assert_wired(facts)
    after = facts["after_uninstall"]
    assert after["accelerator_class"] == "deepspeed.accelerator.cpu_accelerator.CPU_Accelerator"
    own = "deepspeed.ops.op_builder.cpu.cpu_adam.CPUAdamBuilder"
    assert after["cpu_adam"] == after["cpu_adam_module_binding"] == own
    assert "pin_memory" in after["all_ops"] and after["is_wired"] is False


@needs_deepspeed
def test_install_again_follows_a_new_anyaccel_choice():
    facts = _probe("after", "--switch")
    assert facts["switched_class_mro"] == ["SwitchedAccelerator", "DeepSpeedFacingAccelerator", "SwitchedAccelerator"]
    assert facts["shares_state_with_anyaccel"] is True and facts["switched_cpu_adam_binding_follows"] is True


@needs_deepspeed
def test_startup_hook_wires_only_when_the_variable_is_set(hook_dir):
    on = _probe("hook", env=base_env(hook_dir, ANYACCEL_DEEPSPEED="1"))
    _assert_wired(on)
    off = _probe("hook", env=base_env(hook_dir, ANYACCEL_DEEPSPEED="0"))
    assert off["anyaccel_imported"] is False  # the hook is a no-op: anyaccel is not even imported
    assert off["accelerator_class"] == "deepspeed.accelerator.cpu_accelerator.CPU_Accelerator"


def test_startup_hook_costs_nothing_at_interpreter_start(hook_dir):
    code = "import sys, json; print(json.dumps(sorted(m for m in sys.modules if m.startswith(('anyaccel', 'torch', " \
           "'deepspeed', '_anyaccel')))))"
    for value, expected in (("1", ["_anyaccel_deepspeed_startup"]), ("", [])):
        proc = run_python(["-c", code], base_env(hook_dir, ANYACCEL_DEEPSPEED=value))
        assert proc.returncode == 0 and json.loads(proc.stdout) == expected, proc.stderr


def test_importing_the_integration_imports_no_deepspeed():
    code = ("import sys, anyaccel.integrations.deepspeed as d; d.status(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'deepspeed'))")
    proc = run_python(["-c", code], base_env())
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_version_check(monkeypatch):
    from anyaccel.integrations.deepspeed import (
        DeepSpeedNotInstalledError,
        UntestedDeepSpeedVersionError,
        version,
    )

    monkeypatch.delenv(version.ALLOW_UNTESTED_ENV, raising=False)
    monkeypatch.setattr(version, "installed_version", lambda: "0.19.8+cu128")
    assert version.check_version() == "0.19.8+cu128"
    monkeypatch.setattr(version, "installed_version", lambda: "0.20.1")
    with pytest.raises(UntestedDeepSpeedVersionError) as info:
        version.check_version()
    message = str(info.value)
    assert "0.20.1" in message and "0.19.8" in message and version.ALLOW_UNTESTED_ENV in message
    assert info.value.found == "0.20.1" and info.value.tested == version.TESTED_VERSIONS
    assert version.check_version({version.ALLOW_UNTESTED_ENV: "1"}) == "0.20.1"
    monkeypatch.setattr(version, "installed_version", lambda: None)
    with pytest.raises(DeepSpeedNotInstalledError, match="pip install deepspeed==0.19.8"):
        version.check_version()


def test_install_refuses_an_untested_deepspeed_through_the_hook(hook_dir, tmp_path):
    """The env route raises the typed error at ``import deepspeed`` (a fake, newer DeepSpeed distribution)."""
    fake = tmp_path / "fake"
    (fake / "deepspeed").mkdir(parents=True)
    (fake / "deepspeed" / "__init__.py").write_text("")
    (fake / "deepspeed-9.9.9.dist-info").mkdir()
    metadata = "Metadata-Version: 2.1\nName: deepspeed\nVersion: 9.9.9\n"
    (fake / "deepspeed-9.9.9.dist-info" / "METADATA").write_text(metadata)
    env = base_env(hook_dir, ANYACCEL_DEEPSPEED="1")
    env["PYTHONPATH"] = f"{hook_dir}:{fake}:{REPO}"
    proc = run_python(["-c", "import deepspeed"], env)
    assert proc.returncode != 0 and "UntestedDeepSpeedVersionError" in proc.stderr
    assert "ANYACCEL_DEEPSPEED_ALLOW_UNTESTED=1" in proc.stderr
    env["ANYACCEL_DEEPSPEED_ALLOW_UNTESTED"] = "1"
    assert run_python(["-c", "import deepspeed"], env).returncode == 0


def test_status_and_report(hook_dir):
    from anyaccel.integrations.deepspeed import status

    data = status()
    installed = importlib.util.find_spec("deepspeed") is not None
    assert data["installed"] is installed and data["wired"] is False
    if installed:
        assert data["version"] == importlib.metadata.version("deepspeed")
    proc = run_python(["-m", "anyaccel", "report", "--json"], base_env(hook_dir, ANYACCEL_DEEPSPEED="1"))
    assert proc.returncode == 0, proc.stderr
    ds = json.loads(proc.stdout)["deepspeed"]
    # an installed anyaccel wheel (editable ones too) ships the hook into site-packages, which the
    # interpreter reads before PYTHONPATH: that one is reported then, else the test's stand-in
    shipped = Path(sysconfig.get_paths()["purelib"]) / "anyaccel-deepspeed.pth"
    expected = shipped if shipped.is_file() else hook_dir / "anyaccel-deepspeed.pth"
    assert ds["startup_hook"] == str(expected) and ds["hook_active"] is installed
    text = run_python(["-m", "anyaccel", "report"], base_env(hook_dir, ANYACCEL_DEEPSPEED="1")).stdout
    assert "deepspeed: " in text and ("wired at import" in text or "not installed" in text)


@pytest.mark.slow
@needs_deepspeed
def test_wheels_ship_the_startup_hook(tmp_path):
    """Regular and editable (PEP 660) wheels carry ``anyaccel-deepspeed.pth``; the installed wheel's hook works."""
    import subprocess

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    src = tmp_path / "src"
    for name in files:
        if not name.startswith("tests/") and (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            (src / name).write_bytes((REPO / name).read_bytes())
    env = base_env()
    env["PYTHONPATH"] = ""
    wheel = run_python(["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "w"),
                        str(src)], env, cwd=src)
    assert wheel.returncode == 0, wheel.stderr
    build_editable = f"from setuptools import build_meta; build_meta.build_editable({str(tmp_path / 'e')!r})"
    editable = run_python(["-c", build_editable], env, cwd=src)
    assert editable.returncode == 0, editable.stderr
    for path, extra in ((next((tmp_path / "w").glob("*.whl")), "_anyaccel_deepspeed_startup.py"),
                        (next((tmp_path / "e").glob("*.whl")), None)):
        names = zipfile.ZipFile(path).namelist()
        assert "anyaccel-deepspeed.pth" in names, (path.name, [n for n in names if "/" not in n])
        assert extra is None or extra in names
    target = tmp_path / "site"
    assert run_python(["-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                       str(next((tmp_path / "w").glob("*.whl")))], env).returncode == 0
    # a fresh interpreter whose first site dir is the installed wheel, the test environment's second
    venv_site = next(p for p in sys.path if p.endswith("site-packages"))
    code = (f"import site; site.addsitedir({str(target)!r}); site.addsitedir({venv_site!r}); "
            "import deepspeed, anyaccel; from deepspeed.accelerator import get_accelerator as g; "
            "print(type(g()).__module__, anyaccel.__file__)")
    proc = run_python(["-S", "-c", code], dict(env, ANYACCEL_DEEPSPEED="1"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    module, location = proc.stdout.split()[-2:]
    assert module == "anyaccel.integrations.deepspeed.view" and location.startswith(str(target))


def test_no_test_folder_stands_in_for_deepspeed():
    """A ``deepspeed`` folder among the tests would be found as a namespace package on the runner's
    ``sys.path`` when DeepSpeed is missing, and every ``needs_deepspeed`` test would run and fail."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    assert spec is None or spec.origin is not None, f"'deepspeed' resolves to folders {spec.submodule_search_locations}"
