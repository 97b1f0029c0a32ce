"""Triton kernels of anyaccel's ops (fused optimizers); Triton runs on CUDA and Intel XPU devices.

Importing this package imports neither Triton nor a device runtime; the kernel modules
(:mod:`anyaccel.ops.triton.adam`, :mod:`anyaccel.ops.triton.lion`) import Triton and are loaded on demand
by :mod:`anyaccel.ops.dispatch`.
"""
