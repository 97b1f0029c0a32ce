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
  float omb1, omb2;   // 1 - beta1, 1 - beta2, computed in double (1 - 0.999f loses 1e-5)
  float decay;        // 1 - lr * weight_decay (AdamW)
  float step_size;    // lr / bc1
  float inv_bc2_sqrt; // 1 / sqrt(bc2)
  bool adamw;
  // Capturable steps: the learning rate and the 1-based step count are read from device memory (float32
  // scalars) and the constants above derived in prepare(), so a captured CUDA graph replays with the
  // values of the moment; nullptr otherwise (the host derived them).
  const float* lr_ptr;
  const float* step_ptr;
  double beta1_d, beta2_d;
  bool bias_correction;

  __device__ __forceinline__ void prepare() {
    if (lr_ptr == nullptr) return;
    const double lr = *lr_ptr, step = *step_ptr;
    const double bc1 = bias_correction ? 1.0 - pow(beta1_d, step) : 1.0;
    const double bc2 = bias_correction ? 1.0 - pow(beta2_d, step) : 1.0;
    decay = static_cast<float>(1.0 - lr * weight_decay);
    step_size = static_cast<float>(lr / bc1);
    inv_bc2_sqrt = static_cast<float>(1.0 / sqrt(bc2));
  }

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

AdamOp make_op(double lr, int64_t step, double beta1, double beta2, double eps, double weight_decay,
               bool bias_correction, bool adamw_mode) {
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  AdamOp op{};
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
  op.lr_ptr = nullptr;
  op.step_ptr = nullptr;
  op.beta1_d = beta1;
  op.beta2_d = beta2;
  op.bias_correction = bias_correction;
  return op;
}

void adam_step_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                    const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                    const stable::TensorList& model_copies, int64_t step, double lr, double beta1, double beta2,
                    double eps, double weight_decay, bool bias_correction, bool adamw_mode) {
  mta::run_step<2>("adam_step", params, grads, {&exp_avgs, &exp_avg_sqs}, {"exp_avgs", "exp_avg_sqs"},
                   model_copies, make_op(lr, step, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode));
}

stable::Tensor adam_plan_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                              const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                              const stable::TensorList& model_copies) {
  return mta::make_plan<2>("adam_plan", params, grads, {&exp_avgs, &exp_avg_sqs}, {"exp_avgs", "exp_avg_sqs"},
                           model_copies);
}

void adam_step_planned_cuda(const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks, int64_t step,
                            double lr, double beta1, double beta2, double eps, double weight_decay,
                            bool bias_correction, bool adamw_mode) {
  mta::run_planned<2>("adam_step_planned", plan, combo, count, chunks,
                      make_op(lr, step, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode));
}

void adam_step_planned_capturable_cuda(const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks,
                                       const stable::Tensor& step, const stable::Tensor& lr, double beta1,
                                       double beta2, double eps, double weight_decay, bool bias_correction,
                                       bool adamw_mode) {
  checks::check_device_scalar("adam_step_planned_capturable", "step", step, plan);
  checks::check_device_scalar("adam_step_planned_capturable", "lr", lr, plan);
  AdamOp op = make_op(0.0, 1, beta1, beta2, eps, weight_decay, bias_correction, adamw_mode);
  op.lr_ptr = static_cast<const float*>(lr.const_data_ptr());
  op.step_ptr = static_cast<const float*>(step.const_data_ptr());
  mta::run_planned<2>("adam_step_planned_capturable", plan, combo, count, chunks, op);
}

}  // namespace
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_LIBRARY_IMPL(CUDA, m) {
  ANYACCEL_IMPL(m, adam_step, anyaccel::adam_step_cuda);
  ANYACCEL_IMPL(m, adam_plan, anyaccel::adam_plan_cuda);
  ANYACCEL_IMPL(m, adam_step_planned, anyaccel::adam_step_planned_cuda);
  ANYACCEL_IMPL(m, adam_step_planned_capturable, anyaccel::adam_step_planned_capturable_cuda);
}
