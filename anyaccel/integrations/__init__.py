"""Integrations of anyaccel into other frameworks.

Each integration is a subpackage that imports its framework only when asked to (never at ``import anyaccel``):

- [`anyaccel.integrations.deepspeed`][anyaccel.integrations.deepspeed]: DeepSpeed uses anyaccel's accelerator and op
  builders
  (``docs/deepspeed.md``).
"""
