"""Cross-entropy over large vocabularies and the fused linear + cross-entropy (op spec in ``spec.py``)."""
