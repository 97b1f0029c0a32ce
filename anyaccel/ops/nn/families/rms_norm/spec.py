"""The RMSNorm op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

RMSNorm: Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019. Over the last dimension
(``N`` elements), in fp32::

    rstd = 1 / sqrt(mean(x**2) + eps)
    y    = (x * rstd) * weight                      casting="torch": torch.nn.functional.rms_norm
    y    = round(x * rstd, x.dtype) * weight        casting="llama": Hugging Face LlamaRMSNorm

``casting="torch"`` rounds once and returns ``x.dtype`` (torch's ``rms_norm``); ``"llama"`` rounds the
normalised value to ``x.dtype`` before the weight and returns ``promote(x.dtype, weight.dtype)``, as
``LlamaRMSNorm`` does (Liger-Kernel's ``casting_mode="llama"``). ``fused_add_rms_norm`` first forms
``h = round(x + residual, x.dtype)`` (returned: the next layer's residual) and normalises ``h``, in one pass
(vLLM/FlagGems's fused_add_rms_norm, here functional rather than in place so autograd sees it).

The backward, with ``n = x * rstd`` and ``dn = dy * weight``::

    dx = rstd * (dn - n * mean(dn * n)) (+ grad of h, for the fused add)
    dweight = sum over rows of dy * n     (n rounded as in the forward for casting="llama")
"""

from anyaccel.ops.nn.families.standard import standard_implementations
from anyaccel.spec import Function, OpSpec

SPEC = OpSpec(
    family="rms_norm",
    summary="RMSNorm and fused residual add + RMSNorm, forward and backward (Triton, portable torch)",
    functions=(
        Function("rms_norm", "(Tensor x, Tensor? weight, float eps, str casting) -> (Tensor, Tensor)",
                 fake="anyaccel.ops.nn.families.rms_norm.fakes:rms_norm",
                 doc="y and rstd (fp32, x.shape[:-1]) of RMSNorm over the last dimension"),
        Function("fused_add_rms_norm",
                 "(Tensor x, Tensor residual, Tensor? weight, float eps, str casting) -> (Tensor, Tensor, Tensor)",
                 fake="anyaccel.ops.nn.families.rms_norm.fakes:fused_add_rms_norm",
                 doc="y, h = x + residual and rstd of RMSNorm(h), in one pass"),
        Function("rms_norm_backward",
                 "(Tensor grad_y, Tensor x, Tensor? weight, Tensor rstd, Tensor? grad_residual, str casting, "
                 "bool weight_grad) -> (Tensor, Tensor)",
                 fake="anyaccel.ops.nn.families.rms_norm.fakes:rms_norm_backward",
                 doc="grad of x (plus grad_residual) and of weight (empty unless weight_grad)"),
    ),
    implementations=standard_implementations("rms_norm"),
    benchmarks=("benchmarks/nn_ops.py",),
)

#: Accepted values of ``casting``.
CASTINGS = ("torch", "llama")
