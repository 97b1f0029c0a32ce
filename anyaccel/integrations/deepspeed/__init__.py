"""DeepSpeed runs on anyaccel: one call, or one environment variable.

    import anyaccel.integrations.deepspeed as ds_integration
    ds_integration.install()          # before or after `import deepspeed`
    import deepspeed
    deepspeed.accelerator.get_accelerator()   # anyaccel's chosen accelerator, as DeepSpeed sees it

or, with no code change, ``ANYACCEL_DEEPSPEED=1`` in the environment of a Python whose site-packages holds
``anyaccel-deepspeed.pth`` (written by anyaccel's wheel, or by
``python -m anyaccel.integrations.deepspeed write-pth``): the first ``import deepspeed`` calls
[`install`][anyaccel.integrations.deepspeed.install] (``_anyaccel_deepspeed_startup``). See ``docs/deepspeed.md`` for
what changes in DeepSpeed
and every difference between anyaccel's accelerators and DeepSpeed's.

Importing this package is cheap and never imports DeepSpeed; DeepSpeed is not a dependency of anyaccel.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path
from typing import Any

from anyaccel import settings
from anyaccel.integrations.deepspeed.builders import DEEPSPEED_MODULE_ABI, DeepSpeedBuilderAdapter
from anyaccel.integrations.deepspeed.errors import (
    DeepSpeedABIMissingError,
    DeepSpeedBuilderNotImplementedError,
    DeepSpeedIntegrationError,
    DeepSpeedNotInstalledError,
    UntestedDeepSpeedVersionError,
)
from anyaccel.integrations.deepspeed.version import (
    ALLOW_UNTESTED_ENV,
    TESTED_VERSIONS,
    installed_version,
    is_tested,
)
from anyaccel.integrations.deepspeed.view import DeepSpeedFacingAccelerator, deepspeed_view
from anyaccel.integrations.deepspeed.wiring import install, is_installed, is_wired, uninstall

__all__ = [
    "install",
    "uninstall",
    "is_installed",
    "is_wired",
    "status",
    "deepspeed_view",
    "DeepSpeedFacingAccelerator",
    "DeepSpeedBuilderAdapter",
    "DEEPSPEED_MODULE_ABI",
    "TESTED_VERSIONS",
    "ENABLE_ENV",
    "ALLOW_UNTESTED_ENV",
    "PTH_NAME",
    "DeepSpeedIntegrationError",
    "DeepSpeedNotInstalledError",
    "UntestedDeepSpeedVersionError",
    "DeepSpeedBuilderNotImplementedError",
    "DeepSpeedABIMissingError",
]

#: ``1``/``true``/``yes``/``on``: the startup hook installs anyaccel into DeepSpeed at ``import deepspeed``.
ENABLE_ENV = settings.DEEPSPEED.name
#: The startup-hook file placed in site-packages (its content: ``_anyaccel_deepspeed_startup.PTH_LINE``).
PTH_NAME = "anyaccel-deepspeed.pth"


def _site_dirs() -> list[str]:
    dirs: list[str] = []
    try:
        dirs.extend(site.getsitepackages())
    except AttributeError:  # some virtualenv builds lack it
        pass
    user = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user:
        dirs.append(user)
    dirs.extend(p for p in sys.path if p)
    return list(dict.fromkeys(dirs))


def startup_hook_file() -> Path | None:
    """The ``anyaccel-deepspeed.pth`` file this interpreter processes at startup, or None if there is none."""
    for directory in _site_dirs():
        candidate = Path(directory) / PTH_NAME
        if candidate.is_file():
            return candidate
    return None


def status() -> dict[str, Any]:
    """Whether DeepSpeed is installed and wired, for ``anyaccel report`` (never imports DeepSpeed).

    Returns:
        A JSON-able dict: ``installed`` (bool), ``version`` (str or None), ``tested`` (bool),
        ``tested_versions``, ``env`` (the value of ``ANYACCEL_DEEPSPEED`` or None), ``startup_hook``
        (path of ``anyaccel-deepspeed.pth`` or None), ``hook_active`` (DeepSpeed is installed, the variable
        is on and the hook file present: ``import deepspeed`` will install anyaccel), ``installed_in_process``
        (``install()`` was called here) and ``wired`` (DeepSpeed is imported here and uses anyaccel).
    """
    version = installed_version()
    env = os.environ.get(ENABLE_ENV)
    hook = startup_hook_file()
    enabled = settings.DEEPSPEED.get()
    return {
        "installed": version is not None,
        "version": version,
        "tested": bool(version and is_tested(version)),
        "tested_versions": list(TESTED_VERSIONS),
        "env": env,
        "startup_hook": str(hook) if hook else None,
        "hook_active": bool(version is not None and enabled and hook is not None),
        "installed_in_process": is_installed(),
        "wired": is_wired(),
    }
