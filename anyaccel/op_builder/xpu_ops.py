"""The XPU (SYCL) builders of the fused GPU optimizers and their entries for the implementation loader.

``XPUFusedAdamBuilder`` / ``XPUFusedLionBuilder`` compile ``csrc/adam/fused_adam_sycl.sycl`` and
``csrc/lion/fused_lion_sycl.sycl``: the same ops (names, schemas, argument checks, dtype combinations,
math) as the CUDA builders, registered for the XPU dispatch key::

    adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs,
              Tensor(d!)[] model_copies, int step, float lr, float beta1, float beta2, float eps,
              float weight_decay, bool bias_correction, bool adamw_mode) -> ()
    lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] model_copies,
              float lr, float beta1, float beta2, float weight_decay) -> ()

On an XPU the priority loader (:mod:`anyaccel.op_builder.implementations`) offers the SYCL kernel
(priority 20: prebuildable, no per-dtype JIT at the first step) and the Triton kernel (priority 10), and
logs which one it chose; :data:`IMPLEMENTATIONS` holds the SYCL rows and
``anyaccel.op_builder.implementations`` registers them on its first lookup.
"""

from __future__ import annotations

from typing import ClassVar

from anyaccel.op_builder.implementations import ImplementationRow, builder_loader, builder_probe
from anyaccel.op_builder.sycl import SYCLOpBuilder

__all__ = ["XPUFusedAdamBuilder", "XPUFusedLionBuilder", "IMPLEMENTATIONS"]


def _adam_step_fake(params, grads, exp_avgs, exp_avg_sqs, model_copies, step, lr, beta1, beta2, eps,  # noqa: ANN001
                    weight_decay, bias_correction, adamw_mode) -> None:
    """Fake of ``adam_step``: it mutates its tensor-list arguments in place and returns nothing."""
    return None


def _lion_step_fake(params, grads, exp_avgs, model_copies, lr, beta1, beta2, weight_decay) -> None:  # noqa: ANN001
    """Fake of ``lion_step``: it mutates its tensor-list arguments in place and returns nothing."""
    return None


class XPUFusedAdamBuilder(SYCLOpBuilder):
    """Builds the fused multi-tensor Adam SYCL kernel (served as DeepSpeed's ``FusedAdamBuilder`` on XPU)."""

    NAME: ClassVar[str] = "fused_adam"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_FUSED_ADAM"

    def sources(self) -> list[str]:
        """``csrc/adam/fused_adam_sycl.sycl``."""
        return ["csrc/adam/fused_adam_sycl.sycl"]

    def register_fakes(self, namespace: str) -> None:
        """Register the fake of ``<namespace>::adam_step`` so ``torch.compile`` can trace it."""
        import torch

        torch.library.register_fake(f"{namespace}::adam_step")(_adam_step_fake)


class XPUFusedLionBuilder(SYCLOpBuilder):
    """Builds the fused multi-tensor Lion SYCL kernel (served as DeepSpeed's ``FusedLionBuilder`` on XPU)."""

    NAME: ClassVar[str] = "fused_lion"
    BUILD_VAR: ClassVar[str] = "ANYACCEL_BUILD_FUSED_LION"

    def sources(self) -> list[str]:
        """``csrc/lion/fused_lion_sycl.sycl``."""
        return ["csrc/lion/fused_lion_sycl.sycl"]

    def register_fakes(self, namespace: str) -> None:
        """Register the fake of ``<namespace>::lion_step`` so ``torch.compile`` can trace it."""
        import torch

        torch.library.register_fake(f"{namespace}::lion_step")(_lion_step_fake)


#: (op, implementation name, priority, device types, probe, loader, description): the rows this module
#: contributes to :mod:`anyaccel.op_builder.implementations` (same shape as its built-in table).
IMPLEMENTATIONS: tuple[ImplementationRow, ...] = (
    ("fused_adam", "sycl", 20, ("xpu",), builder_probe(XPUFusedAdamBuilder), builder_loader(XPUFusedAdamBuilder),
     "SYCL multi-tensor kernel (csrc/adam/fused_adam_sycl.sycl)"),
    ("fused_lion", "sycl", 20, ("xpu",), builder_probe(XPUFusedLionBuilder), builder_loader(XPUFusedLionBuilder),
     "SYCL multi-tensor kernel (csrc/lion/fused_lion_sycl.sycl)"),
)

