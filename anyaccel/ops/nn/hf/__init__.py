"""Hugging Face integration of the model ops: transformers' kernel-layer markers (`.markers`), the
equivalence checks that decide what may be replaced (`.equivalence`), anyaccel's layers for the
``kernels`` package's ``kernelize`` (`.kernels_hub`). ``anyaccel.ops.patch``
([`anyaccel.ops.nn.hf_patch`][anyaccel.ops.nn.hf_patch])
uses them. Importing this package imports neither transformers nor ``kernels``."""
