"""``CPULamb``: LAMB on CPU parameters (defined with [`FusedLamb`][anyaccel.ops.lamb.fused.FusedLamb])."""

from anyaccel.ops.lamb.fused import CPULamb

__all__ = ["CPULamb"]
