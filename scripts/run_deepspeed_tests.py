#!/usr/bin/env python3
"""Run DeepSpeed's own unit tests twice, with DeepSpeed alone and with anyaccel installed, and diff the outcomes.

DeepSpeed's tests are not in its sdist; pass a DeepSpeed checkout (a clone, or just its ``tests/`` folder,
e.g. ``git archive edaa722 tests | tar x -C CHECKOUT``). The *installed* DeepSpeed is tested (0.19.8 for
the numbers in docs/deepspeed.md): the checkout's ``tests/`` is copied to a scratch folder per mode first,
because DeepSpeed's ``tests/conftest.py`` puts the checkout root first on ``sys.path`` and a clone's
``deepspeed/`` source would shadow the installed package. Nothing of DeepSpeed is copied into this repository.

    python scripts/run_deepspeed_tests.py CHECKOUT                      # DeepSpeed's CPU CI selection, both modes
    python scripts/run_deepspeed_tests.py CHECKOUT --selection fast     # the fast slice (CI of this repository)
    python scripts/run_deepspeed_tests.py CHECKOUT --tests unit/ops/adam -k cpu_adam --timeout 1800
    python scripts/run_deepspeed_tests.py CHECKOUT --mode anyaccel --json out.json -- -x   # extra pytest arguments
    python scripts/run_deepspeed_tests.py --merge part1.json part2.json                 # one report of several runs

Selections. ``cpu-ci`` is what DeepSpeed's ``cpu-torch-latest`` workflow runs (at commit edaa722): from
``tests/``, ``pytest --forked -n 4 unit/`` (``pytest.ini``'s ``addopts`` leaves out the ``sequential``,
``nightly``, inference and evaluation markers) and then ``pytest --forked -m sequential unit/``; its
``--torch_ver`` becomes the installed torch's ``major.minor``, and ``--continue-on-collection-errors`` is added
(test modules written for another DeepSpeed version may fail to import). ``--forked`` needs pytest < 8.4 (as
DeepSpeed's dev requirements pin): pytest-forked 1.7 cannot pass pytest 9's reports back from the forked child,
so give ``--python`` an interpreter with DeepSpeed's test requirements. ``fast`` is :data:`FAST_TESTS` in one
pass, neither ``--forked`` nor xdist, so it runs under this repository's own test environment. ``--tests``
replaces the paths of every pass; ``-k`` is passed through.

Modes. ``deepspeed``: DeepSpeed alone (its own CPU accelerator here). ``anyaccel``: ``ANYACCEL_DEEPSPEED=1``
plus the startup hook (a scratch folder with ``anyaccel-deepspeed.pth`` and a ``sitecustomize.py``, first on
``PYTHONPATH``), so the processes DeepSpeed's ``DistributedTest`` starts use anyaccel too, and
``-p anyaccel.integrations.deepspeed.pytest_plugin``. Each mode gets a fresh ``TORCH_EXTENSIONS_DIR`` (or a
subfolder of ``--torch-extensions-dir``) whose content afterwards says what DeepSpeed JIT-built itself: with
anyaccel it must stay empty (the integration never falls back to DeepSpeed's builders).

Isolation. With ``--netns unshare`` (the default where ``unshare`` works) each mode runs in its own network
namespace (``unshare -rn``, an unprivileged user + network namespace, then the loopback device brought up with
``ip link set lo up``, or with the ``SIOCSIFFLAGS`` ioctl where ``ip`` is missing), so the ports DeepSpeed's
``DistributedTest`` binds (29500 + an offset, on 127.0.0.1) never collide and both modes run at the same time.
``--netns none`` runs them in this namespace one after the other.

Output: pytest's JUnit XML per pass (``SCRATCH/<mode>-<n>.xml``) and log (``SCRATCH/<mode>-<n>.log``); then the
passed/failed/error/skipped counts per mode, what DeepSpeed JIT-built per mode, and a table of the tests whose
outcome differs between the modes (with the first line of the failure message). A mode whose time runs out
(``--timeout``, seconds per mode) gets SIGINT, so pytest still writes the JUnit XML of the tests it finished; the
diff then covers only tests that ran in both modes and counts the rest as not run.

Chunks. A selection too long for one sitting can run as several ``--tests`` runs (disjoint test modules), each
with its own ``--json``; ``--merge JSON...`` then runs nothing and prints the one report of them all from the
JUnit XML those files name (a test id found in several runs keeps the last run's outcome).

Exit status: 0 when every requested mode completed (whatever its failures), 1 when one timed out (partial
results), 2 when one could not run (no JUnit XML at all).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODES = ("deepspeed", "anyaccel")
PLUGIN = "anyaccel.integrations.deepspeed.pytest_plugin"

#: The fast slice: DeepSpeed's unit tests for the accelerator, the CPU optimizers, fp16 and pinned memory
#: (paths under the checkout's ``tests/``).
FAST_TESTS = (
    "unit/v1/accelerator/test_accelerator.py",
    "unit/ops/adam/test_cpu_adam.py",
    "unit/ops/lion/test_cpu_lion.py",
    "unit/ops/adagrad/test_cpu_adagrad.py",
    "unit/runtime/half_precision/test_fp16.py",
    "unit/v1/pin_memory",
)

#: The outcomes of one test case, worst first (a test id seen twice keeps its worst).
OUTCOMES = ("error", "failed", "skipped", "passed")

#: Seconds a mode gets after SIGINT to write its JUnit XML before its process group is killed.
INTERRUPT_GRACE_S = 120

#: The share of a mode's timeout kept for each later pass (the ``sequential`` pass of ``cpu-ci``), so a long
#: first pass cannot starve it.
LATER_PASS_SHARE = 0.15

#: Shell fallback that brings up ``lo`` without ``ip``: SIOCSIFFLAGS (0x8914) with IFF_UP | IFF_RUNNING
#: (0x1 | 0x40) on a datagram socket, the ioctl ``ip link set lo up`` itself issues (netdevice(7)).
_LO_UP_PY = ("import fcntl, socket, struct; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             "fcntl.ioctl(s, 0x8914, struct.pack('16sH14x', b'lo', 0x41))")


@dataclasses.dataclass(frozen=True)
class Case:
    """One test case of a JUnit XML file: its pytest-style id, outcome (one of :data:`OUTCOMES`) and the first
    line of its failure, error or skip message (empty when it passed)."""

    test_id: str
    outcome: str
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Pass:
    """One pytest invocation of a selection: its arguments (paths and flags, relative to ``tests/``)."""

    args: tuple[str, ...]


def torch_major_minor(python: str) -> str:
    """``python``'s torch ``major.minor`` (DeepSpeed's ``--torch_ver``); imports torch in a subprocess."""
    out = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return ".".join(out.split("+")[0].split(".")[:2])


def selection_passes(selection: str, tests: Sequence[str] | None, workers: int, torch_ver: str | None
                     ) -> list[Pass]:
    """The pytest passes of ``selection`` (``cpu-ci`` or ``fast``), with ``tests`` replacing the paths if given.

    ``workers`` is ``-n`` of the first ``cpu-ci`` pass (DeepSpeed's workflow uses 4; 0 runs without xdist).
    Raises ValueError for an unknown selection.
    """
    if selection == "cpu-ci":
        paths = tuple(tests) if tests else ("unit/",)
        version = (f"--torch_ver={torch_ver}",) if torch_ver else ()
        xdist = ("-n", str(workers)) if workers > 0 else ()
        # tests of a newer or older DeepSpeed than the installed one may fail to import; DeepSpeed's CI tests
        # its own tree and never needs it, but here one module's ImportError must not stop the session
        keep_going = ("--continue-on-collection-errors",)
        return [Pass(("--forked", *xdist, *keep_going, *paths, *version)),
                Pass(("--forked", "-m", "sequential", *keep_going, *paths, *version))]
    if selection == "fast":
        return [Pass(tuple(tests) if tests else FAST_TESTS)]
    raise ValueError(f"unknown selection {selection!r}: use 'cpu-ci' or 'fast'")


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def test_id(case: ElementTree.Element) -> str:
    """``path/to/test_file.py::Class::name`` from a JUnit ``testcase`` (pytest writes the dotted module path
    plus class as ``classname``: ``unit.ops.adam.test_cpu_adam.TestCPUAdam``); ``path/to/test_file.py`` for a
    whole module (a module-level skip or an import error: no ``classname``, the dotted module as ``name``)."""
    classname, name = case.get("classname", ""), case.get("name", "")
    if not classname:  # a whole module: skipped at module level or failed to import
        return name.replace(".", "/") + ".py"
    parts = classname.split(".")
    # the class part starts at the first component written in CamelCase; the rest is the module path
    split = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts))
    module = "/".join(parts[:split])
    return "::".join(filter(None, [f"{module}.py" if module else "", *parts[split:], name]))


def parse_junit(path: Path) -> list[Case]:
    """The test cases of a pytest JUnit XML file.

    A case with a ``failure`` child failed, with an ``error`` child errored (a setup/teardown error or a
    collection error), with a ``skipped`` child was skipped (xfail included), otherwise passed. Pytest writes
    a test twice when it fails and its teardown errors too: both are returned (see :func:`outcomes`). The
    nameless ``testcase`` pytest writes for the test a SIGINT interrupted is left out.
    Raises ``xml.etree.ElementTree.ParseError`` for a file that is not XML.
    """
    cases = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        if not case.get("name"):
            continue  # the test a SIGINT interrupted: pytest writes an empty testcase for it
        outcome, message = "passed", ""
        for child in case:
            tag = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(child.tag)
            if tag and OUTCOMES.index(tag) < OUTCOMES.index(outcome):
                outcome, message = tag, _first_line(child.get("message")) or _first_line(child.text)
        cases.append(Case(test_id(case), outcome, message))
    return cases


def outcomes(cases: Iterable[Case]) -> dict[str, Case]:
    """One case per test id, the worst outcome (:data:`OUTCOMES` order) where an id repeats."""
    merged: dict[str, Case] = {}
    for case in cases:
        seen = merged.get(case.test_id)
        if seen is None or OUTCOMES.index(case.outcome) < OUTCOMES.index(seen.outcome):
            merged[case.test_id] = case
    return merged


def counts(cases: dict[str, Case]) -> dict[str, int]:
    """passed/failed/error/skipped counts of one mode's cases."""
    return {outcome: sum(c.outcome == outcome for c in cases.values()) for outcome in reversed(OUTCOMES)}


def diff(runs: dict[str, dict[str, Case]]) -> tuple[list[tuple[str, dict[str, Case]]], dict[str, list[str]]]:
    """The tests whose outcome differs between the modes, and per mode the tests only the other modes ran.

    ``runs`` maps a mode to its cases by id (:func:`outcomes`). Returns ``(differences, only_elsewhere)``:
    ``differences`` is ``[(test_id, {mode: case})]`` sorted by id, for ids present in every mode with
    different outcomes; ``only_elsewhere[mode]`` lists (sorted) the ids some other mode ran but ``mode`` did not
    (a timed-out mode's unfinished tests, or a collection difference). Where one mode has only a whole module
    (``path.py``, skipped at module level) and another its tests, each test is compared with the module.
    """
    modes = list(runs)

    def lookup(mode: str, tid: str) -> Case | None:  # a test, or the whole module where that mode has only it
        return runs[mode].get(tid) or runs[mode].get(tid.split("::")[0])

    every = sorted(set().union(*(set(cases) for cases in runs.values()))) if runs else []
    differences, only_elsewhere = [], {m: [] for m in modes}
    for tid in every:
        per_mode = {m: lookup(m, tid) for m in modes}
        present = {m: c for m, c in per_mode.items() if c is not None}
        if len(present) < len(modes):
            for m in modes:
                if per_mode[m] is None and not any(t.startswith(tid + "::") for t in runs[m]):
                    only_elsewhere[m].append(tid)  # (a module the other mode has tests of is compared by them)
        elif "::" in tid or all(tid in runs[m] for m in modes):
            if len({c.outcome for c in present.values()}) > 1:
                differences.append((tid, present))
    return differences, only_elsewhere


def format_report(runs: dict[str, dict[str, Case]], built: dict[str, list[str]], status: dict[str, str],
                  width: int = 110) -> str:
    """The counts table, what DeepSpeed built, and the per-test difference table, as text (Markdown tables)."""
    lines = ["| mode | passed | failed | error | skipped | tests | status | DeepSpeed JIT-built |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, cases in runs.items():
        c = counts(cases)
        lines.append(f"| {mode} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} | {len(cases)} | "
                     f"{status.get(mode, '')} | {', '.join(built.get(mode, [])) or 'nothing'} |")
    differences, only_elsewhere = diff(runs)
    modes = list(runs)
    lines += ["", f"{len(differences)} tests differ:", "",
              "| test | " + " | ".join(modes) + " | message |", "|---|" + "---|" * len(modes) + "---|"]
    for tid, per_mode in differences:
        message = next((c.message for c in per_mode.values() if c.outcome in ("failed", "error") and c.message),
                       next((c.message for c in per_mode.values() if c.message), ""))
        if len(message) > width:
            message = message[:width - 3] + "..."
        lines.append(f"| `{tid}` | " + " | ".join(per_mode[m].outcome for m in modes)
                     + f" | {message.replace('|', '/')} |")
    for mode, missing in only_elsewhere.items():
        if missing:
            lines.append(f"\n{len(missing)} tests ran in another mode but not in {mode} (first 20):")
            lines += [f"  {tid}" for tid in missing[:20]]
    return "\n".join(lines)


def netns_prefix(method: str) -> list[str]:
    """The command prefix that runs a command in a fresh network namespace with ``lo`` up (``method``
    ``unshare``), or nothing (``none``). The command follows as ``"$@"`` of the ``sh -c`` script.

    Raises SystemExit when ``unshare`` is asked for but the ``unshare`` tool is missing.
    """
    if method == "none":
        return []
    if not shutil.which("unshare"):
        raise SystemExit("--netns unshare needs util-linux's unshare; install it or pass --netns none "
                         "(then the modes run one after the other)")
    lo_up = "ip link set lo up" if shutil.which("ip") else f'"{sys.executable}" -c "{_LO_UP_PY}"'
    return ["unshare", "-rn", "sh", "-c", f'{lo_up} && exec "$@"', "sh"]


def netns_works() -> bool:
    """Whether ``unshare -rn`` can make a network namespace here (unprivileged user namespaces allowed)."""
    if not shutil.which("unshare"):
        return False
    try:
        proc = subprocess.run([*netns_prefix("unshare"), "true"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def hook_folder(scratch: Path) -> Path:
    """Write the startup hook (``.pth`` + ``sitecustomize.py``) into ``scratch/hook`` with anyaccel's own command."""
    folder = scratch / "hook"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "anyaccel.integrations.deepspeed", "write-pth", str(folder),
                    "--sitecustomize"], env=env, check=True, capture_output=True, text=True)
    return folder


def tests_folder(checkout: Path) -> Path:
    """``CHECKOUT/tests`` (or CHECKOUT itself when it is the tests folder); raises SystemExit if neither."""
    for candidate in (checkout / "tests", checkout):
        if (candidate / "unit").is_dir() and (candidate / "conftest.py").is_file():
            return candidate
    raise SystemExit(f"{checkout} is not a DeepSpeed checkout: no tests/unit and tests/conftest.py in it. "
                     f"Clone https://github.com/deepspeedai/DeepSpeed (we used commit edaa722) and pass its path.")


@dataclasses.dataclass
class ModeResult:
    """What one mode's run left: its cases by id, its status, the JUnit files and logs, what DeepSpeed built."""

    mode: str
    cases: dict[str, Case]
    status: str
    xml: list[str]
    logs: list[str]
    deepspeed_built: list[str]
    seconds: float


def _run_pass(command: list[str], cwd: Path, env: dict[str, str], log: Path, deadline: float) -> str:
    """Run one pytest pass until it ends or ``deadline`` (``time.monotonic()``); return ``ok``/``timeout``."""
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            return "ok"
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # pytest writes its JUnit XML for what finished
            try:
                proc.wait(timeout=INTERRUPT_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return "timeout"


def run_mode(mode: str, tests_src: Path, passes: list[Pass], scratch: Path, extensions_root: Path | None,
             extra: list[str], timeout: float, prefix: list[str], python: str) -> ModeResult:
    """Run every pass of a selection in ``mode`` (``anyaccel`` or ``deepspeed``) within ``timeout`` seconds."""
    start = time.monotonic()
    deadline = start + timeout
    work = scratch / f"tests-{mode}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(tests_src, work)
    extensions = (extensions_root / mode) if extensions_root else scratch / f"torch-extensions-{mode}"
    extensions.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ANYACCEL_DEEPSPEED", "DS_ACCELERATOR")}
    env["TORCH_EXTENSIONS_DIR"] = str(extensions)
    # DeepSpeed's DistributedTest gives up after DS_UNITTEST_TIMEOUT s (600 by default), which a cold JIT
    # build on a loaded machine can exceed
    env.setdefault("DS_UNITTEST_TIMEOUT", "3600")
    paths = [str(REPO), env.get("PYTHONPATH", "")]
    plugin: list[str] = []
    if mode == "anyaccel":
        paths.insert(0, str(hook_folder(scratch / mode)))
        env["ANYACCEL_DEEPSPEED"] = "1"
        plugin = ["-p", PLUGIN]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    status, xmls, logs, cases = "completed", [], [], []
    for n, one in enumerate(passes):
        # a pass other than the last leaves LATER_PASS_SHARE of the timeout to each pass after it
        pass_deadline = deadline - timeout * LATER_PASS_SHARE * (len(passes) - 1 - n)
        xml, log = scratch / f"{mode}-{n}.xml", scratch / f"{mode}-{n}.log"
        xml.unlink(missing_ok=True)
        command = [*prefix, python, "-m", "pytest", *plugin, *one.args, f"--junitxml={xml}",
                   "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "-rfE", *extra]
        print(f"== {mode} pass {n}: {' '.join(command)}  (in {work})", flush=True)
        outcome = _run_pass(command, work, env, log, pass_deadline)
        logs.append(str(log))
        if xml.is_file():
            xmls.append(str(xml))
            cases += parse_junit(xml)
        elif outcome == "ok":
            status = "no JUnit XML"
        if outcome == "timeout":
            status = f"timed out after {timeout:.0f} s in pass {n}"
            if time.monotonic() >= deadline:
                break  # else the passes after it still get their share
    return ModeResult(mode, outcomes(cases), status, xmls, logs,
                      sorted(p.name for p in extensions.iterdir()), time.monotonic() - start)


def merge_runs(paths: Sequence[Path]) -> dict[str, ModeResult]:
    """The results of several runs' ``--json`` files as one run per mode (for a selection run in chunks).

    Each file's modes are read in order; per mode the cases of its JUnit XML files are joined (a test id in
    several runs keeps the last run's outcome), the statuses listed, the seconds added and what DeepSpeed built
    joined. Raises FileNotFoundError when a file or the JUnit XML it names is missing (the run's ``--scratch``
    must still exist), ``json.JSONDecodeError``/``KeyError`` for a file that is not this script's ``--json``.
    """
    merged: dict[str, ModeResult] = {}
    for path in paths:
        data = json.loads(Path(path).read_text())
        for mode, info in data["modes"].items():
            cases: list[Case] = []
            for xml in info["xml"]:
                cases += parse_junit(Path(xml))
            seen = merged.setdefault(mode, ModeResult(mode, {}, "", [], [], [], 0.0))
            seen.cases.update(outcomes(cases))
            seen.status = "; ".join(filter(None, [seen.status, f"{Path(path).name}: {info['status']}"]))
            seen.xml += info["xml"]
            seen.logs += info["logs"]
            seen.deepspeed_built = sorted(set(seen.deepspeed_built) | set(info["deepspeed_built"]))
            seen.seconds += float(info["seconds"])
    return merged


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the modes, print the report; see the module doc for the exit status."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, nargs="?", default=None,
                        help="a DeepSpeed checkout (or its tests/ folder); not with --merge")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both")
    parser.add_argument("--selection", choices=("cpu-ci", "fast"), default="cpu-ci")
    parser.add_argument("--tests", nargs="+", default=None,
                        help="paths under the checkout's tests/, replacing the selection's")
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    parser.add_argument("--passes", type=int, nargs="+", default=None,
                        help="run only these passes of the selection (0-based: cpu-ci's sequential pass is 1)")
    parser.add_argument("--workers", type=int, default=4, help="xdist -n of the cpu-ci main pass (0: no xdist)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per mode (all its passes)")
    parser.add_argument("--netns", choices=("auto", "unshare", "none"), default="auto",
                        help="a network namespace per mode (auto: where unshare -rn works)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs DeepSpeed's tests (default: this one); it needs DeepSpeed, "
                             "anyaccel, pytest<8.4, pytest-forked and pytest-xdist (DeepSpeed's dev requirements)")
    parser.add_argument("--torch-extensions-dir", type=Path, default=None,
                        help="reuse DeepSpeed JIT builds across runs (a subfolder per mode)")
    parser.add_argument("--scratch", type=Path, default=None, help="keep logs and copies here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--merge", type=Path, nargs="+", default=None, metavar="JSON",
                        help="run nothing: print one report of these earlier runs' --json files")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    # what follows "--" is pytest's, split off here: argparse matches the optional checkout and this list as
    # empty before the options, then rejects "-- -x" after them as unrecognized arguments
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.pytest_args += pytest_args
    if args.merge:
        if args.checkout is not None:
            parser.error("--merge reports earlier runs: give it no CHECKOUT")
        merged = merge_runs(args.merge)
        print(f"DeepSpeed's tests, {len(args.merge)} runs merged")
        print(format_report({m: r.cases for m, r in merged.items()},
                            {m: r.deepspeed_built for m, r in merged.items()},
                            {m: f"{r.status}, {r.seconds:.0f} s" for m, r in merged.items()}))
        return 0
    if args.checkout is None:
        parser.error("give a DeepSpeed CHECKOUT (or --merge JSON...)")
    # a shell starts background commands with SIGINT ignored, which pytest would inherit and then never write
    # its JUnit XML when a mode runs out of time: give the children Python's default handling back
    signal.signal(signal.SIGINT, signal.default_int_handler)
    args.python = os.path.abspath(args.python) if os.sep in args.python else (shutil.which(args.python)
                                                                              or args.python)
    tests_src = tests_folder(args.checkout.resolve())
    scratch = (args.scratch or Path(tempfile.mkdtemp(prefix="ds-tests-"))).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    netns = args.netns if args.netns != "auto" else ("unshare" if netns_works() else "none")
    prefix = netns_prefix(netns)
    torch_ver = torch_major_minor(args.python) if args.selection == "cpu-ci" else None
    passes = selection_passes(args.selection, args.tests, args.workers, torch_ver)
    if args.passes is not None:
        passes = [passes[n] for n in args.passes]
    extra = [*(["-k", args.keyword] if args.keyword else []), *args.pytest_args]
    modes = list(MODES) if args.mode == "both" else [args.mode]
    results: dict[str, ModeResult] = {}

    def one(mode: str) -> None:
        results[mode] = run_mode(mode, tests_src, passes, scratch, args.torch_extensions_dir, extra,
                                 args.timeout, prefix, args.python)

    if netns == "unshare":  # own namespaces: no port can collide, so the modes run at the same time
        threads = [threading.Thread(target=one, args=(mode,)) for mode in modes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        for mode in modes:
            one(mode)
    ordered = {mode: results[mode] for mode in modes}
    print(f"\nDeepSpeed's tests ({args.selection}{', ' + ' '.join(args.tests) if args.tests else ''}) from "
          f"{args.checkout}, network namespace: {netns}")
    print(format_report({m: r.cases for m, r in ordered.items()}, {m: r.deepspeed_built for m, r in ordered.items()},
                        {m: f"{r.status}, {r.seconds:.0f} s" for m, r in ordered.items()}))
    print(f"logs and JUnit XML: {scratch}")
    if args.json:
        differences, _ = diff({m: r.cases for m, r in ordered.items()})
        args.json.write_text(json.dumps({
            "selection": args.selection, "netns": netns, "passes": [list(p.args) for p in passes],
            "modes": {m: {"counts": counts(r.cases), "status": r.status, "seconds": round(r.seconds),
                          "xml": r.xml, "logs": r.logs, "deepspeed_built": r.deepspeed_built,
                          "not_passed": sorted(t for t, c in r.cases.items() if c.outcome in ("failed", "error"))}
                      for m, r in ordered.items()},
            "differences": [{"test": t, **{m: dataclasses.asdict(c) for m, c in per.items()}}
                            for t, per in differences]}, indent=2))
    if any(not r.xml for r in ordered.values()):
        return 2
    return 1 if any(r.status.startswith("timed out") for r in ordered.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
