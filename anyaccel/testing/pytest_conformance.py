"""The conformance suite as a pytest class: subclass it and provide the ``accelerator`` fixture.

    # tests/test_my_accelerator.py
    import pytest
    from anyaccel.testing.pytest_conformance import AcceleratorConformance
    from my_package.accelerator import MyAccelerator

    class TestMyAccelerator(AcceleratorConformance):
        @pytest.fixture
        def accelerator(self):
            return MyAccelerator()

Each check of `anyaccel.testing.conformance.CHECKS` becomes one test case.
"""

from __future__ import annotations

from typing import Any

import pytest

from anyaccel.testing.conformance import CHECKS

__all__ = ["AcceleratorConformance"]


class AcceleratorConformance:
    """Mixin of conformance tests; override the ``accelerator`` fixture to return your instance."""

    @pytest.fixture
    def accelerator(self) -> Any:
        """Override in the subclass: return the accelerator instance to check."""
        pytest.skip("override the 'accelerator' fixture to return your accelerator instance")

    @pytest.mark.parametrize("check_name", sorted(CHECKS))
    def test_conformance(self, accelerator: Any, check_name: str) -> None:
        """Run one conformance check."""
        CHECKS[check_name](accelerator)
