"""Which DeepSpeed versions the integration was tested with, and the check ``install()`` runs.

The integration relies on DeepSpeed internals that are not a public API (``_validate_accelerator``'s
``isinstance`` check, the names ``deepspeed.ops.op_builder`` binds at import, the op modules' function
names), so an untested DeepSpeed is refused with
[`UntestedDeepSpeedVersionError`][anyaccel.integrations.deepspeed.UntestedDeepSpeedVersionError] unless
``ANYACCEL_DEEPSPEED_ALLOW_UNTESTED=1``, which downgrades the error to one logged warning.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Mapping

from packaging.version import InvalidVersion, Version

from anyaccel import settings
from anyaccel.integrations.deepspeed.errors import DeepSpeedNotInstalledError, UntestedDeepSpeedVersionError

logger = logging.getLogger(__name__)

__all__ = ["TESTED_VERSIONS", "ALLOW_UNTESTED_ENV", "installed_version", "is_tested", "check_version"]

#: DeepSpeed releases the integration was tested with (``tests/integrations``, ``scripts/run_deepspeed_tests.py``).
TESTED_VERSIONS: tuple[str, ...] = ("0.19.8",)
#: ``1``/``true``/``yes``/``on``: accept an untested DeepSpeed with a warning instead of an error.
ALLOW_UNTESTED_ENV = settings.DEEPSPEED_ALLOW_UNTESTED.name



def installed_version() -> str | None:
    """The installed ``deepspeed`` distribution's version, or None when it is not installed.

    Side effects: reads package metadata; does not import DeepSpeed.
    """
    try:
        return importlib.metadata.version("deepspeed")
    except importlib.metadata.PackageNotFoundError:
        return None


def is_tested(version: str) -> bool:
    """True when ``version``'s release (local and dev parts dropped: ``0.19.8+cu128`` is ``0.19.8``) is tested."""
    try:
        release = Version(version).base_version
    except InvalidVersion:
        return False
    return release in TESTED_VERSIONS


def check_version(environ: Mapping[str, str] | None = None) -> str:
    """Return the installed DeepSpeed version after checking it was tested.

    Args:
        environ: the environment to read ``ANYACCEL_DEEPSPEED_ALLOW_UNTESTED`` from (``os.environ`` if None).

    Raises:
        DeepSpeedNotInstalledError: DeepSpeed is not installed.
        UntestedDeepSpeedVersionError: the version is not in
            [`TESTED_VERSIONS`][anyaccel.integrations.deepspeed.version.TESTED_VERSIONS] and the override
            variable is not set.

    Side effects: logs one warning when an untested version is allowed by the override.
    """
    found = installed_version()
    if found is None:
        raise DeepSpeedNotInstalledError()
    if not is_tested(found):
        if not settings.DEEPSPEED_ALLOW_UNTESTED.get(environ):
            raise UntestedDeepSpeedVersionError(found, TESTED_VERSIONS, ALLOW_UNTESTED_ENV)
        logger.warning("DeepSpeed %s is untested with anyaccel (tested: %s); continuing because %s is set",
                       found, ", ".join(TESTED_VERSIONS), ALLOW_UNTESTED_ENV)
    return found
