"""Test helpers shipped with anyaccel: the accelerator conformance suite for plug-in authors.

See ``docs/plugins.md``. `anyaccel.testing.conformance` has the checks (plain functions, no pytest);
`anyaccel.testing.pytest_conformance` wraps them as a pytest test class to subclass. The other modules
serve anyaccel's own test suites (model-op parametrisation and tolerances; `anyaccel.testing.processes`,
ending the ranks of multi-process test scripts).
"""
