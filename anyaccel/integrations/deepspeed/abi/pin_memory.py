"""DeepSpeed's ``pin_memory`` module ABI over anyaccel's ``pin_memory`` ops: the ``pin_handle`` factory.

DeepSpeed's only caller (``deepspeed/utils/pin_memory.py``, ``NativePinnedMemory``) uses ``pin_handle()``; the
handle's API is [`anyaccel.ops.pin_memory.handle.PinHandle`][anyaccel.ops.pin_memory.handle.PinHandle], whose module
wrapper is the adapter.
"""

from __future__ import annotations

from anyaccel.integrations.deepspeed.abi.declaration import DeepSpeedABI

#: The functions DeepSpeed's callers use on modules of the pin_memory build.
ABI = DeepSpeedABI(family="pin_memory", adapter="anyaccel.ops.pin_memory.handle:PinMemoryModule",
                   builders=(("PinMemoryBuilder", ("pin_handle",)),))
