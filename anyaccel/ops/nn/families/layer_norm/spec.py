"""The LayerNorm op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

LayerNorm: Ba, Kiros & Hinton, "Layer Normalization", 2016. Over the last dimension (``N`` elements; the
front end flattens a multi-dimensional ``normalized_shape`` into it), in fp32, as
``torch.nn.functional.layer_norm``::

    mean = mean(x);  rstd = 1 / sqrt(mean((x - mean)**2) + eps)      (biased variance, two passes)
    y    = (x - mean) * rstd * weight + bias                          (result in x's dtype)

Backward, with ``n = (x - mean) * rstd`` and ``dn = dy * weight``::

    dx = rstd * (dn - mean(dn) - n * mean(dn * n));  dweight = sum_rows dy * n;  dbias = sum_rows dy
"""

from anyaccel.ops.nn.families.standard import standard_implementations
from anyaccel.spec import Function, OpSpec

SPEC = OpSpec(
    family="layer_norm",
    summary="LayerNorm over the last dimension, forward and backward (Triton, portable torch)",
    functions=(
        Function("layer_norm", "(Tensor x, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
                 fake="anyaccel.ops.nn.families.layer_norm.fakes:layer_norm",
                 doc="y, mean and rstd (fp32, x.shape[:-1])"),
        Function("layer_norm_backward",
                 "(Tensor grad_y, Tensor x, Tensor? weight, Tensor mean, Tensor rstd, bool weight_grad, "
                 "bool bias_grad) -> (Tensor, Tensor, Tensor)",
                 fake="anyaccel.ops.nn.families.layer_norm.fakes:layer_norm_backward",
                 doc="grads of x, weight and bias (weight/bias grads empty unless asked for)"),
    ),
    implementations=standard_implementations("layer_norm"),
    benchmarks=("benchmarks/nn_ops.py",),
)
