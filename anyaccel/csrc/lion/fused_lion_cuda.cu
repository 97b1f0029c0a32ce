// Fused multi-tensor Lion step on CUDA (builder FusedLionBuilder, NAME "fused_lion").
//
// Math per element, in fp32 (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms",
// Algorithm 2; same update as DeepSpeed's FusedLion, deepspeed/ops/lion/fused_lion.py):
//   p <- p * (1 - lr * weight_decay)
//   c <- beta1 * m + (1 - beta1) * g
//   p <- p - lr * sign(c)                      (sign(0) = 0)
//   m <- beta2 * m + (1 - beta2) * g
// With model_copies, p is an fp32 master weight and the updated value is also written into the
// bf16/fp16 model copy in the same pass.
//
// Registered as torch op  <ANYACCEL_OP_NAMESPACE>::lion_step  with a CUDA kernel (docs/architecture.md).
#include <torch/library.h>

#include "cuda/multi_tensor_apply.cuh"

#ifndef ANYACCEL_OP_NAMESPACE
#define ANYACCEL_OP_NAMESPACE anyaccel_fused_lion_dev
#endif

namespace anyaccel {
namespace {

struct LionOp {
  float beta1, beta2, lr, decay;  // decay = 1 - lr * weight_decay
  float omb1, omb2;               // 1 - beta1, 1 - beta2, computed in double on the host

  __device__ __forceinline__ void operator()(float& p, float g, float* s) const {
    const float c = fmaf(beta1, s[0], omb1 * g);
    const float sgn = static_cast<float>((c > 0.f) - (c < 0.f));
    p = fmaf(p, decay, -lr * sgn);
    s[0] = fmaf(beta2, s[0], omb2 * g);
  }
};

const mta::Variant<LionOp> kVariants[] = {ANYACCEL_MTA_VARIANTS(LionOp, 1)};

void lion_step_cuda(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                    at::TensorList model_copies, double lr, double beta1, double beta2, double weight_decay) {
  if (!(lr >= 0.0)) mta::value_error(std::string("lion_step: lr must be >= 0, got ") + std::to_string(lr));
  if (!(beta1 >= 0.0 && beta1 <= 1.0)) mta::value_error(std::string("lion_step: beta1 must be in [0, 1], got ") + std::to_string(beta1));
  if (!(beta2 >= 0.0 && beta2 <= 1.0)) mta::value_error(std::string("lion_step: beta2 must be in [0, 1], got ") + std::to_string(beta2));
  if (!(weight_decay >= 0.0)) mta::value_error(std::string("lion_step: weight_decay must be >= 0, got ") + std::to_string(weight_decay));
  LionOp op{static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(lr),
            static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(1.0 - beta1),
            static_cast<float>(1.0 - beta2)};
  mta::TensorLists lists{params, grads, {exp_avgs}, model_copies, "lion_step"};
  mta::dispatch(kVariants, lists, op);
}

}  // namespace
}  // namespace anyaccel

TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE, m) {
  m.def(
      "lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] model_copies, "
      "float lr, float beta1, float beta2, float weight_decay) -> ()");
}

TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, CUDA, m) { m.impl("lion_step", &anyaccel::lion_step_cuda); }
