"""Plain values read off libcst nodes: the last name of a dotted expression and a string literal's value.

Shared by the context pass (`anyaccel.migrate.contexts`), the option reader
(`anyaccel.migrate.options`) and the transformer, so none of them imports another for these.
"""

from __future__ import annotations

import libcst as cst

__all__ = ["last_name", "string_value"]


def last_name(expr: cst.BaseExpression) -> str | None:
    """Return the last identifier of a dotted expression (``dist.init_process_group`` -> the latter)."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def string_value(node: cst.CSTNode) -> str | None:
    """The value of a plain (non-bytes) string literal, else None."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None
