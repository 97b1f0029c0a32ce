"""One rank of a small DeepSpeed training run; prints its losses and what ran as one JSON line.

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \\
        python tests/integrations/ds_train.py {anyaccel|deepspeed} STAGE [STEPS [OPTIMIZER [OFFLOAD]]]

``anyaccel``: ``anyaccel.integrations.deepspeed.install()`` (the one call) before ``import deepspeed``;
``deepspeed``: DeepSpeed's own CPU accelerator. Both train the same seeded MLP with ZeRO ``STAGE``, gloo, fp32,
DeepSpeed's optimizer ``OPTIMIZER`` (``AdamW`` by default; ``Adagrad``, ``Lion``, ``Adam``) and
``offload_optimizer: {device: OFFLOAD}`` (``cpu`` by default: DeepSpeed picks its ``DeepSpeedCPUAdam``,
``DeepSpeedCPUAdagrad`` or ``DeepSpeedCPULion``; ``none``: no offload, DeepSpeed picks ``FusedAdam`` or
``FusedLion``).
"""

from __future__ import annotations

import json
import os
import sys

#: DeepSpeed's attribute holding the loaded op module, per optimizer class
KERNEL_ATTRIBUTES = ("ds_opt_adam", "ds_opt_adagrad", "ds_opt_lion", "multi_tensor_adam", "multi_tensor_lion")


def main(accelerator: str, stage: int, steps: int, optimizer_type: str = "AdamW", offload: str = "cpu") -> None:
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
        "optimizer": {"type": optimizer_type, "params": {"lr": 1e-3 if optimizer_type == "Lion" else 3e-3,
                                                         "weight_decay": 0.01}},
        "zero_optimization": {"stage": stage, **({"offload_optimizer": {"device": offload}} if offload != "none"
                                                 else {})},
        "gradient_clipping": 1.0,
        "steps_per_print": 10_000,
        "wall_clock_breakdown": False,
    }
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    rank = engine.global_rank
    data = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 32, generator=data).to(engine.device)
        y = torch.randn(8, 8, generator=data).to(engine.device)
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
    inner = getattr(optimizer, "optimizer", optimizer)
    kernel = next((getattr(inner, a) for a in KERNEL_ATTRIBUTES if hasattr(inner, a)), None)
    kernel = getattr(kernel, "__self__", kernel)  # a bound multi_tensor_* function: its module
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
    }), flush=True)
    # gloo's worker threads racing the interpreter's exit can abort the process ("terminate called without an
    # active exception", seen in CI on a rank of a 2-rank ZeRO-3 run): end_rank() skips finalization
    from anyaccel.testing.processes import end_rank

    end_rank()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 6, *sys.argv[4:6])
