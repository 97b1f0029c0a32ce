"""NPUOpBuilder, CANN toolkit discovery and the NPU builds of the op specs, without an NPU.

Toolkit layouts are copied from tests/op_builder/fixtures/fake_toolchains/ascend; a fake ``torch_npu``
package on ``sys.path`` stands for the vendor package (found, never imported, by the builders). Compiled NPU
ops build through the ninja driver (its run is captured); the spec's NPU builds compile nothing and load the
Python implementations (tested in tests/ops/adam/test_npu_adam.py and tests/ops/lion/test_npu_lion.py).
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from opb_helpers import HERE

from anyaccel.op_builder.backends import npu as npu_mod
from anyaccel.op_builder.backends.npu import NPUDelegatingBuilder, NPUOpBuilder, find_ascend_toolkit, find_torch_npu
from anyaccel.op_builder.classes import builder_class
from anyaccel.op_builder.core import manifest as mf
from anyaccel.op_builder.errors import BuildError, ToolchainError
from anyaccel.op_builder.toolchains import ninja as nj

FAKE_ASCEND = HERE / "fixtures" / "fake_toolchains" / "ascend" / "latest"
NPUFusedAdamBuilder = builder_class("adam", "fused_adam_npu")
NPUFusedLionBuilder = builder_class("lion", "fused_lion_npu")


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
    ident = tk.identity()
    assert ident["home"] == str(first) and ident["version"] == "7.0.0" and ident["libascendcl"]["size"] == 16


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
    assert inputs["torch_npu"] is None  # the fake package has no distribution metadata
    assert ToyNPUBuilder().compatibility() == (True, "")
    key = mf.compute_key(inputs)
    (home / "x86_64-linux" / "ascend_toolkit_install.info").write_text("version=8.1.RC1\n")
    assert mf.compute_key(ToyNPUBuilder().key_inputs()) != key
    env = ToyNPUBuilder().preflight()
    assert env["ASCEND_HOME_PATH"] == str(home)
    seen: dict = {}

    def fake_run_ninja(ninja, build_dir, jobs, env, timeout_s, **_progress):
        seen["file"] = (Path(build_dir) / "build.ninja").read_text()
        seen["env"] = dict(env)
        return nj.NinjaResult(1, "FAILED: x.o\nc++ -c toy.cpp\ntoy.cpp:1: error: boom\n", 0.0)

    monkeypatch.setattr(nj, "run_ninja", fake_run_ninja)
    with pytest.raises(BuildError) as err:
        ToyNPUBuilder().load()
    assert err.value.code == "compile_error"
    lines = seen["file"].splitlines()
    compile_cmd = shlex.split(next(x for x in lines if " -c " in x).split("command = ", 1)[1].replace("$$", "$"))
    link = shlex.split(next(x for x in lines if "-shared" in x).split("command = ", 1)[1].replace("$$", "$"))
    assert f"-I{home / 'include'}" in compile_cmd and "-DANYACCEL_OP_NAMESPACE=" + b.namespace(
        mf.compute_key(ToyNPUBuilder().key_inputs())) in compile_cmd
    assert "-lascendcl" in link and f"-L{home / 'lib64'}" in link and "-ltorch_cpu" in link
    assert seen["env"]["ASCEND_HOME_PATH"] == str(home)


def test_no_torch_npu_is_incompatible(no_ascend, monkeypatch):
    monkeypatch.setattr(npu_mod, "find_torch_npu", lambda: None)
    ok, reason = ToyNPUBuilder().compatibility()
    assert not ok and "torch_npu is not installed" in reason


# ---- the spec's NPU builds: delegation to Python over torch_npu's kernels -----------------------------------


def test_the_npu_builds_delegate_and_compile_nothing(no_ascend):
    for cls, family in ((NPUFusedAdamBuilder, "adam"), (NPUFusedLionBuilder, "lion")):
        assert issubclass(cls, NPUDelegatingBuilder) and cls.BACKEND == "npu" and cls.DEVICE_TYPE == "npu"
        assert cls.BUILD.module == f"anyaccel.ops.{family}.npu:load" and cls().sources() == []
        assert cls().is_built()


def test_delegating_builders_need_torch_npu(no_ascend, monkeypatch):
    monkeypatch.setattr(npu_mod, "find_torch_npu", lambda: None)
    ok, reason = NPUFusedAdamBuilder().compatibility()
    assert not ok and "torch_npu" in reason
    with pytest.raises(ImportError, match="torch_npu"):
        NPUFusedLionBuilder().load()


def test_delegating_builders_are_compatible_with_torch_npu_alone(no_ascend, fake_torch_npu):
    assert NPUFusedAdamBuilder().compatibility() == (True, "")  # no toolkit, no compiler needed
    assert NPUFusedAdamBuilder().build_prebuilt(no_ascend) == Path(
        __import__("anyaccel.ops.adam.npu", fromlist=["load"]).__file__)
    assert NPUFusedLionBuilder().build_prebuilt(no_ascend).name == "npu.py"
    assert "torch_npu" not in sys.modules


#: A torch_npu stand-in that does on import what torch_npu does: name torch's PrivateUse1 backend "npu".
_RENAMING_TORCH_NPU = "import torch\ntorch.utils.rename_privateuse1_backend('npu')\n"

_LOAD_BOTH = """
import json, sys
{prelude}
from anyaccel.op_builder.classes import builder_class
adam = builder_class("adam", "fused_adam_npu")().load()
lion = builder_class("lion", "fused_lion_npu")().load()
lacking = getattr(adam, "adam_step_planned_capturable", None)  # a name of the spec the build lacks
print(json.dumps({{"adam": str(adam.adam_step.default._schema), "lion": str(lion.lion_step.default._schema),
                  "torch_npu_imported": "torch_npu" in sys.modules, "lacking": lacking,
                  "integrations": [m for m in sys.modules if m.startswith("anyaccel.integrations")]}}))
"""


def _load_in_a_child(tmp_path: Path, prelude: str) -> subprocess.CompletedProcess:
    """Load both NPU builds in a fresh process (renaming PrivateUse1 cannot be undone) with a torch_npu that
    renames it on import."""
    site = tmp_path / "npu-site"
    (site / "torch_npu").mkdir(parents=True)
    (site / "torch_npu" / "__init__.py").write_text(_RENAMING_TORCH_NPU)
    import os

    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-c", _LOAD_BOTH.format(prelude=prelude)], env=env, capture_output=True,
                          text=True, timeout=300)


def test_delegating_builders_load_the_specs_ops_for_the_npu(tmp_path):
    proc = _load_in_a_child(tmp_path, "import torch_npu")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["adam"].startswith("anyaccel_npu_adam::adam_step(Tensor(a!)[] params, Tensor[] grads")
    assert out["lion"].startswith("anyaccel_npu_lion::lion_step(Tensor(a!)[] params")
    assert out["lacking"] is None and out["integrations"] == []  # loading asks no integration (DeepSpeed's ABI)


def test_delegating_builders_load_before_torch_npu_is_imported(tmp_path):
    proc = _load_in_a_child(tmp_path, "pass")
    assert proc.returncode == 0, proc.stderr[-3000:]
