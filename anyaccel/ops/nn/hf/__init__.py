"""Hugging Face integration of the model ops: transformers' kernel-layer markers (:mod:`.markers`), the
equivalence checks that decide what may be replaced (:mod:`.equivalence`), anyaccel's layers for the
``kernels`` package's ``kernelize`` (:mod:`.kernels_hub`). ``anyaccel.ops.patch`` (:mod:`anyaccel.ops.nn.hf_patch`)
uses them. Importing this package imports neither transformers nor ``kernels``."""
