"""Typed errors survive pickling (multiprocessing pools send them between processes; DeepSpeed's
``DistributedTest`` hangs until its timeout when an exception cannot be unpickled)."""

from __future__ import annotations

import pickle

import pytest

from anyaccel.accelerator import errors
from anyaccel.integrations.deepspeed import errors as ds_errors

SAMPLES = [
    errors.UnknownAcceleratorError("tpu", ["cpu", "cuda"], "ANYACCEL_ACCELERATOR"),
    errors.AcceleratorUnavailableError("cuda", "no GPU", "ANYACCEL_STRICT=1", "fix it"),
    errors.UnsupportedOperationError("xpu", "memory_stats", "torch.xpu.memory_stats"),
    errors.InvalidAcceleratorError(object, "it is a class", "pass an instance"),
    errors.UnsupportedCompileBackendError("nope", ["inductor", "eager"]),
    errors.NotHostDeviceError("cuda:1"),
    errors.HostRegistrationError("cuda", "register", 0x1000, 700),
    ds_errors.DeepSpeedNotInstalledError(),
    ds_errors.UntestedDeepSpeedVersionError("0.20.0", ["0.19.8"], "ANYACCEL_DEEPSPEED_ALLOW_UNTESTED"),
    ds_errors.DeepSpeedBuilderNotImplementedError("AsyncIOBuilder", "cpu", ["CPUAdamBuilder"]),
    ds_errors.DeepSpeedABIMissingError("CPUAdamBuilder", "cpu_adam", ["create_adam"]),
]


@pytest.mark.parametrize("error", SAMPLES, ids=lambda e: type(e).__name__)
def test_typed_errors_round_trip_through_pickle(error):
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy).keys() == vars(error).keys()
