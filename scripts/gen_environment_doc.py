"""Write (or, with ``--check``, compare) the table of ``ANYACCEL_*`` variables in ``docs/environment.md``.

The table is rendered from the declarations in `anyaccel.settings`; it sits between two marker lines of
the document. ``--check`` exits with status 1 and names the first differing line when the document and the
declarations disagree (``tests/scripts/test_gen_environment_doc.py`` runs it).

Usage::

    python scripts/gen_environment_doc.py [--check] [--doc docs/environment.md]
"""

from __future__ import annotations

import argparse
import difflib
import logging
import sys
from pathlib import Path

from anyaccel.settings import markdown_table

logger = logging.getLogger("gen_environment_doc")

DOC = Path(__file__).resolve().parent.parent / "docs" / "environment.md"
BEGIN = "<!-- begin: generated from anyaccel/settings.py by scripts/gen_environment_doc.py; do not edit -->"
END = "<!-- end: generated table -->"


class DocFormatError(ValueError):
    """The document lacks the marker lines around the generated table."""


def render(text: str) -> str:
    """``text`` (the document) with the table between the markers replaced by the declarations' table.

    Raises:
        DocFormatError: a marker line is missing or out of order.
    """
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise DocFormatError(f"the document has no '{BEGIN}' ... '{END}' block; add the two lines where the "
                             "table belongs")
    return text[:start] + BEGIN + "\n" + markdown_table() + text[end:]


def main(argv: list[str] | None = None) -> int:
    """Write or check the table; returns the exit status (1: ``--check`` found a difference)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(message)s", level=logging.INFO)
    text = args.doc.read_text()
    wanted = render(text)
    if not args.check:
        args.doc.write_text(wanted)
        return 0
    if wanted == text:
        return 0
    diff = difflib.unified_diff(text.splitlines(), wanted.splitlines(), "document", "settings", lineterm="", n=0)
    logger.error("%s disagrees with anyaccel/settings.py (run scripts/gen_environment_doc.py to rewrite it):\n%s",
                 args.doc, "\n".join(list(diff)[:20]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
