"""RMSNorm and fused residual-add + RMSNorm (op spec in ``spec.py``; front ends in
[`anyaccel.ops.nn.functional`][anyaccel.ops.nn.functional])."""
