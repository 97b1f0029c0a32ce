"""The shared fixtures of the op tests (a private kernel cache, the loaded host ops): the adapters here run
over the same op modules."""

from tests.ops.conftest import _ops_cache_dir, cpu_adam_module, cpu_lion_module  # noqa: F401
