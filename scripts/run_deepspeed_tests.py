#!/usr/bin/env python3
"""Run DeepSpeed's own unit tests for the accelerator and the CPU optimizers against anyaccel.

DeepSpeed's tests are not in its sdist; pass a DeepSpeed checkout (a clone, or just its ``tests/`` folder,
e.g. ``git archive edaa722 tests | tar x -C CHECKOUT``). The *installed* DeepSpeed is tested (0.19.8 for
the numbers in docs/deepspeed.md): the checkout's ``tests/`` is copied to a scratch folder first, because
DeepSpeed's ``tests/conftest.py`` puts the checkout root first on ``sys.path`` and a clone's ``deepspeed/``
source would shadow the installed package. Nothing of DeepSpeed is copied into this repository.

    python scripts/run_deepspeed_tests.py CHECKOUT                             # anyaccel and DeepSpeed's own
    python scripts/run_deepspeed_tests.py CHECKOUT --accelerator anyaccel --json out.json
    python scripts/run_deepspeed_tests.py CHECKOUT -- -k cpu_adam -x           # extra pytest arguments

With ``--accelerator anyaccel`` the run gets ``ANYACCEL_DEEPSPEED=1`` plus the startup hook (a scratch
folder with ``anyaccel-deepspeed.pth`` and a ``sitecustomize.py``, first on ``PYTHONPATH``), so the processes
DeepSpeed's ``DistributedTest`` starts use anyaccel too, and ``-p anyaccel.integrations.deepspeed.pytest_plugin``.
With ``--accelerator deepspeed`` DeepSpeed runs alone (its own CPU accelerator here). Each run gets a fresh
``TORCH_EXTENSIONS_DIR`` (or a subfolder of ``--torch-extensions-dir``) whose content afterwards says what
DeepSpeed JIT-built itself.

The anyaccel run measures anyaccel's kernels: anyaccel's op modules offer DeepSpeed's module ABI
(``create_adam``, ``multi_tensor_adam``...), and the integration never falls back to DeepSpeed's own builders,
so an empty ``TORCH_EXTENSIONS_DIR`` afterwards means every kernel came from anyaccel's cache.

Prints passed/failed/errors/skipped per accelerator (from pytest's JUnit XML) and the failing test ids.
Exit status: 0 when every requested run completed (whatever its failures), 2 when one could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: DeepSpeed's unit tests for the accelerator and the CPU optimizers (paths under the checkout's tests/).
DEFAULT_TESTS = (
    "unit/v1/accelerator/test_accelerator.py",
    "unit/ops/adam/test_cpu_adam.py",
    "unit/ops/lion/test_cpu_lion.py",
    "unit/ops/adagrad/test_cpu_adagrad.py",
)
PLUGIN = "anyaccel.integrations.deepspeed.pytest_plugin"


def tests_folder(checkout: Path) -> Path:
    """``CHECKOUT/tests`` (or CHECKOUT itself when it is the tests folder); raises SystemExit if neither."""
    for candidate in (checkout / "tests", checkout):
        if (candidate / "unit").is_dir() and (candidate / "conftest.py").is_file():
            return candidate
    raise SystemExit(f"{checkout} is not a DeepSpeed checkout: no tests/unit and tests/conftest.py in it. "
                     f"Clone https://github.com/deepspeedai/DeepSpeed (we used commit edaa722) and pass its path.")


def hook_folder(scratch: Path) -> Path:
    """Write the startup hook (``.pth`` + ``sitecustomize.py``) into ``scratch/hook`` with anyaccel's own command."""
    folder = scratch / "hook"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    subprocess.run([sys.executable, "-m", "anyaccel.integrations.deepspeed", "write-pth", str(folder),
                    "--sitecustomize"], env=env, check=True, capture_output=True, text=True)
    return folder


