"""Scalar ranges written as intervals (``"[0, 1)"``, ``"(0, inf)"``): one description of an argument's
accepted values, read by the spec validation, the generated C++ checks, the fakes and the front ends."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_INTERVAL = re.compile(r"^\s*([\[(])\s*(-?inf|[-+0-9.eE]+)\s*,\s*(-?inf|[-+0-9.eE]+)\s*([\])])\s*$")


@dataclass(frozen=True)
class Interval:
    """A closed, open or half-open interval of accepted scalar values.

    Attributes:
        low, high: the bounds (``-inf``/``inf`` allowed).
        low_closed, high_closed: whether each bound is included.
    """

    low: float
    high: float
    low_closed: bool
    high_closed: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        """Parse ``"[0, 1)"``-style text.

        Raises:
            ValueError: the text is not an interval.
        """
        m = _INTERVAL.match(text)
        if m is None:
            raise ValueError(f"{text!r} is not an interval such as '[0, 1)' or '(0, inf)'")
        return cls(float(m[2]), float(m[3]), m[1] == "[", m[4] == "]")

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the interval (NaN never does)."""
        lo_ok = value >= self.low if self.low_closed else value > self.low
        hi_ok = value <= self.high if self.high_closed else value < self.high
        return lo_ok and hi_ok

    def describe(self, name: str) -> str:
        """The rule in words: ``"0 <= beta1 < 1"``, ``"eps > 0"``, ``"step >= 1"``."""
        if not math.isfinite(self.high):
            return f"{name} {'>=' if self.low_closed else '>'} {_num(self.low)}" if math.isfinite(self.low) else name
        parts = []
        if math.isfinite(self.low):
            parts.append(f"{_num(self.low)} {'<=' if self.low_closed else '<'} ")
        parts.append(name)
        parts.append(f" {'<=' if self.high_closed else '<'} {_num(self.high)}")
        return "".join(parts)


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)
