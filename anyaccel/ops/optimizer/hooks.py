"""The step protocol of anyaccel's optimizers: torch.optim's step hooks and profiler range, run once per step.

``step_entry`` makes a function an optimizer's ``step``; see
[`anyaccel._compat.torch_optim.step_entry`][anyaccel._compat.torch_optim.step_entry]
for what it runs and how it falls back to torch's public ``Optimizer.profile_hook_step``.
"""

from __future__ import annotations

from anyaccel._compat.torch_optim import step_entry

__all__ = ["step_entry"]
