"""scripts/run_deepspeed_tests.py: JUnit parsing, the per-test diff, the selections, the network namespaces, and
whole runs over a tiny fake DeepSpeed test tree (no DeepSpeed checkout needed)."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run_deepspeed_tests.py"

_spec = importlib.util.spec_from_file_location("run_deepspeed_tests", SCRIPT)
assert _spec and _spec.loader
rdt = importlib.util.module_from_spec(_spec)
sys.modules["run_deepspeed_tests"] = rdt  # dataclasses look their module up by name
_spec.loader.exec_module(rdt)

# What pytest writes for: a passing method, a failing function, a skip, an error in setup, a test that failed and
# whose teardown errored too (two testcase elements), a collection error, an xfail, and the nameless testcase
# pytest writes for a test that SIGINT interrupted.
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="2" failures="2" skipped="2" tests="8">
<testcase classname="unit.ops.adam.test_cpu_adam.TestCPUAdam" name="test_step[fp32-22]" time="0.1"/>
<testcase classname="unit.v1.accelerator.test_accelerator" name="test_pin" time="0.1">
  <failure message="AssertionError: pinned&#10;second line">trace</failure></testcase>
<testcase classname="unit.runtime.test_fp16.TestFP16" name="test_amp" time="0">
  <skipped type="pytest.skip" message="fp16 is not supported">skip</skipped></testcase>
<testcase classname="unit.comm.test_dist" name="test_init" time="0">
  <error message="failed on setup with &quot;RuntimeError: port&quot;">trace</error></testcase>
<testcase classname="unit.zero.test_zero.TestZero" name="test_twice" time="0">
  <failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="unit.zero.test_zero.TestZero" name="test_twice" time="0">
  <error message="failed on teardown with &quot;OSError&quot;">trace</error></testcase>
<testcase classname="" name="unit.inference.test_model" time="0">
  <error message="collection failure">ImportError: no module named transformers</error></testcase>
<testcase classname="unit.ops.test_x.TestX" name="test_xfail" time="0">
  <skipped type="pytest.xfail" message="known">xfail</skipped></testcase>
<testcase time="0.000" />
</testsuite></testsuites>
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_parse_junit_outcomes_ids_and_messages(tmp_path):
    cases = rdt.parse_junit(write(tmp_path, "a.xml", JUNIT))
    by_id = rdt.outcomes(cases)
    assert len(cases) == 8 and len(by_id) == 7  # the failed-then-teardown-error test is one id
    assert by_id["unit/ops/adam/test_cpu_adam.py::TestCPUAdam::test_step[fp32-22]"] == rdt.Case(
        "unit/ops/adam/test_cpu_adam.py::TestCPUAdam::test_step[fp32-22]", "passed", "")
    assert by_id["unit/v1/accelerator/test_accelerator.py::test_pin"].outcome == "failed"
    assert by_id["unit/v1/accelerator/test_accelerator.py::test_pin"].message == "AssertionError: pinned"
    assert by_id["unit/runtime/test_fp16.py::TestFP16::test_amp"].outcome == "skipped"
    assert by_id["unit/comm/test_dist.py::test_init"].outcome == "error"
    # the worst of the two reports of one id: its teardown error outranks its failure
    assert by_id["unit/zero/test_zero.py::TestZero::test_twice"].outcome == "error"
    assert by_id["unit/inference/test_model.py"].outcome == "error"  # a collection error: the whole module
    assert by_id["unit/ops/test_x.py::TestX::test_xfail"].outcome == "skipped"
    assert rdt.counts(by_id) == {"passed": 1, "skipped": 2, "failed": 1, "error": 3}


def test_parse_junit_rejects_a_file_that_is_not_xml(tmp_path):
    with pytest.raises(Exception, match="syntax error|not well-formed"):
        rdt.parse_junit(write(tmp_path, "bad.xml", "not xml"))


def test_diff_lists_changed_outcomes_and_tests_only_one_mode_ran():
    def case(tid: str, outcome: str, message: str = "") -> rdt.Case:
        return rdt.Case(tid, outcome, message)

    deepspeed = {t: case(t, o) for t, o in [("a", "passed"), ("b", "passed"), ("c", "skipped"), ("d", "failed")]}
    anyaccel = {"a": case("a", "passed"), "b": case("b", "failed", "boom"), "c": case("c", "passed"),
                "e": case("e", "passed")}
    differences, only_elsewhere = rdt.diff({"deepspeed": deepspeed, "anyaccel": anyaccel})
    assert [(t, {m: c.outcome for m, c in per.items()}) for t, per in differences] == [
        ("b", {"deepspeed": "passed", "anyaccel": "failed"}),
        ("c", {"deepspeed": "skipped", "anyaccel": "passed"})]
    assert only_elsewhere == {"deepspeed": ["e"], "anyaccel": ["d"]}
    report = rdt.format_report({"deepspeed": deepspeed, "anyaccel": anyaccel},
                               {"deepspeed": ["cpu_adam"], "anyaccel": []}, {"deepspeed": "completed"})
    assert "| deepspeed | 2 | 1 | 0 | 1 | 4 | completed | cpu_adam |" in report
    assert "| anyaccel | 3 | 1 | 0 | 0 | 4 |  | nothing |" in report
    assert "| `b` | passed | failed | boom |" in report
    assert "2 tests differ" in report


def test_diff_compares_a_module_skipped_whole_with_its_tests_in_the_other_mode():
    deepspeed = {"u/t.py::a": rdt.Case("u/t.py::a", "passed"), "u/t.py::b": rdt.Case("u/t.py::b", "skipped")}
    anyaccel = {"u/t.py": rdt.Case("u/t.py", "skipped", "op not compatible")}
    differences, only_elsewhere = rdt.diff({"deepspeed": deepspeed, "anyaccel": anyaccel})
    assert [(t, per["anyaccel"].message) for t, per in differences] == [("u/t.py::a", "op not compatible")]
    assert only_elsewhere == {"deepspeed": [], "anyaccel": []}


def test_diff_of_identical_runs_is_empty():
    same = {"a": rdt.Case("a", "failed", "x")}
    assert rdt.diff({"deepspeed": same, "anyaccel": dict(same)}) == ([], {"deepspeed": [], "anyaccel": []})


def test_cpu_ci_selection_is_the_workflows_two_passes():
    main, sequential = rdt.selection_passes("cpu-ci", None, 4, "2.13")
    assert main.args == ("--forked", "-n", "4", "--continue-on-collection-errors", "unit/", "--torch_ver=2.13")
    assert sequential.args == ("--forked", "-m", "sequential", "--continue-on-collection-errors", "unit/",
                               "--torch_ver=2.13")
    main, _ = rdt.selection_passes("cpu-ci", ["unit/ops"], 0, None)
    assert main.args == ("--forked", "--continue-on-collection-errors", "unit/ops")


def test_fast_selection_and_unknown_selection():
    (fast,) = rdt.selection_passes("fast", None, 4, None)
    assert fast.args == rdt.FAST_TESTS
    (fast,) = rdt.selection_passes("fast", ["unit/x.py"], 4, None)
    assert fast.args == ("unit/x.py",)
    with pytest.raises(ValueError, match="unknown selection 'nightly'"):
        rdt.selection_passes("nightly", None, 4, None)


def test_netns_prefix_uses_ip_or_the_ioctl_fallback(monkeypatch):
    assert rdt.netns_prefix("none") == []
    monkeypatch.setattr(rdt.shutil, "which", lambda name: f"/usr/bin/{name}")
    prefix = rdt.netns_prefix("unshare")
    assert prefix[:2] == ["unshare", "-rn"] and "ip link set lo up" in prefix[4]
    monkeypatch.setattr(rdt.shutil, "which", lambda name: None if name == "ip" else f"/usr/bin/{name}")
    assert "0x8914" in rdt.netns_prefix("unshare")[4]
    monkeypatch.setattr(rdt.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="--netns none"):
        rdt.netns_prefix("unshare")
    assert rdt.netns_works() is False


# A fake DeepSpeed test tree: one test passes only without anyaccel, one binds a fixed port for a while (two
# modes in one network namespace would collide on it), one sleeps past any short timeout.
FAKE_CONFTEST = "import pytest\n"
FAKE_TESTS = textwrap.dedent("""
    import os, socket, time

    def test_same():
        assert True

    def test_differs():
        assert os.environ.get("ANYACCEL_DEEPSPEED") != "1", "anyaccel mode"

    def test_fixed_port():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
            s.bind(("127.0.0.1", 29517))
            s.listen()
            time.sleep(3)
