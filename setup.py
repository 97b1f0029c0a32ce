"""Ahead-of-time op builds at install time; package metadata lives in pyproject.toml.

``ANYACCEL_BUILD_OPS=1 pip install --no-build-isolation .`` builds every op, ``ANYACCEL_BUILD_<OP>=1``
one op (``ANYACCEL_BUILD_<OP>=0`` excludes one). Each op is built into ``anyaccel/_prebuilt/<op>/<key>``
with a manifest; a failing op is reported and skipped, never aborting the install (user pain P9). At run
time the prebuilt op is used when its manifest matches the running torch/Python, else it is rebuilt just
in time with one warning. torch must be importable in the build environment, hence
``--no-build-isolation``; without it every selected op is reported as skipped.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

logger = logging.getLogger("anyaccel.setup")


class BuildPyWithOps(build_py):
    """``build_py`` that also builds the ops selected by ``ANYACCEL_BUILD_*`` into the build tree."""

    def run(self) -> None:
        super().run()
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
        sys.stderr.write("anyaccel ahead-of-time op builds:\n" + format_table(outcomes) + "\n")
        for o in outcomes:
            if o.status == "failed":
                sys.stderr.write(o.error + "\n")


setup(cmdclass={"build_py": BuildPyWithOps})
