"""Triton kernels of anyaccel's ops (fused optimizers); Triton runs on CUDA and Intel XPU devices.

Importing this package imports neither Triton nor a device runtime; the kernel modules
(`anyaccel.ops.triton.adam`, `anyaccel.ops.triton.lion`) import Triton and are loaded on demand
by [`anyaccel.ops.dispatch`][anyaccel.ops.dispatch].
"""
