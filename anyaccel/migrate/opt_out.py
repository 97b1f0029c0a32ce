"""Lines a user opted out of migration with an inline ``# anyaccel: ignore`` comment."""

from __future__ import annotations

import io
import logging
import tokenize

from anyaccel.migrate.rules import OPT_OUT_PATTERN

logger = logging.getLogger(__name__)


def opted_out_lines(source: str) -> frozenset[int]:
    """Return the 1-based numbers of the lines whose comment matches ``rules.OPT_OUT_PATTERN``.

    Only real comments count (found with the standard ``tokenize`` module), so the marker inside a string
    literal does not opt a line out. If tokenizing fails (code the running Python cannot tokenize), every
    line containing the marker counts, which errs on the side of leaving code alone.

    Args:
        source: Python source text.

    Returns:
        The set of line numbers carrying the marker.
    """
    lines = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and OPT_OUT_PATTERN.search(token.string):
                lines.add(token.start[0])
    except (tokenize.TokenError, SyntaxError) as exc:
        logger.debug("tokenize failed (%s); matching the opt-out marker line by line", exc)
        lines = {n for n, text in enumerate(source.splitlines(), start=1) if OPT_OUT_PATTERN.search(text)}
    return frozenset(lines)
