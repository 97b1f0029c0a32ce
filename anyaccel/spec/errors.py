"""The spec package's error."""

from __future__ import annotations


class SpecError(ValueError):
    """An op spec is malformed (bad schema, unknown function or build); the message names the spec and field."""

