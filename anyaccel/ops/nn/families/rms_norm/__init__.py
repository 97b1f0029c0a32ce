"""RMSNorm and fused residual-add + RMSNorm (op spec in ``spec.py``; front ends in
:mod:`anyaccel.ops.nn.functional`)."""
