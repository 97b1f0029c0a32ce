"""The three implementations every model-op family has, for its spec (cheap: imports only the spec
vocabulary).

- ``triton`` (priority 20, CUDA and XPU): ``<family>/triton.py``, Triton kernels;
- ``torch`` (priority 10, every device type): ``<family>/portable.py``, torch ops;
- ``triton_interpreter`` (priority 1, CPU, only with ``TRITON_INTERPRET=1``): the same Triton kernels run by
  Triton's interpreter on the CPU, so CI checks the Triton code; chosen only when forced
  (``impl="triton_interpreter"`` or ``ANYACCEL_IMPL_<FAMILY>=triton_interpreter``).
"""

from __future__ import annotations

from anyaccel.spec import Implementation


def standard_implementations(family: str) -> tuple[Implementation, ...]:
    """The ``triton``, ``torch`` and ``triton_interpreter`` implementations of ``family``."""
    base = f"anyaccel.ops.nn.families.{family}"
    where = f"anyaccel/ops/nn/families/{family}"
    return (
        Implementation("triton", 20, ("cuda", "xpu"), module=f"{base}.triton:load", requires=("triton",),
                       description=f"Triton kernels ({where}/triton.py)"),
        Implementation("torch", 10, ("*",), module=f"{base}.portable:load",
                       description=f"portable torch ops ({where}/portable.py)"),
        Implementation("triton_interpreter", 1, ("cpu",), module=f"{base}.triton:load", requires=("triton",),
                       probe="anyaccel.ops.nn.probes:triton_interpreter",
                       description="the Triton kernels in Triton's CPU interpreter (for tests)"),
    )
