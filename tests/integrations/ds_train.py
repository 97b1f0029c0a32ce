"""One rank of a small DeepSpeed training run; prints its losses and what ran as one JSON line.

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        python tests/integrations/ds_train.py {anyaccel|deepspeed} STAGE [STEPS]

``anyaccel``: ``anyaccel.integrations.deepspeed.install()`` (the one call) before ``import deepspeed``;
``deepspeed``: DeepSpeed's own CPU accelerator. Both train the same seeded MLP with ZeRO ``STAGE`` and
``offload_optimizer: {device: cpu}`` (DeepSpeed picks its ``DeepSpeedCPUAdam``), gloo, fp32.
"""

from __future__ import annotations

import json
import os
import sys


def main(accelerator: str, stage: int, steps: int) -> None:
    import torch

    if accelerator == "anyaccel":
        import anyaccel.integrations.deepspeed as integration

        integration.install()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 8))
    config = {
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.01}},
        "zero_optimization": {"stage": stage, "offload_optimizer": {"device": "cpu"}},
        "gradient_clipping": 1.0,
        "steps_per_print": 10_000,
        "wall_clock_breakdown": False,
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    rank = engine.global_rank
    data = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 32, generator=data)
        y = torch.randn(8, 8, generator=data)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    inner = getattr(optimizer, "optimizer", optimizer)
    kernel = getattr(inner, "ds_opt_adam", None)
    extensions = os.environ.get("TORCH_EXTENSIONS_DIR", "")
    built = sorted(os.listdir(extensions)) if extensions and os.path.isdir(extensions) else []
    print(json.dumps({
        "rank": rank,
        "world_size": engine.world_size,
        "losses": losses,
        "accelerator": f"{type(get_accelerator()).__module__}.{type(get_accelerator()).__name__}",
        "zero_optimizer": type(optimizer).__name__,
        "optimizer": type(inner).__name__,
        "kernel_module": repr(kernel)[:200],
        "torch_extensions": built,
    }))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 6)
