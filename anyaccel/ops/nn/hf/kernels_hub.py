"""anyaccel's layers for the Hugging Face ``kernels`` package: ``kernels.kernelize(model, mode=...)`` can
put anyaccel's ops into the layers transformers marks, with no Hub download.

``kernels``' mappings take, per layer name and device type, any *repository*: an object whose ``load()``
returns the layer class (its ``RepositoryProtocol``; ``LayerRepository`` downloads one from the Hub,
``LocalLayerRepository`` loads a built kernel directory). `AnyaccelRepository` is such an object whose
``load()`` returns one of the classes below, so no kernel directory is built or copied. ``kernelize`` checks
that a layer class is stateless (no ``__init__``, no members but ``can_torch_compile`` and ``has_backward``)
and that its ``forward`` takes the marked layer's parameters, then binds the class's ``forward`` to each
marked module. Each forward here looks up, per marked class, the equivalence probe's verdict
(`anyaccel.ops.nn.hf.equivalence`, run on first use outside ``torch.compile``, or beforehand by
`kernelize`) and runs the layer's own forward when anyaccel's op does not compute the same thing, so
a mapping keyed by the broad name ``"RMSNorm"`` never changes a layer's math.

``kernels`` stays optional: it is imported only by `kernel_mapping` and `kernelize`.
"""

from __future__ import annotations

from typing import Any

import torch

from anyaccel.ops.nn import functional as F
from anyaccel.ops.nn.hf import equivalence

#: the device types the mapping names (``kernels``' device names)
DEVICE_TYPES = ("cuda", "rocm", "xpu", "npu", "mps", "cpu")
_NORM_VERDICTS: dict[type, equivalence.NormRecipe | None] = {}
_SILU_VERDICTS: dict[type, bool] = {}
_ROPE_VERDICTS: dict[type, Any] = {}


def _compiling() -> bool:
    return bool(torch.compiler.is_compiling())


def norm_recipe(module: torch.nn.Module) -> equivalence.NormRecipe | None:
    """The probed RMSNorm recipe of ``module``'s class (probed now unless under ``torch.compile``: then
    None, the layer's own forward, until probed eagerly)."""
    cls = type(module)
    if cls not in _NORM_VERDICTS:
        if _compiling():
            return None
        _NORM_VERDICTS[cls] = equivalence.probe_rms_norm(module)[0]
    return _NORM_VERDICTS[cls]


class RMSNorm(torch.nn.Module):
    """anyaccel's RMSNorm for a layer marked ``"RMSNorm"``/``"RMSNormZeroCentered"``: the probed recipe's
    [`rms_norm`][anyaccel.ops.nn.functional.rms_norm], or the layer's own forward when none agrees."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``hidden_states`` ``[..., N]`` normalised with the marked layer's weight and epsilon."""
        recipe = norm_recipe(self)
        if recipe is None:
            return type(self).forward(self, hidden_states)
        return recipe(self, hidden_states, None)


