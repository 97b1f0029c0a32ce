"""Reading an argparse ``add_argument(...)`` call: its option strings, its destination, its choices.

The destination follows argparse's own rule (``argparse.ArgumentParser._get_optional_kwargs``): ``dest=``
when given, else the first long option string (``--dist-backend`` -> ``dist_backend``), else the first short
one, with the prefix characters stripped and ``-`` replaced by ``_``; a positional argument's destination is
its name. Only literal strings can be read; anything computed gives None.
"""

from __future__ import annotations

import dataclasses

import libcst as cst

from anyaccel.migrate import rules
from anyaccel.migrate.cst_values import last_name, string_value

__all__ = ["OptionCall", "read_option", "option_of_default"]

#: argparse's default ``prefix_chars``.
_PREFIX = "-"


@dataclasses.dataclass(frozen=True)
class OptionCall:
    """What the codemod needs to know about one ``add_argument`` call.

    Attributes:
        label: how to name the option in a finding: its first option string (``--backend``) or its dest.
        dest: the attribute of the parsed namespace, or None when it cannot be read from the call.
        has_choices: True when the call passes ``choices=``.
    """

    label: str
    dest: str | None
    has_choices: bool


def read_option(call: cst.Call) -> OptionCall:
    """Read ``call`` (an ``add_argument`` call) as argparse would.

    Args:
        call: the ``add_argument(...)`` call node.

    Returns:
        An `OptionCall`; its ``dest`` is None when a string it depends on is not a literal.
    """
    names: list[str | None] = [string_value(a.value) for a in call.args if a.keyword is None and not a.star]
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    has_choices = rules.OPTION_CHOICES in keywords
    literal_names = [n for n in names if n is not None]
    label = literal_names[0] if literal_names else "?"
    if rules.OPTION_DEST in keywords:
        dest = string_value(keywords[rules.OPTION_DEST])
        return OptionCall(label if literal_names else (dest or "?"), dest, has_choices)
    if not names or None in names:
        return OptionCall(label, None, has_choices)
    if not literal_names[0].startswith(_PREFIX):
        return OptionCall(label, literal_names[0], has_choices)
    long_names = [n for n in literal_names if n.startswith(_PREFIX * 2)]
    chosen = (long_names or literal_names)[0]
    return OptionCall(label, chosen.lstrip(_PREFIX).replace("-", "_") or None, has_choices)


def option_of_default(
    node: cst.CSTNode, parent: cst.CSTNode | None, grandparent: cst.CSTNode | None
) -> cst.Call | None:
    """The ``add_argument`` call of which ``node`` is the ``default=`` value, else None.

    Args:
        node: an expression.
        parent: its parent node (an ``Arg`` when it is an argument).
        grandparent: its parent's parent (the ``Call``).
    """
    if not (isinstance(parent, cst.Arg) and parent.value is node and parent.keyword is not None):
        return None
    if parent.keyword.value != rules.OPTION_DEFAULT or not isinstance(grandparent, cst.Call):
        return None
    return grandparent if last_name(grandparent.func) == rules.OPTION_METHOD else None
