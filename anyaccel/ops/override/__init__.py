"""The aten-override mode: anyaccel's model ops registered over the accelerator's aten kernels.

``anyaccel.ops.enable()``, ``anyaccel.ops.disable()`` and ``with anyaccel.ops.use_ops():`` (in
[`anyaccel.ops.override.mode`][anyaccel.ops.override.mode]) register the ops of `anyaccel.ops.override.aten_ops` over
the
current accelerator's dispatch key; each call goes to anyaccel's kernel or to the original aten kernel as
the per-shape policy says (`anyaccel.ops.override.policy`, measured by `anyaccel.ops.tune`).
FlagGems's ``flag_gems.enable()`` / ``use_gems()`` are the model. Importing this package imports nothing
heavy.
"""
