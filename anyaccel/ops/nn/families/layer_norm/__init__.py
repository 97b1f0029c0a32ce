"""LayerNorm over the last dimension (op spec in ``spec.py``)."""
