"""Softmax and log-softmax (op spec in ``spec.py``)."""
