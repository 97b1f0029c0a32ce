"""``ListOptimizer``: the one base of anyaccel's optimizers (``CPUAdam``, ``FusedAdam``, ``CPULion``, ...).

An anyaccel optimizer updates every parameter of a group that has a gradient with one op call per bucket
(tensors of one device and one dtype combination), through the op family's implementation for that
device type ([`anyaccel.ops.dispatch`][anyaccel.ops.dispatch]). What this base owns, for every family and device:

* **Validation before mutation.** ``step()`` first checks every group (hyper-parameters against the ranges
  of the op spec, every parameter and gradient: device, dtype, layout, contiguity, inference tensors,
  memory shared between tensors of a step) and loads the ops (which may compile); only then does it create
  state, advance step counts and launch. A ``step()`` that raises has changed nothing.
* **Messages name what the user knows:** ``param_groups[0]['params'][1]``, ``param_groups[0]['betas'][0]``,
  the constructor argument ``betas[0]``; never the kernel's ``grads[0]``.
* **Autograd safety.** The kernels write through raw pointers, so the base bumps the version counter of every
  parameter it updates (a backward through weights changed by ``step()`` then raises "modified by an
  inplace operation", as with ``torch.optim``), and refuses inference tensors.
* **A per-group plan, cached.** The bucketing of a group is built once and reused while the same
  parameters have gradients and no state entry was replaced; a step then costs a few list operations per
  tensor (fewest when the gradient objects are those of the last step, as with
  ``zero_grad(set_to_none=False)``: their identities are compared, nothing is re-checked). Device
  implementations that have ``<family>_plan`` keep the validated tensor table on the device
  (``csrc/includes/cuda/multi_tensor_apply.cuh``), so a step launches with no tensor list at all; the table is
  rebuilt when a parameter's or gradient's storage moves (``p.data = ...``, a new gradient allocation).
* **Capturable steps** (``capturable=True``): the step count and the learning rate live in device memory, so
  ``step()`` can be captured in a CUDA graph and replayed (as ``torch.optim``'s ``capturable=True``).
* **Checkpoints.** ``state_dict()`` holds plain dicts and tensors (``torch.load(weights_only=True)`` reads
  it); ``load_state_dict`` validates the whole dict first (groups, keys, shapes, dtypes, torch options this
  optimizer does not implement), keeps fp32 state of 16-bit parameters in fp32, maps torch's
  ``decoupled_weight_decay``, and leaves the optimizer unchanged when it raises.

State per parameter: ``step``, a 0-dim float32 tensor (as ``torch.optim`` keeps it; parameters stepped
together share one, so a step advances it once; on the device with ``capturable``), the family's state
tensors (``exp_avg``, ...; contiguous, shaped like the parameter), and ``master`` (an fp32 copy of a 16-bit
parameter) with ``master_weights``.

Limits (documented rather than checked, as checking costs a pass over every tensor per step): a state tensor
whose storage is replaced in place (``state['exp_avg'].data = x``) is not noticed by a cached plan; assign
the entry instead (``state['exp_avg'] = x``), which is.

Modules: `base` (``ListOptimizer``, ``Hyper``: hyper-parameters and parameters),
`state` (state and checkpoint validation), `plans`
(plans and launch caching), `hooks` (torch.optim's step protocol).
"""

from __future__ import annotations

from anyaccel.ops.optimizer.base import PARAM_DTYPES, Hyper, ListOptimizer
from anyaccel.ops.optimizer.hooks import step_entry
from anyaccel.ops.optimizer.state import LOW_PRECISION

__all__ = ["LOW_PRECISION", "PARAM_DTYPES", "Hyper", "ListOptimizer", "step_entry"]
