"""Subprocess probe: wire anyaccel into DeepSpeed one way, then print what DeepSpeed sees as one JSON line.

    python tests/integrations/ds_probe.py {before|after|hook|none} [--twice] [--switch] [--uninstall]

before: ``install()`` then ``import deepspeed``; after: the reverse; hook: only the environment (startup hook);
none: DeepSpeed alone. ``--twice`` calls ``install()`` again, ``--switch`` chooses another anyaccel accelerator
and calls ``install()`` again, ``--uninstall`` undoes it at the end.
"""

from __future__ import annotations

import json
import sys


def _name(obj: object) -> str:
    return "None" if obj is None else f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', obj)}"


def main(argv: list[str]) -> None:
    mode, flags = argv[0], set(argv[1:])
    facts: dict = {"mode": mode}
    if mode == "before":
        import anyaccel.integrations.deepspeed as integration

        facts["install_returned"] = repr(integration.install())
    import deepspeed
    import deepspeed.ops.op_builder as op_builder
    from deepspeed.accelerator import get_accelerator
    from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator as DeepSpeedABC
    from deepspeed.accelerator.real_accelerator import _validate_accelerator

    if mode == "after":
        import anyaccel.integrations.deepspeed as integration

        facts["install_returned_is_current"] = integration.install() is get_accelerator()
    facts["anyaccel_imported"] = "anyaccel" in sys.modules
    acc = get_accelerator()
    if "--twice" in flags:
        import anyaccel.integrations.deepspeed as integration

        facts["twice_same_object"] = integration.install() is acc and get_accelerator() is acc
    if "--switch" in flags:
        import anyaccel
        import anyaccel.integrations.deepspeed as integration
        from anyaccel.accelerator.cpu import CPU_Accelerator

        class SwitchedAccelerator(CPU_Accelerator):
            pass

        anyaccel.set_accelerator(SwitchedAccelerator())
        integration.install()
        acc = get_accelerator()
        facts["switched_class_mro"] = [c.__name__ for c in type(acc).__mro__[:3]]
        facts["switched_cpu_adam_binding_follows"] = deepspeed.ops.adam.cpu_adam.CPUAdamBuilder is \
            op_builder.CPUAdamBuilder
    _validate_accelerator(acc)  # raises AssertionError if DeepSpeed refuses it
    facts.update(
        accelerator_class=_name(type(acc)),
        accelerator_name=acc._name,
        deepspeed_abc=isinstance(acc, DeepSpeedABC),
        op_builder_dir=acc.op_builder_dir(),
        visible_devices_envs=acc.visible_devices_envs(),
        fp64=acc.is_fp64_supported(),
        builders={n: _name(getattr(op_builder, n)) for n in (
            "CPUAdamBuilder", "CPULionBuilder", "CPUAdagradBuilder", "FusedAdamBuilder", "FusedLionBuilder",
            "FusedLambBuilder", "AsyncIOBuilder", "NotImplementedBuilder", "ShareMemCommBuilder", "PinMemoryBuilder",
            "TransformerBuilder")},
        cpu_adam_module_binding=_name(deepspeed.ops.adam.cpu_adam.CPUAdamBuilder),
        runtime_utils_bound_to_current=deepspeed.runtime.utils.torch_memory_reserved.__self__ is acc,
        compatible_ops=deepspeed.ops.__compatible_ops__,
    )
    from deepspeed.ops.op_builder.all_ops import ALL_OPS

    facts["all_ops"] = sorted(ALL_OPS)
    cpu_adam = op_builder.CPUAdamBuilder()
    facts["cpu_adam_name"] = [cpu_adam.name, op_builder.CPUAdamBuilder.NAME]
    placeholder = acc.create_op_builder("ShareMemCommBuilder")
    facts["placeholder_is_not_implemented"] = isinstance(placeholder, op_builder.NotImplementedBuilder)
    facts["placeholder_name"] = [placeholder.name, placeholder.is_compatible()]
    try:
        placeholder.load()
    except Exception as exc:  # the type and message are the facts
        facts["placeholder_load"] = [type(exc).__name__, isinstance(exc, ValueError), str(exc)]
    if facts["anyaccel_imported"]:
        import anyaccel
        from anyaccel.op_builder.errors import UnknownOpError

        facts["shares_state_with_anyaccel"] = anyaccel.get_accelerator().__dict__ is acc.__dict__
        try:
            anyaccel.get_accelerator().create_op_builder("ShareMemCommBuilder")
        except UnknownOpError as exc:
            facts["anyaccel_unknown_op"] = str(exc)
    if "--uninstall" in flags:
        import anyaccel.integrations.deepspeed as integration

        integration.uninstall()
        after = get_accelerator()
        facts["after_uninstall"] = {
            "accelerator_class": _name(type(after)),
            "cpu_adam": _name(op_builder.CPUAdamBuilder),
            "cpu_adam_module_binding": _name(deepspeed.ops.adam.cpu_adam.CPUAdamBuilder),
            "all_ops": sorted(ALL_OPS),
            "is_wired": integration.is_wired(),
        }
    print(json.dumps(facts))


if __name__ == "__main__":
    main(sys.argv[1:])
