"""SwiGLU (``silu(a) * b``) and SiLU (op spec in ``spec.py``)."""
