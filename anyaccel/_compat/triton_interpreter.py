"""Whether Triton's interpreter (``TRITON_INTERPRET=1``) can run anyaccel's kernels with the installed NumPy.

The interpreter passes a scalar kernel argument as a one-element NumPy array and, in Triton 3.6 (torch
2.10's Triton), converts it to an ``int`` for ``range(...)`` loop bounds with ``int(array)``, which NumPy 2.4
refuses for arrays with a dimension ("only 0-dimensional arrays can be converted to Python scalars"); Triton
3.9's interpreter squeezes the array first. Every kernel that loops up to a runtime argument then fails.

`scalar_loop_bounds` finds out by behaviour, never by version numbers: when NumPy still converts a
one-element array, it answers yes at once; otherwise it runs a two-iteration interpreted kernel once per
process. Tested with Triton 3.6.0 + NumPy 2.3.5 (works), Triton 3.6.0 + NumPy 2.4.6 (refused, with the reason),
and Triton 3.9.0 + NumPy 2.4.6 (works). No private name is used.
"""

from __future__ import annotations

import functools
import warnings

__all__ = ["scalar_loop_bounds"]


@functools.cache
def scalar_loop_bounds() -> tuple[bool, str]:
    """``(works, reason)``: whether interpreted kernels can use scalar arguments as loop bounds here.

    Side effects: may import Triton and run one tiny kernel in its interpreter (once per process; call it only
    with ``TRITON_INTERPRET=1`` set).
    """
    import numpy

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            int(numpy.array([2]))
        return True, f"NumPy {numpy.__version__} converts one-element arrays"
    except TypeError:
        pass
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def loop(out, n):
        acc = tl.zeros((), dtype=tl.int32)
        for _ in range(0, n):
            acc += 1
        tl.store(out, acc)

    out = torch.zeros(1, dtype=torch.int32)
    try:
        loop[(1,)](out, 2)
    except Exception as exc:  # noqa: BLE001 (the interpreter wraps whatever failed in its own error types)
        return False, (f"Triton {triton.__version__}'s interpreter cannot use a scalar kernel argument as a loop "
                       f"bound with NumPy {numpy.__version__} ({type(exc).__name__}: {exc}); install numpy<2.4 "
                       "or a Triton whose interpreter handles it (3.9 does)")
    if int(out.item()) != 2:
        return False, f"Triton {triton.__version__}'s interpreter ran a 2-iteration loop {int(out.item())} times"
    return True, f"Triton {triton.__version__}'s interpreter handles scalar loop bounds with NumPy {numpy.__version__}"
