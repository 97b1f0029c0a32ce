"""DeepSpeed's ``async_io`` module ABI over anyaccel's ``aio`` ops: the ``aio_handle`` factory.

DeepSpeed's callers (``deepspeed/runtime/swap_tensor/*.py``, ``deepspeed/io/*.py``) use only ``aio_handle``;
the handle's API is [`anyaccel.ops.aio.handle.AsyncIOHandle`][anyaccel.ops.aio.handle.AsyncIOHandle], whose module
wrapper is the adapter.
"""

from __future__ import annotations

from anyaccel.integrations.deepspeed.abi.declaration import DeepSpeedABI

#: The functions DeepSpeed's callers use on modules of the aio build.
ABI = DeepSpeedABI(family="aio", adapter="anyaccel.ops.aio.handle:AsyncIOModule",
                   builders=(("AsyncIOBuilder", ("aio_handle",)),))
