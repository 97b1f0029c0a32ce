"""Cheap availability probes named by the model ops' specs (``Implementation.probe``).

A probe returns ``(available, reason)``; it imports nothing heavy and touches no device.
"""

from __future__ import annotations

import os


def triton_interpreter() -> tuple[bool, str]:
    """Whether Triton's interpreter is switched on (``TRITON_INTERPRET=1``) and can run the kernels with this
    NumPy (`anyaccel._compat.triton_interpreter.scalar_loop_bounds`): Triton kernels then run on the CPU,
    element by element in NumPy (slow: for tests of the Triton code on small shapes, not for speed).

    Side effects: with ``TRITON_INTERPRET=1``, the first call may import Triton and run one tiny kernel."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False, "TRITON_INTERPRET is not 1 (Triton kernels need a GPU otherwise)"
    from anyaccel._compat.triton_interpreter import scalar_loop_bounds

    works, reason = scalar_loop_bounds()
    if not works:
        return False, reason
    return True, "TRITON_INTERPRET=1: Triton kernels run on the CPU in Triton's interpreter"