def junit_counts(path: Path) -> dict[str, Any]:
    """passed/failed/errors/skipped and the failing ids from a pytest JUnit XML file."""
    root = ElementTree.parse(path).getroot()
    counts: dict[str, Any] = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for case in root.iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome == "failure":
            counts["failed"] += 1
            counts["failures"].append(test_id)
        elif outcome == "error":
            counts["errors"] += 1
            counts["failures"].append(test_id)
        elif outcome == "skipped":
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def run(accelerator: str, tests_src: Path, tests: list[str], scratch: Path, extensions_root: Path | None,
        extra: list[str], timeout: int) -> dict[str, Any]:
    """Run DeepSpeed's ``tests`` once with ``accelerator`` (``anyaccel`` or ``deepspeed``); return the counts."""
    work = scratch / f"tests-{accelerator}"
    shutil.copytree(tests_src, work)
    extensions = (extensions_root / accelerator) if extensions_root else scratch / f"torch-extensions-{accelerator}"
    extensions.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("ANYACCEL_DEEPSPEED", "DS_ACCELERATOR")}
    env["TORCH_EXTENSIONS_DIR"] = str(extensions)
    paths = [str(REPO), env.get("PYTHONPATH", "")]
    command = [sys.executable, "-m", "pytest", *tests, f"--junitxml={scratch / f'{accelerator}.xml'}",
               "-p", "no:cacheprovider", "-q", *extra]
    if accelerator == "anyaccel":
        paths.insert(0, str(hook_folder(scratch)))
        env["ANYACCEL_DEEPSPEED"] = "1"
        command[3:3] = ["-p", PLUGIN]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    print(f"== {accelerator}: {' '.join(command[1:])}  (in {work})", flush=True)
    try:
        proc = subprocess.run(command, cwd=work, env=env, timeout=timeout, text=True, capture_output=True)
    except subprocess.TimeoutExpired:
        return {"accelerator": accelerator, "error": f"timed out after {timeout} s"}
    (scratch / f"{accelerator}.log").write_text(proc.stdout + proc.stderr)
    xml = scratch / f"{accelerator}.xml"
    if not xml.is_file():
        return {"accelerator": accelerator, "error": f"pytest exited {proc.returncode} without results:\n"
                                                    f"{(proc.stdout + proc.stderr)[-3000:]}"}
    counts = junit_counts(xml)
    counts.update(accelerator=accelerator, returncode=proc.returncode, log=str(scratch / f"{accelerator}.log"),
                  deepspeed_built=sorted(p.name for p in extensions.iterdir()))
    return counts


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print the summary; see the module doc for the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkout", type=Path, help="a DeepSpeed checkout (or its tests/ folder)")
    parser.add_argument("--accelerator", choices=("anyaccel", "deepspeed", "both"), default="both")
    parser.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS), help="paths under the checkout's tests/")
    parser.add_argument("--torch-extensions-dir", type=Path, default=None,
                        help="reuse DeepSpeed JIT builds across runs (a subfolder per accelerator)")
    parser.add_argument("--scratch", type=Path, default=None, help="keep logs and copies here (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = parser.parse_args(argv)
    tests_src = tests_folder(args.checkout.resolve())
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="ds-tests-"))
    scratch.mkdir(parents=True, exist_ok=True)
    modes = ["anyaccel", "deepspeed"] if args.accelerator == "both" else [args.accelerator]
    results = [run(mode, tests_src, args.tests, scratch, args.torch_extensions_dir, args.pytest_args, args.timeout)
               for mode in modes]
    print(f"\nDeepSpeed's tests ({', '.join(args.tests)}) from {args.checkout}:")
    print(f"{'accelerator':<18} {'passed':>6} {'failed':>6} {'errors':>6} {'skipped':>7}  DeepSpeed JIT-built")
    for r in results:
        if "error" in r:
            print(f"{r['accelerator']:<18} could not run: {r['error']}")
            continue
        built = ", ".join(r["deepspeed_built"]) or "nothing"
        print(f"{r['accelerator']:<18} {r['passed']:>6} {r['failed']:>6} {r['errors']:>6} {r['skipped']:>7}  {built}")
    for r in results:
        for test_id in r.get("failures", []):
            print(f"  {r['accelerator']} FAILED {test_id}")
    print(f"logs: {scratch}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 2 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