""")
SLOW_TEST = "import time\n\ndef test_slow():\n    time.sleep(600)\n"


def fake_checkout(tmp_path: Path) -> Path:
    unit = tmp_path / "checkout" / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit.parent / "conftest.py").write_text(FAKE_CONFTEST)
    (unit / "test_fake.py").write_text(FAKE_TESTS)
    (unit / "test_slow.py").write_text(SLOW_TEST)
    return tmp_path / "checkout"


def run_script(*args: str, timeout: int = 600, sigint_ignored: bool = False) -> subprocess.CompletedProcess:
    def ignore_sigint() -> None:  # what a shell does to a command it starts in the background
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=ignore_sigint if sigint_ignored else None)


@pytest.mark.slow
@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "started-with-SIGINT-ignored"])
def test_a_timed_out_mode_still_reports_the_tests_it_finished(tmp_path, sigint_ignored):
    checkout = fake_checkout(tmp_path)
    out = tmp_path / "r.json"
    proc = run_script(str(checkout), "--mode", "deepspeed", "--selection", "fast", "--tests", "unit/test_fake.py",
                      "unit/test_slow.py", "--timeout", "30", "--netns", "none", "--scratch", str(tmp_path / "s"),
                      "--json", str(out), sigint_ignored=sigint_ignored)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = json.loads(out.read_text())["modes"]["deepspeed"]
    assert result["status"].startswith("timed out after 30 s"), result
    assert result["counts"]["passed"] == 3  # test_same, test_differs, test_fixed_port finished before the slow one


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed (test-only)")
@pytest.mark.parametrize("netns", ["unshare", "none"])
def test_both_modes_run_and_the_diff_names_the_test_that_differs(tmp_path, netns):
    if netns == "unshare" and not rdt.netns_works():
        pytest.skip("unshare -rn does not work here (no unprivileged user namespaces)")
    checkout = fake_checkout(tmp_path)
    out = tmp_path / "r.json"
    proc = run_script(str(checkout), "--selection", "fast", "--tests", "unit/test_fake.py", "--netns", netns,
                      "--scratch", str(tmp_path / "s"), "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    assert result["netns"] == netns
    assert result["modes"]["deepspeed"]["counts"] == {"passed": 3, "skipped": 0, "failed": 0, "error": 0}
    assert result["modes"]["anyaccel"]["counts"] == {"passed": 2, "skipped": 0, "failed": 1, "error": 0}
    assert [d["test"] for d in result["differences"]] == ["unit/test_fake.py::test_differs"]
    assert result["differences"][0]["anyaccel"]["message"].startswith("AssertionError: anyaccel mode")
    assert "| `unit/test_fake.py::test_differs` | passed | failed |" in proc.stdout


def _run_json(tmp_path: Path, name: str, xml: dict[str, str], built: dict[str, list[str]]) -> Path:
    """A --json file as main() writes it, naming one JUnit XML file per mode."""
    modes = {}
    for mode, text in xml.items():
        path = write(tmp_path, f"{name}-{mode}.xml", text)
        modes[mode] = {"counts": {}, "status": "completed", "seconds": 10, "xml": [str(path)],
                       "logs": [], "deepspeed_built": built.get(mode, []), "not_passed": []}
    return write(tmp_path, f"{name}.json", json.dumps({"selection": "cpu-ci", "modes": modes}))


def _junit(*cases: str) -> str:
    return f'<testsuites><testsuite name="pytest">{"".join(cases)}</testsuite></testsuites>'


PASS = '<testcase classname="unit.{}" name="{}"/>'
FAIL = '<testcase classname="unit.{}" name="{}"><failure message="boom">t</failure></testcase>'


def test_merge_joins_chunked_runs_into_one_report(tmp_path, capsys):
    first = _run_json(tmp_path, "a", {"deepspeed": _junit(PASS.format("test_a", "test_x")),
                                      "anyaccel": _junit(PASS.format("test_a", "test_x"))},
                      {"deepspeed": ["cpu_adam"]})
    # the second chunk has another module, and reruns test_a.py::test_x, whose later outcome counts
    second = _run_json(tmp_path, "b", {"deepspeed": _junit(PASS.format("test_b", "test_y"),
                                                           PASS.format("test_a", "test_x")),
                                       "anyaccel": _junit(FAIL.format("test_b", "test_y"),
                                                          FAIL.format("test_a", "test_x"))},
                       {"deepspeed": ["fused_adam"]})
    merged = rdt.merge_runs([first, second])
    assert list(merged) == ["deepspeed", "anyaccel"]
    assert rdt.counts(merged["deepspeed"].cases) == {"passed": 2, "skipped": 0, "failed": 0, "error": 0}
    assert rdt.counts(merged["anyaccel"].cases) == {"passed": 0, "skipped": 0, "failed": 2, "error": 0}
    assert merged["deepspeed"].deepspeed_built == ["cpu_adam", "fused_adam"]
    assert merged["anyaccel"].seconds == 20
    assert rdt.main(["--merge", str(first), str(second)]) == 0
    out = capsys.readouterr().out
    assert "| `unit/test_b.py::test_y` | passed | failed | boom |" in out
    assert "| `unit/test_a.py::test_x` | passed | failed | boom |" in out
    assert "2 tests differ" in out


def test_merge_takes_no_checkout_and_a_run_needs_one(tmp_path):
    run = _run_json(tmp_path, "a", {"deepspeed": _junit(PASS.format("test_a", "test_x"))}, {})
    with pytest.raises(SystemExit):
        rdt.main([str(tmp_path), "--merge", str(run)])
    with pytest.raises(SystemExit):
        rdt.main([])


def test_merge_names_a_missing_junit_file(tmp_path):
    run = _run_json(tmp_path, "a", {"deepspeed": _junit(PASS.format("test_a", "test_x"))}, {})
    (tmp_path / "a-deepspeed.xml").unlink()
    with pytest.raises(FileNotFoundError, match="a-deepspeed.xml"):
        rdt.merge_runs([run])


def test_arguments_after_a_double_dash_go_to_pytest(tmp_path, monkeypatch):
    seen: dict[str, object] = {}

    def stop(checkout: Path) -> Path:  # main() resolves the checkout first: stop there with what it parsed
        seen["checkout"] = checkout
        raise SystemExit(0)

    parsed = []
    real = rdt.argparse.ArgumentParser.parse_args

    def spy(self, args=None, namespace=None):
        ns = real(self, args, namespace)
        parsed.append(ns)
        return ns

    monkeypatch.setattr(rdt, "tests_folder", stop)
    monkeypatch.setattr(rdt.argparse.ArgumentParser, "parse_args", spy)
    with pytest.raises(SystemExit) as exit_info:
        rdt.main([str(tmp_path), "--mode", "anyaccel", "--json", "o.json", "--", "-x", "--maxfail=2"])
    assert exit_info.value.code == 0  # argparse's "unrecognized arguments: -- -x" exits with 2
    assert seen["checkout"] == tmp_path
    assert parsed[0].pytest_args == ["-x", "--maxfail=2"]
