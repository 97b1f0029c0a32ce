"""A pytest plug-in that installs anyaccel into DeepSpeed for a whole test session.

    python -m pytest -p anyaccel.integrations.deepspeed.pytest_plugin <DeepSpeed's tests>

``pytest_configure`` calls [`anyaccel.integrations.deepspeed.install`][anyaccel.integrations.deepspeed.install] before
any test module imports
DeepSpeed; the session header says what DeepSpeed will use. Processes the tests start themselves
(DeepSpeed's ``DistributedTest`` uses forkserver/spawn) do not load pytest plug-ins: give them
``ANYACCEL_DEEPSPEED=1`` with the startup hook (``scripts/run_deepspeed_tests.py`` does both).
"""

from __future__ import annotations

from typing import Any


def pytest_configure(config: Any) -> None:
    """Install anyaccel into DeepSpeed (idempotent; the startup hook may have done it already)."""
    from anyaccel.integrations.deepspeed import install

    install()


def pytest_report_header(config: Any) -> str:
    """One header line: the DeepSpeed version and that anyaccel's accelerator serves it."""
    import anyaccel
    from anyaccel.integrations.deepspeed import status

    info = status()
    state = "wired" if info["wired"] else "wired when DeepSpeed is imported"
    return (f"anyaccel {anyaccel.__version__}: DeepSpeed {info['version']} uses anyaccel's "
            f"{anyaccel.get_accelerator()._name!r} accelerator ({state})")
