"""Every use of a private torch or Triton name, one module per dependency area, each with a public fallback.

A torch or Triton release that renames or removes a private name is then fixed here, in one place, and
until it is, the fallback keeps anyaccel working (slower at worst). Rules each module follows:

* its docstring names the torch/Triton versions its private path is tested on;
* the private name is looked up when first needed (never assumed), and when it is missing or no longer
  behaves as expected the module uses the public API instead, without being told;
* ``tests/_compat`` runs the private path (where the installed version has it) and the forced fallback
  (the private name patched away) on every supported version;
* it imports nothing else of anyaccel: any layer may import it.

``scripts/check_private_names.py`` fails CI on a private torch/Triton name used anywhere else.

Modules:

* `torch_optim`: torch.optim's global step hooks and optimizer hook registries.
* `dynamo`: marking a function as a constant result without importing Dynamo.
* `dispatcher`: ``torch._C`` dispatcher queries (dispatch keys, kernels, modes, schemas).
* `library`: ``torch._library.triton``'s ``wrap_triton`` switch.
* `triton_launch`: the eager launch of a cached ``CompiledKernel`` (Triton's launcher).
* `functorch`: whether a functorch transform is active.
* `foreach`: ``torch._foreach_*`` list ops.
* `data_ptrs`: many tensors' data pointers checked in one C++ call.
* `prims`: ``torch._prims_common``'s elementwise type promotion.
* `devices`: device-module internals (oneDNN float16, the MPS default generator).
* `modules`: whether a module call would run forward hooks.
* `tensor_version`: a tensor's version counter, read.
* `fake_tensor`: recognising fake tensors.
* `triton_interpreter`: whether Triton's interpreter runs the kernels with this NumPy.
* `asserts`: a device-side assertion (a check of device data without a synchronisation).
"""

from __future__ import annotations

__all__ = ["PrivateAPIUnavailableError"]


class PrivateAPIUnavailableError(RuntimeError):
    """A feature needs a torch/Triton internal that this version lacks and that has no public equivalent.

    Args:
        what: the feature (``"the MPS default generator"``).
        name: the private name looked up (``"torch.mps._get_default_mps_generator"``).
        fix: what the caller can do instead.
    """

    def __init__(self, what: str, name: str, fix: str) -> None:
        import torch

        super().__init__(f"{what} needs {name}, which torch {torch.__version__} does not have, and torch has no "
                         f"public equivalent; {fix}")
        self.what = what
        self.name = name
