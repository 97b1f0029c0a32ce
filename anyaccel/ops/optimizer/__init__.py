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
  tensor: before any launch, every bucket that launches after another one is compared with the signature it
  was validated with (gradients' shapes, dtypes and contiguity, state tensors' data pointers and version
  counters: `unchanged`), so a gradient or state tensor changed in place
  since (``resize_``, ``.data = x``, a 16-bit gradient of an fp32 parameter) sends the group back through the
  full validation, which raises before anything is written. The first launch of a step validates its own
  tensors in the kernel, before writing any, and its step count advances only after it returns. Device
  implementations that have ``<family>_plan`` keep the validated tensor table on the device
  (``csrc/includes/cuda/multi_tensor_apply.cuh``), so a step launches with no tensor list at all; the table is
  rebuilt when a parameter's or gradient's storage moves (``p.data = ...``, a new gradient allocation).
* **One step at a time.** ``step()``, ``state_dict()`` and ``load_state_dict()`` hold the optimizer's
  re-entrant step lock ([`step_lock`][anyaccel.ops.optimizer.hooks.step_lock]): steps called from two threads run
  one after the other, each whole and counted once (an uncontended lock costs well under a microsecond).
* **Capturable steps** (``capturable=True``): the step count and the learning rate live in device memory, so
  ``step()`` can be captured in a CUDA graph and replayed (as ``torch.optim``'s ``capturable=True``).
* **Checkpoints.** ``state_dict()`` holds plain dicts and tensors (``torch.load(weights_only=True)`` reads
  it); ``load_state_dict`` validates the whole dict first (groups, keys, shapes, dtypes, torch options this
  optimizer does not implement), keeps fp32 state of 16-bit parameters in fp32, maps torch's
  ``decoupled_weight_decay``, and leaves the optimizer unchanged when it raises.

State per parameter: ``step``, a 0-dim float32 tensor (as ``torch.optim`` keeps it; parameters stepped
together share one, so a step advances it once; on the device with ``capturable``; ``state_dict()`` gives
each parameter a copy of its own, as ``torch.optim`` lays it out), the family's state
tensors (``exp_avg``, ...; contiguous, shaped like the parameter), and ``master`` (an fp32 copy of a 16-bit
parameter) with ``master_weights``.

Limit (documented rather than checked, as checking costs one more pass over every tensor per step): a
parameter or state tensor given another view of its own storage at the same address
(``state['exp_avg'].data = state['exp_avg'].view(-1)``) is not noticed by a cached plan until its kernel
refuses it (after earlier buckets of the step were written); assign the entry instead
(``state['exp_avg'] = x``), which is noticed.

Modules: `base` (``ListOptimizer``, ``Hyper``: hyper-parameters and parameters),
`state` (state and checkpoint validation), `plans`
(plans and launch caching), `hooks` (torch.optim's step protocol).
"""

from __future__ import annotations

from anyaccel.ops.optimizer.base import PARAM_DTYPES, Hyper, ListOptimizer
from anyaccel.ops.optimizer.hooks import step_entry, step_lock
from anyaccel.ops.optimizer.state import LOW_PRECISION

__all__ = ["LOW_PRECISION", "PARAM_DTYPES", "Hyper", "ListOptimizer", "step_entry", "step_lock"]
