"""One op-builder base per backend (CPU, CUDA, SYCL, NPU), mostly data."""