class SiLU(torch.nn.Module):
    """anyaccel's [`silu`][anyaccel.ops.nn.functional.silu] for a layer marked ``"SiLU"`` (the layer's own
    forward when the probe disagrees)."""

    can_torch_compile = True
    has_backward = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 (transformers' parameter name)
        """``input * sigmoid(input)``."""
        cls = type(self)
        if cls not in _SILU_VERDICTS:
            if _compiling():
                return type(self).forward(self, input)
            _SILU_VERDICTS[cls] = not equivalence.probe_silu(self)
        if not _SILU_VERDICTS[cls]:
            return type(self).forward(self, input)
        return F.silu(input)


class RotaryPosEmb(torch.nn.Module):
    """anyaccel's [`rope_qk`][anyaccel.ops.nn.functional.rope_qk] for the function marked ``"rotary_pos_emb"``
    (Hugging Face's ``apply_rotary_pos_emb``, which ``kernels`` turns into a module), in the table layouts
    the probe accepts; the function's own forward for any other table (partial rotary)."""

    can_torch_compile = True
    has_backward = True

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """``q`` ``[B, H, S, D]`` and ``k`` ``[B, H_kv, S, D]`` rotated by ``cos``/``sin`` ``[B, S, D]``."""
        cls = type(self)
        own = cls.forward.__get__(self)
        if cls not in _ROPE_VERDICTS:
            if _compiling():
                return own(q, k, cos, sin, unsqueeze_dim)
            _ROPE_VERDICTS[cls] = equivalence.rope_function(own, None, equivalence.rope_layouts(own)[0])
        return _ROPE_VERDICTS[cls](q, k, cos, sin, unsqueeze_dim)


#: marked layer name -> anyaccel's layer class
LAYERS: dict[str, type[torch.nn.Module]] = {
    "RMSNorm": RMSNorm, "RMSNormZeroCentered": RMSNorm, "SiLU": SiLU, "rotary_pos_emb": RotaryPosEmb,
}


class AnyaccelRepository:
    """A ``kernels`` repository serving one of anyaccel's layers (``load()`` returns the class; nothing is
    downloaded or built).

    Args:
        layer_name: a key of `LAYERS`.

    Raises:
        KeyError: an unknown ``layer_name`` (the message lists the accepted ones).
    """

    def __init__(self, layer_name: str) -> None:
        if layer_name not in LAYERS:
            raise KeyError(f"AnyaccelRepository: layer_name={layer_name!r} is not one of anyaccel's layers; "
                           f"accepted: {', '.join(sorted(LAYERS))}")
        self.layer_name = layer_name

    def load(self) -> type[torch.nn.Module]:
        """The layer class."""
        return LAYERS[self.layer_name]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyaccelRepository) and other.layer_name == self.layer_name

    def __hash__(self) -> int:
        return hash(("anyaccel", self.layer_name))

    def __str__(self) -> str:
        return f"anyaccel layer `{self.layer_name}`"


def kernel_mapping(device_types: tuple[str, ...] = DEVICE_TYPES) -> dict[str, dict[str, Any]]:
    """A ``kernels`` mapping of every layer name anyaccel serves to `AnyaccelRepository`, for every
    mode (registered as ``kernels``' fallback mode: training, inference and ``torch.compile``).

    Args:
        device_types: the ``kernels`` device types to map (default: all of `DEVICE_TYPES`).

    Returns:
        ``{layer name: {device type: repository}}``, for ``kernels.use_kernel_mapping`` /
        ``kernels.register_kernel_mapping``.
    """
    return {name: {dev: AnyaccelRepository(name) for dev in device_types} for name in LAYERS}


def kernelize(model: torch.nn.Module, *, mode: Any = None, device: str | None = None) -> torch.nn.Module:
    """``kernels.kernelize(model, mode=mode, device=device)`` with anyaccel's mapping on top of the current
    one, after probing the marked classes eagerly (so a compiled model finds the verdicts).

    Args:
        model: a model whose layer classes carry ``kernel_layer_name`` (transformers with a ``kernels``
            version it accepts, or classes marked with ``kernels.use_kernel_forward_from_hub``).
        mode: a ``kernels.Mode`` (default: ``Mode.TRAINING | Mode.TORCH_COMPILE`` when ``model.training``,
            else ``Mode.INFERENCE | Mode.TORCH_COMPILE``).
        device: ``kernels``' device type (default: inferred from the parameters by ``kernels``).

    Returns:
        ``model``, with the marked modules' ``forward`` replaced (``kernels`` restores nothing: re-run
        ``kernels.kernelize`` with another mapping, or delete the instance ``forward`` attributes).

    Raises:
        ImportError: ``kernels`` is not installed.
    """
    import kernels

    if mode is None:
        mode = (kernels.Mode.TRAINING if model.training else kernels.Mode.INFERENCE) | kernels.Mode.TORCH_COMPILE
    for m in model.modules():
        layer = getattr(type(m), "kernel_layer_name", None)
        if layer in ("RMSNorm", "RMSNormZeroCentered"):
            norm_recipe(m)
    with kernels.use_kernel_mapping(kernel_mapping()):
        kernels.kernelize(model, mode=mode, device=device)
    return model
