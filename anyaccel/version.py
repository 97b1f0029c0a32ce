"""The package version, in its own module so setup.py and the cache key read it without importing torch."""

__version__ = "0.1.0"
