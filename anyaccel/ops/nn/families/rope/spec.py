"""The rotary-embedding op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

RoPE: Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021. Each pair
``(x1, x2)`` of the last dimension (``D`` even) is rotated by the angle whose cosine and sine are given,
in fp32::

    out1 = x1 * cos - x2 * sin,   out2 = x2 * cos + x1 * sin

Pairs: ``(x[j], x[j + D/2])`` in the Hugging Face / Llama layout (``rotate_half``), ``(x[2j], x[2j+1])`` in
the interleaved (GPT-J, original RoFormer) layout. ``cos`` and ``sin`` hold one value per pair
(``[..., D/2]``) and broadcast against ``x.shape[:-1]``. The rotation is orthogonal, so the backward is
the rotation by the opposite angle (``rope_backward``: ``sin`` negated). No gradient flows into ``cos``
and ``sin`` (they are position tables, as in Liger-Kernel's rope).

``rope_qk`` rotates the queries and keys of one attention layer (Hugging Face's ``apply_rotary_pos_emb(q, k,
cos, sin)``) with one table, in one kernel launch where the implementation allows: a model's attention
pays one op's host cost for both, as in Liger-Kernel's ``liger_rope(q, k, cos, sin)``. ``q`` and ``k`` may
differ in every leading dimension the table broadcasts over (grouped-query attention: fewer key heads).
"""

from anyaccel.ops.nn.families.standard import standard_implementations
from anyaccel.spec import Function, OpSpec

_FAKES = "anyaccel.ops.nn.families.rope.fakes"

SPEC = OpSpec(
    family="rope",
    summary="rotary position embedding, half-split and interleaved layouts (Triton, portable torch)",
    functions=(
        Function("rope", "(Tensor x, Tensor cos, Tensor sin, bool interleaved) -> Tensor", fake=f"{_FAKES}:rope",
                 doc="x with each pair rotated; x's shape, dtype and layout"),
        Function("rope_backward", "(Tensor grad_y, Tensor cos, Tensor sin, bool interleaved) -> Tensor",
                 fake=f"{_FAKES}:rope_backward", doc="grad of x: grad_y rotated back"),
        Function("rope_qk", "(Tensor q, Tensor k, Tensor cos, Tensor sin, bool interleaved) -> (Tensor, Tensor)",
                 fake=f"{_FAKES}:rope_qk", doc="q and k rotated by one table; each keeps its shape, dtype and layout"),
        Function("rope_qk_backward",
                 "(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin, bool interleaved) -> (Tensor, Tensor)",
                 fake=f"{_FAKES}:rope_qk_backward", doc="grads of q and k: both rotated back"),
    ),
    implementations=standard_implementations("rope"),
    benchmarks=("benchmarks/nn_ops.py",),
)
