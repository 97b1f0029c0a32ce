"""The model-op families, one package each: ``spec.py`` (the op spec), ``fakes.py`` (validating fakes and
the argument rules), ``autograd.py`` (backward formulas), ``portable.py`` (torch ops, every device) and
``triton.py`` (Triton kernels). The front ends are in [`anyaccel.ops.nn.functional`][anyaccel.ops.nn.functional]."""
