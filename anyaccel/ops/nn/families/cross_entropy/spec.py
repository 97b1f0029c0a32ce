"""The cross-entropy op family, described once (see [`anyaccel.spec`][anyaccel.spec]).

Per row of logits ``z`` (``V`` classes) with target ``t`` and label smoothing ``e``, in fp32 as
``torch.nn.functional.cross_entropy`` (Szegedy et al. 2016 for label smoothing)::

    lse  = log(sum(exp(z)))                               (online max/sum over tiles of the row)
    loss = (1 - e) * (lse - z[t]) + e * (lse - mean(z))   0 for rows whose target is ignore_index
    dz   = (softmax(z) - (1 - e) * onehot(t) - e / V) * dloss

``fused_linear_cross_entropy`` computes the loss of ``hidden @ weight.T (+ bias)`` without materialising
the ``rows x V`` logits: it walks the rows in chunks (a chunk's logits about as large as ``hidden``),
computes each chunk's loss and ``dz`` in place of its logits, and accumulates the input and weight
gradients (the weight's in ``accum_dtype``: fp32, or the weight's own dtype as Liger-Kernel does) in the
same pass, so the backward only scales them by the incoming gradient (Liger-Kernel's
FusedLinearCrossEntropy; Wijmans et al., "Cut Your Losses in Large-Vocabulary Language Models", 2024).
Its reduction is ``"mean"`` (over non-ignored rows) or ``"sum"``.

``nll_loss`` is aten's ``nll_loss_forward`` and ``nll_loss2d_forward`` (what
``torch.nn.functional.cross_entropy`` runs after ``log_softmax``; logp ``[N, C, d...]`` with the classes in
dimension 1, or ``[C]``; row i is one position ``(n, d...)``) with the sum accumulated in fp32 whatever logp's
dtype, rounded once to it::

    loss_i = -w[t_i] * logp[i, t_i]     (0 where t_i == ignore_index; w = 1 without class weights)
    none: loss_i      sum: sum_i loss_i      mean: sum_i loss_i / sum_i w[t_i]        total_weight = sum_i w[t_i]
    dlogp[i, t_i] = -w[t_i] * g_i  (none) | -w[t_i] * g (sum) | -w[t_i] * g / total_weight (mean), 0 elsewhere

aten's CPU kernel sums 16-bit losses in their own dtype, so a float16 mean over a few thousand rows of loss
10 overflows to ``inf`` there, where this gives the finite mean.
"""

from anyaccel.ops.nn.families.standard import standard_implementations
from anyaccel.spec import Function, OpSpec

_FAKES = "anyaccel.ops.nn.families.cross_entropy.fakes"

SPEC = OpSpec(
    family="cross_entropy",
    summary="cross-entropy over large vocabularies and fused linear + cross-entropy (Triton, portable torch)",
    functions=(
        Function("cross_entropy", "(Tensor logits, Tensor target, int ignore_index, float label_smoothing) -> "
                 "(Tensor, Tensor)", fake=f"{_FAKES}:cross_entropy",
                 doc="per-row loss and log-sum-exp (fp32, [rows]) of logits [rows, V]"),
        Function("cross_entropy_backward",
                 "(Tensor grad_loss, Tensor logits, Tensor target, Tensor lse, int ignore_index, "
                 "float label_smoothing) -> Tensor", fake=f"{_FAKES}:cross_entropy_backward",
                 doc="grad of the logits from the per-row loss gradient"),
        Function("fused_linear_cross_entropy",
                 "(Tensor hidden, Tensor weight, Tensor target, Tensor? bias, int ignore_index, "
                 "float label_smoothing, str reduction, bool compute_grad, ScalarType accum_dtype) -> "
                 "(Tensor, Tensor, Tensor, Tensor)",
                 fake=f"{_FAKES}:fused_linear_cross_entropy",
                 doc="loss of hidden @ weight.T (+ bias) and the grads of hidden, weight, bias, chunked"),
        Function("nll_loss", "(Tensor logp, Tensor target, Tensor? weight, int reduction, int ignore_index) -> "
                 "(Tensor, Tensor)", fake=f"{_FAKES}:nll_loss",
                 doc="aten's nll_loss_forward (loss, total weight) with fp32 accumulation"),
        Function("nll_loss_backward",
                 "(Tensor grad_output, Tensor logp, Tensor target, Tensor? weight, int reduction, int ignore_index, "
                 "Tensor total_weight) -> Tensor", fake=f"{_FAKES}:nll_loss_backward",
                 doc="aten's nll_loss_backward: the gradient of logp"),
    ),
    implementations=standard_implementations("cross_entropy"),
    benchmarks=("benchmarks/nn_ops.py",),
)

#: Reductions of the fused linear cross-entropy.
FUSED_REDUCTIONS = ("mean", "sum")
#: Reductions of ``nll_loss`` (aten's enum: none, mean, sum).
NLL_REDUCTIONS = (0, 1, 2)
