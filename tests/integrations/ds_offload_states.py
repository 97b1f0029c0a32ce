"""ZeRO-2 ``engine.offload_states()``/``reload_states()`` (DeepSpeed calls ``pin_empty_like``) between steps.

    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=... \\
        python tests/integrations/ds_offload_states.py {anyaccel|deepspeed}

Prints the losses of three steps with an offload/reload round trip after the first, as one JSON line.
torch's Adam (``torch_adam``), so that both accelerators run the same optimizer code (without it DeepSpeed
picks its FusedAdam, whose CPU kernel DeepSpeed would JIT-build for its own accelerator).
"""

from __future__ import annotations

import json
import sys


def main(accelerator: str) -> None:
    import torch

    if accelerator == "anyaccel":
        import anyaccel.integrations.deepspeed as integration

        integration.install()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    config = {"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
              "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    data = torch.Generator().manual_seed(3)
    losses = []
    for step in range(3):
        loss = engine(torch.randn(4, 16, generator=data)).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(loss.item())
        if step == 0:
            engine.offload_states(pin_memory=True)
            engine.reload_states()
    accelerator_class = type(get_accelerator())
    print(json.dumps({"losses": losses, "accelerator": f"{accelerator_class.__module__}.{accelerator_class.__name__}"}),
          flush=True)
    from anyaccel.testing.processes import end_rank

    end_rank()  # no gloo exit race (see ds_train.py)


if __name__ == "__main__":
    main(sys.argv[1])
