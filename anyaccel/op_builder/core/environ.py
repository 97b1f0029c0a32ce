"""Temporary, exactly-restored changes to ``os.environ`` for the duration of a build.

torch.utils.cpp_extension reads ``CXX``, ``MAX_JOBS``, ``PATH`` (to find ninja) and
``TORCH_CUDA_ARCH_LIST`` from the process environment. DeepSpeed sets such variables globally and leaves
them set, which leaks into later builds and the user's own; we set them only inside `scoped_environ`
and restore every variable to its previous value, or remove it, on exit, also when the build raises.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping

# os.environ is process-wide: serialise the builds that change it, so two threads cannot interleave.
_ENV_LOCK = threading.RLock()


@contextlib.contextmanager
def scoped_environ(updates: Mapping[str, str | None]) -> Iterator[None]:
    """Set (value) or remove (None) the given variables, and restore them on exit.

    Args:
        updates: variable name -> new value, or None to remove it for the duration.

    Side effects: mutates ``os.environ`` while the context is open; holds a process-wide lock so
    concurrent builds in threads do not see each other's values.
    """
    with _ENV_LOCK:
        saved = {name: os.environ.get(name) for name in updates}
        try:
            for name, value in updates.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
