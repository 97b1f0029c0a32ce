// Fused multi-tensor Adam / AdamW step on CUDA (op spec anyaccel/ops/adam/spec.py, build "fused_adam"), on
// torch's stable ABI.
//
// Math per element, in fp32 (matches torch.optim.Adam / AdamW, torch/optim/adam.py, and DeepSpeed's
// FusedAdam, deepspeed/ops/adam/fused_adam.py; Adam: Kingma & Ba 2015; AdamW: Loshchilov & Hutter 2019):
//   adamw_mode:  p <- p * (1 - lr * weight_decay)        else:  g <- g + weight_decay * p
//   m <- beta1 * m + (1 - beta1) * g
//   v <- beta2 * v + (1 - beta2) * g^2
//   p <- p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)   with bc_i = 1 - beta_i^step (1 without
//                                                           bias correction)
// With model_copies, p is an fp32 master weight and the updated value is also written, rounded to
// nearest even, into the bf16/fp16 model copy in the same pass. The schema, scalar ranges and dtype
// combinations come from the spec through the generated anyaccel_op.h.
#include <cmath>

#include "cuda/multi_tensor_apply.cuh"

namespace anyaccel {
namespace {

struct AdamOp {
  float beta1, beta2, eps, weight_decay;
  float omb1, omb2;   // 1 - beta1, 1 - beta2, computed in double on the host (1 - 0.999f loses 1e-5)
  float decay;        // 1 - lr * weight_decay (AdamW)
  float step_size;    // lr / bc1
  float inv_bc2_sqrt; // 1 / sqrt(bc2)
  bool adamw;

  __device__ __forceinline__ void operator()(float& p, float g, float* s) const {
    if (adamw) {
      p *= decay;
    } else {
      g = fmaf(weight_decay, p, g);
    }
    float m = fmaf(beta1, s[0], omb1 * g);
    float v = fmaf(beta2, s[1], omb2 * g * g);
    const float denom = sqrtf(v) * inv_bc2_sqrt + eps;
    p -= step_size * (m / denom);
    s[0] = m;
    s[1] = v;
  }
};

void adam_step_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                    const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                    const stable::TensorList& model_copies, int64_t step, double lr, double beta1, double beta2,
                    double eps, double weight_decay, bool bias_correction, bool adamw_mode) {
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  AdamOp op;
  op.beta1 = static_cast<float>(beta1);
  op.beta2 = static_cast<float>(beta2);
  op.eps = static_cast<float>(eps);
  op.omb1 = static_cast<float>(1.0 - beta1);
  op.omb2 = static_cast<float>(1.0 - beta2);
  op.weight_decay = static_cast<float>(weight_decay);
  op.decay = static_cast<float>(1.0 - lr * weight_decay);
  op.step_size = static_cast<float>(lr / bc1);
  op.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  op.adamw = adamw_mode;
  mta::run_step<2>("adam_step", params, grads, {&exp_avgs, &exp_avg_sqs}, {"exp_avgs", "exp_avg_sqs"},
                   model_copies, op);
}

}  // namespace
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_LIBRARY_IMPL(CUDA, m) { ANYACCEL_IMPL(m, adam_step, anyaccel::adam_step_cuda); }
