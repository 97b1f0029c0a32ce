"""A script for the ``deepspeed`` launcher: each rank all-reduces its rank over gloo and writes what it saw.

    ANYACCEL_DEEPSPEED=1 deepspeed --num_gpus 2 tests/integrations/ds_launched.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(out_dir: str) -> None:
    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator

    deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())
    rank, world = deepspeed.comm.get_rank(), deepspeed.comm.get_world_size()
    total = torch.tensor([float(rank + 1)])
    deepspeed.comm.all_reduce(total)
    accelerator = get_accelerator()
    facts = {
        "rank": rank,
        "world_size": world,
        "local_rank": os.environ.get("LOCAL_RANK"),
        "all_reduce": total.item(),
        "accelerator": f"{type(accelerator).__module__}.{type(accelerator).__name__}",
        "anyaccel_imported": "anyaccel" in sys.modules,
        "visible_devices": {env: os.environ.get(env) for env in accelerator.visible_devices_envs()},
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(facts))
    deepspeed.comm.barrier()
    from anyaccel.testing.processes import end_rank

    end_rank()  # no gloo exit race (see ds_train.py)


if __name__ == "__main__":
    main(sys.argv[-1])
