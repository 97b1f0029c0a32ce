"""The real CPU Adam op builds, loads, reports its ISA and passes opcheck with its fake."""

from __future__ import annotations

import pytest
import torch

from anyaccel.op_builder import CPUAdamBuilder

pytestmark = pytest.mark.slow


def test_cpu_adam_load_and_opcheck():
    b = CPUAdamBuilder()
    m = b.load()
    assert m.namespace.startswith("anyaccel_cpu_adam_") and m.isa == b.isa()
    ns = getattr(torch.ops, m.namespace)
    assert ns.isa() == b.isa()
    shapes = [(37,), (5, 9)]
    p = [torch.randn(s) for s in shapes]
    g = [torch.randn(s) for s in shapes]
    mo = [torch.rand(s) for s in shapes]
    v = [torch.rand(s) for s in shapes]
    args = (p, g, mo, v, 3, 1e-2, 0.9, 0.999, 1e-8, 0.01, True, True)
    ref_p = [x.clone() for x in p]
    m.adam_step(*args)
    assert all(not torch.equal(a, b) for a, b in zip(p, ref_p)), "adam_step must update params in place"
    torch.library.opcheck(ns.adam_step.default, args)
    assert b.is_built()
