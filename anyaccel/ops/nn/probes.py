"""Cheap availability probes named by the model ops' specs (``Implementation.probe``).

A probe returns ``(available, reason)``; it imports nothing heavy and touches no device.
"""

from __future__ import annotations

import os


def triton_interpreter() -> tuple[bool, str]:
    """Whether Triton's interpreter is switched on (``TRITON_INTERPRET=1``): Triton kernels then run on the
    CPU, element by element in NumPy (slow: for tests of the Triton code on small shapes, not for speed)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True, "TRITON_INTERPRET=1: Triton kernels run on the CPU in Triton's interpreter"
    return False, "TRITON_INTERPRET is not 1 (Triton kernels need a GPU otherwise)"
