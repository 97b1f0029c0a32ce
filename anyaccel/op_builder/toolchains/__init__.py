"""Compilers, ninja, the CPU ISA level, CUDA/SYCL toolkits, torch's stable ABI and the schema header."""
