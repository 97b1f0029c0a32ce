"""A tiny ZeRO-3 training run with parameters and optimizer state offloaded to NVMe (a directory), printing
its losses as JSON (run by test_aio_deepspeed.py in a fresh process).

Usage: ds_zero3_nvme.py <anyaccel|deepspeed> <nvme directory | "cpu" for CPU offload>

``anyaccel``: DeepSpeed's swappers get anyaccel's AsyncIOBuilder (patched into the three swapper modules,
which import the builder by name; the DeepSpeed integration will route it for real); ``deepspeed``: its own.
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
    import deepspeed

    if impl == "anyaccel":
        import deepspeed.runtime.swap_tensor.partitioned_optimizer_swapper as pos
        import deepspeed.runtime.swap_tensor.partitioned_param_swapper as pps
        import deepspeed.runtime.swap_tensor.pipelined_optimizer_swapper as pips

        from anyaccel.accelerator import get_accelerator

        class AnyaccelAsyncIOBuilder:
            loads = 0

            def load(self, verbose: bool = False):
                AnyaccelAsyncIOBuilder.loads += 1
                return get_accelerator().create_op_builder("AsyncIOBuilder").load()

        for module in (pps, pos, pips):
            module.AsyncIOBuilder = AnyaccelAsyncIOBuilder
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
        x, y = torch.randn(4, 64, generator=gen), torch.randn(4, 64, generator=gen)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    loads = AnyaccelAsyncIOBuilder.loads if impl == "anyaccel" else None
    print(json.dumps({"losses": losses, "anyaccel_loads": loads}))


if __name__ == "__main__":
    main()
