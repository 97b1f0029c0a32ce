"""The softmax op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

Along one dimension, in fp32 with the running-maximum form (Milakov & Gimelshein, "Online normalizer
calculation for softmax", 2018, for rows walked in tiles), as ``torch.softmax`` / ``torch.log_softmax``::

    y = exp(x - max(x)) / sum(exp(x - max(x)))           log: y = x - max(x) - log(sum(exp(x - max(x))))

Backward from the output (as aten's ``_softmax_backward_data``)::

    softmax: dx = y * (dy - sum(dy * y))          log_softmax: dx = dy - exp(y) * sum(dy)

The result has x's dtype and is contiguous. The Triton kernels reduce any dimension in place: the last one row
by row, another one along the strided middle axis of ``[outer, N, inner]`` (no copy for the usual layouts).
"""

from anyaccel.ops.nn.families.standard import standard_implementations
from anyaccel.spec import Function, OpSpec

_FAKES = "anyaccel.ops.nn.families.softmax.fakes"

SPEC = OpSpec(
    family="softmax",
    summary="softmax and log-softmax along a dimension, forward and backward (Triton, portable torch)",
    functions=(
        Function("softmax", "(Tensor x, int dim) -> Tensor", fake=f"{_FAKES}:softmax", doc="softmax along dim"),
        Function("log_softmax", "(Tensor x, int dim) -> Tensor", fake=f"{_FAKES}:log_softmax",
                 doc="log-softmax along dim"),
        Function("softmax_backward", "(Tensor grad_y, Tensor y, int dim) -> Tensor",
                 fake=f"{_FAKES}:softmax_backward", doc="grad of x from softmax's output y"),
        Function("log_softmax_backward", "(Tensor grad_y, Tensor y, int dim) -> Tensor",
                 fake=f"{_FAKES}:log_softmax_backward", doc="grad of x from log_softmax's output y"),
    ),
    implementations=standard_implementations("softmax"),
    benchmarks=("benchmarks/nn_ops.py",),
)
