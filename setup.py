"""Ahead-of-time op builds at install time; package metadata lives in pyproject.toml.

``ANYACCEL_BUILD_OPS=1 pip install --no-build-isolation .`` builds every op, ``ANYACCEL_BUILD_<OP>=1``
one op (``ANYACCEL_BUILD_<OP>=0`` excludes one). Each op is built into ``anyaccel/_prebuilt/<op>/<key>``
with a manifest; a failing op is reported and skipped, never aborting the install. At run
time the prebuilt op is used when its manifest matches the running torch/Python, else it is rebuilt just
in time with one warning. torch must be importable in the build environment, hence
``--no-build-isolation``; without it every selected op is reported as skipped.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    try:
        from wheel.bdist_wheel import bdist_wheel  # type: ignore[no-redef]
    except ImportError:  # neither: this environment builds no wheel (pip's build isolation installs `wheel`)
        bdist_wheel = None  # type: ignore[assignment,misc]

logger = logging.getLogger("anyaccel.setup")


def write_startup_pth(command: build_py) -> None:
    """Ship ``anyaccel-deepspeed.pth`` (the DeepSpeed integration's startup hook) at the root of site-packages.

    A wheel installs what ``build_lib`` holds at its root into site-packages. An editable install
    (``pip install -e``, PEP 660) builds into a throw-away ``build_lib`` and installs what its ``install``
    command's ``install_lib`` (the editable wheel's root) holds, so the file goes there too. The line itself
    is ``_anyaccel_deepspeed_startup.PTH_LINE``: a no-op unless ``ANYACCEL_DEEPSPEED`` is set.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _anyaccel_deepspeed_startup as startup

    targets = {Path(command.build_lib)}
    if getattr(command, "editable_mode", False):
        targets.add(Path(command.get_finalized_command("install").install_lib))
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        (target / startup.PTH_NAME).write_text(startup.PTH_LINE, encoding="utf-8")


class BuildPyWithOps(build_py):
    """``build_py`` that also builds the ops selected by ``ANYACCEL_BUILD_*`` into the build tree."""

    def run(self) -> None:
        super().run()
        write_startup_pth(self)
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        try:
            from anyaccel.op_builder.cli.aot import build_prebuilt_ops, format_table, selected_builds
        except ImportError as exc:  # torch not importable: build isolation
            sys.stderr.write(f"anyaccel: ops skipped, torch is not importable here ({exc}); "
                             f"use pip install --no-build-isolation\n")
            return
        classes = selected_builds(os.environ)
        if not classes:
            return
        dest = Path(self.build_lib) / "anyaccel" / "_prebuilt"
        outcomes = build_prebuilt_ops(classes, dest)
        # Build logs and scratch space stay out of the package: the logs move beside build_lib.
        logs = Path(self.build_lib).parent / "anyaccel-op-logs"
        if (dest / ".logs").is_dir():
            shutil.rmtree(logs, ignore_errors=True)
            shutil.move(str(dest / ".logs"), str(logs))
        shutil.rmtree(dest / ".tmp", ignore_errors=True)
        sys.stderr.write("anyaccel ahead-of-time op builds:\n" + format_table(outcomes) + "\n")
        for o in outcomes:
            if o.status == "failed":
                sys.stderr.write(o.error.replace(str(dest / ".logs"), str(logs)) + "\n")


def ops_selected() -> bool:
    """Whether this build carries native ops (``ANYACCEL_BUILD_OPS=1`` or an ``ANYACCEL_BUILD_<OP>=1``)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        from anyaccel.op_builder.cli.aot import selected_builds
    except ImportError:
        return False
    return bool(selected_builds(os.environ))


class BdistWheelWithOps(bdist_wheel or object):  # type: ignore[misc]
    """A wheel with prebuilt ops is platform-specific: ``py3-none-<platform>`` (the ops use torch's stable C
    ABI and no Python C API, so one wheel serves every Python 3 and every torch from the ABI target on)."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if ops_selected():
            self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        python, abi, plat = super().get_tag()
        return (python, abi, plat) if self.root_is_pure else ("py3", "none", plat)


setup(cmdclass={"build_py": BuildPyWithOps,
                **({"bdist_wheel": BdistWheelWithOps} if bdist_wheel is not None else {})})
