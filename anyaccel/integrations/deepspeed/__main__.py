"""``python -m anyaccel.integrations.deepspeed``: ``status`` or ``write-pth`` (the startup hook file).

``write-pth [DIR]`` writes ``anyaccel-deepspeed.pth`` into ``DIR`` (default: this interpreter's purelib
site-packages). anyaccel's wheel ships the file; this command is the documented equivalent for installs
that did not write it (an editable install from an older checkout, a vendored copy). The hook needs the
top-level module ``_anyaccel_deepspeed_startup`` importable, which any anyaccel install provides.

``write-pth DIR --sitecustomize`` also writes a ``sitecustomize.py`` into ``DIR`` that processes the ``.pth``
files there: for a site-packages you cannot write to, ``PYTHONPATH=DIR ANYACCEL_DEEPSPEED=1 deepspeed ...``
then installs anyaccel into DeepSpeed in every process the launcher starts. It runs the ``sitecustomize``
it shadows, if any.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger("anyaccel.integrations.deepspeed")


def write_pth(directory: Path) -> Path:
    """Write the startup-hook file into ``directory`` and return its path.

    Raises:
        ModuleNotFoundError: ``_anyaccel_deepspeed_startup`` is not importable here (the hook would fail).
        OSError: ``directory`` is not writable.
    """
    import _anyaccel_deepspeed_startup as startup

    directory.mkdir(parents=True, exist_ok=True)
    target = directory / startup.PTH_NAME
    target.write_text(startup.PTH_LINE, encoding="utf-8")
    return target


SITECUSTOMIZE = """\
# Written by `python -m anyaccel.integrations.deepspeed write-pth --sitecustomize`: process the .pth files in
# this directory (anyaccel-deepspeed.pth) as if it were site-packages, then run the sitecustomize this shadows.
import importlib.util as _util
import os as _os
import site as _site
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
_site.addsitedir(_here)
for _entry in list(_sys.path):
    _candidate = _os.path.join(_entry or _os.getcwd(), "sitecustomize.py")
    if _os.path.abspath(_os.path.dirname(_candidate)) != _here and _os.path.isfile(_candidate):
        _spec = _util.spec_from_file_location("_anyaccel_shadowed_sitecustomize", _candidate)
        if _spec is not None and _spec.loader is not None:
            _spec.loader.exec_module(_util.module_from_spec(_spec))
        break
"""


def write_sitecustomize(directory: Path) -> Path:
    """Write `SITECUSTOMIZE` into ``directory`` (see the module doc) and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "sitecustomize.py"
    target.write_text(SITECUSTOMIZE, encoding="utf-8")
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success)."""
    parser = argparse.ArgumentParser(prog="python -m anyaccel.integrations.deepspeed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="print whether DeepSpeed is installed and wired (JSON)")
    write = sub.add_parser("write-pth", help="write anyaccel-deepspeed.pth into site-packages or DIR")
    write.add_argument("directory", nargs="?", default=sysconfig.get_paths()["purelib"])
    write.add_argument("--sitecustomize", action="store_true",
                       help="also write a sitecustomize.py processing DIR's .pth files (for PYTHONPATH=DIR)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="anyaccel: %(message)s")
    if args.command == "status":
        from anyaccel.integrations.deepspeed import status

        sys.stdout.write(json.dumps(status(), indent=2) + "\n")
        return 0
    path = write_pth(Path(args.directory))
    logger.info("wrote %s; set ANYACCEL_DEEPSPEED=1 to install anyaccel into DeepSpeed at import", path)
    if args.sitecustomize:
        logger.info("wrote %s; put %s first on PYTHONPATH", write_sitecustomize(Path(args.directory)),
                    args.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
