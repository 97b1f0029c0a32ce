"""A tiny ZeRO-3 training run with parameters and optimizer state offloaded to NVMe (a directory), printing
its losses as JSON (run by test_aio_deepspeed.py in a fresh process).

Usage: ds_zero3_nvme.py <anyaccel|deepspeed> <nvme directory | "cpu" for CPU offload>

``anyaccel``: ``anyaccel.integrations.deepspeed.install()`` before ``import deepspeed``, so DeepSpeed's
swappers resolve anyaccel's ``AsyncIOBuilder`` by name; ``deepspeed``: DeepSpeed alone. Runs on the GPU when
DeepSpeed's accelerator is CUDA (the model on the GPU, parameters and optimizer state swapped to the
directory), else on the CPU.
"""

from __future__ import annotations

import json
import os
import sys

import torch

os.environ.update({"MASTER_ADDR": "127.0.0.1", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"})
os.environ.setdefault("MASTER_PORT", "29533")


def main() -> None:
    impl, target = sys.argv[1], sys.argv[2]
    if impl == "anyaccel":
        import anyaccel.integrations.deepspeed as integration

        integration.install()  # DeepSpeed's AsyncIOBuilder (and accelerator) become anyaccel's
    import deepspeed
    import deepspeed.runtime.swap_tensor.partitioned_param_swapper as pps

    device = "cpu" if target == "cpu" else "nvme"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    config = {
        "train_batch_size": 4, "steps_per_print": 1000,
        "optimizer": {"type": "Adam", "params": {"lr": 1e-3}},
        "zero_optimization": {
            "stage": 3, "stage3_param_persistence_threshold": 0, "sub_group_size": 100000,
            "offload_param": {"device": device, "nvme_path": target, "buffer_count": 5, "buffer_size": 1e6,
                              "max_in_cpu": 0},
            "offload_optimizer": {"device": device, "nvme_path": target, "buffer_count": 4},
        },
        "aio": {"block_size": 1048576, "queue_depth": 8, "intra_op_parallelism": 1, "single_submit": False,
                "overlap_events": True},
    }
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(6):
        x, y = (torch.randn(4, 64, generator=gen).to(engine.device),
                torch.randn(4, 64, generator=gen).to(engine.device))
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    from deepspeed.accelerator import get_accelerator

    # the builder the parameter swapper resolved (by name, at DeepSpeed's import) and the accelerator's
    builder = pps.AsyncIOBuilder
    print(json.dumps({"losses": losses, "swapper_builder": f"{builder.__module__}.{builder.__qualname__}",
                      "accelerator": type(get_accelerator()).__name__, "device": str(engine.device)}), flush=True)
    from anyaccel.testing.processes import end_rank

    end_rank()  # no gloo exit race (see tests/integrations/ds_train.py)


if __name__ == "__main__":
    main()
