"""Rotary position embedding, Hugging Face (half-split) and interleaved layouts (op spec in ``spec.py``)."""
