"""Interpreter-startup hook of anyaccel's DeepSpeed integration, loaded by ``anyaccel-deepspeed.pth``.

A top-level module on purpose (like setuptools' ``_distutils_hack``): importing anything inside ``anyaccel``
would import torch during interpreter start-up, before site-packages are all on ``sys.path``. The ``.pth``
line (:data:`PTH_LINE`) reads ``ANYACCEL_DEEPSPEED`` itself and imports this module only when it is on;
:func:`activate` then adds a finder that does nothing until ``deepspeed`` is imported, and at that moment
calls ``anyaccel.integrations.deepspeed.install()`` (before DeepSpeed's package body runs). Cost when the
variable is unset: one ``os.environ`` lookup per interpreter start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ENABLE_ENV", "PTH_NAME", "PTH_LINE", "enabled", "activate", "DeepSpeedImportTrigger"]

#: The variable that turns the hook on (``1``/``true``/``yes``/``on``).
ENABLE_ENV = "ANYACCEL_DEEPSPEED"
#: The file name in site-packages; sorts after setuptools' ``__editable__.*.pth`` so anyaccel is importable.
PTH_NAME = "anyaccel-deepspeed.pth"
#: The whole ``.pth`` file: ``site`` executes lines starting with ``import``.
PTH_LINE = (
    "import os; os.environ.get('ANYACCEL_DEEPSPEED', '').strip().lower() in ('1', 'true', 'yes', 'on') "
    "and __import__('_anyaccel_deepspeed_startup').activate()\n"
)
_TRUE = ("1", "true", "yes", "on")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when ``ANYACCEL_DEEPSPEED`` is ``1``/``true``/``yes``/``on`` in ``environ`` (``os.environ``)."""
    environ = os.environ if environ is None else environ
    return environ.get(ENABLE_ENV, "").strip().lower() in _TRUE


class DeepSpeedImportTrigger:
    """Meta-path finder: on the first ``import deepspeed`` it calls ``install()``, then stays inert.

    It never finds a module itself (returns None), so DeepSpeed is imported by the usual finders. Errors of
    ``install()`` (an untested DeepSpeed version) propagate: ``import deepspeed`` fails with them.
    """

    fired = False

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if self.fired or fullname != "deepspeed":
            return None
        self.fired = True
        from anyaccel.integrations.deepspeed import install

        install()
        return None


def activate() -> None:
    """Add the :class:`DeepSpeedImportTrigger` to ``sys.meta_path`` once (when DeepSpeed is not imported yet).

    When ``deepspeed`` is already imported (activate() called late), installs right away.
    """
    if any(isinstance(f, DeepSpeedImportTrigger) or type(f).__name__ == "DeepSpeedImportTrigger"
           for f in sys.meta_path):
        return
    if "deepspeed" in sys.modules:
        from anyaccel.integrations.deepspeed import install

        install()
        return
    sys.meta_path.insert(0, DeepSpeedImportTrigger())
