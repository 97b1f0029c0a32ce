// CPU Adam / AdamW step as a torch op, on torch's stable ABI.
//
// The schema, the scalar ranges and the accepted dtypes are the op spec's (anyaccel/ops/adam/spec.py),
// compiled in through the generated anyaccel_op.h. This file is the registration unit (constants,
// validation, threading); the math is the kernel unit, cpu_adam_kernel.cpp.
//
// Algorithm: Adam (Kingma & Ba, ICLR 2015) with L2 weight decay added to the gradient (adamw_mode=false,
// as torch.optim.Adam), or with decoupled weight decay (Loshchilov & Hutter, ICLR 2019; adamw_mode=true,
// as torch.optim.AdamW). The order of operations follows torch's CPU implementations (torch/optim/adam.py,
// aten/src/ATen/native/cpu/FusedAdamKernel.cpp):
//
//   g  = grad (+ weight_decay * p                 if !adamw_mode and weight_decay != 0)
//   p  = p * (1 - lr * weight_decay)              if adamw_mode
//   m  = lerp(m, g, 1 - beta1)                    torch.lerp: m + w (g - m) for w < 0.5, g - (g - m)(1 - w)
//                                                 otherwise, so beta1 <= 0.5 keeps a tiny g beside a huge m
//   v  = beta2 * v + (1 - beta2) * g * g
//   p  = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)   (computed as sqrt(v) * (1 / sqrt(bc2)) + eps)
//
// with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step when bias_correction, else 1. With model_copies, params
// are fp32 masters and the result is also stored, rounded to nearest even, into the 16-bit copy.
//
// Storage and rounding: everything is computed in fp32 registers and rounded once on store (bf16: round to
// nearest even; fp16: F16C / FCVT, round to nearest even). One pass reads p, g, m, v and writes p, m, v (and
// the copy), so the step is memory-bandwidth bound: 28 bytes per element for fp32, 22 for 16-bit params
// with fp32 state, 14 for 16-bit params and state.
//
// adam_rollback_step undoes one adam_step, given the step's gradients and arguments (DeepSpeed's
// adam_rollback, deepspeed/ops/csrc/adam/cpu_adam_impl.cpp, which ZeRO-3's sub-group rollback calls): with
// u = lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps) computed from the stored m, v exactly as the step did,
//
//   p  = (p + u) / (1 - lr * weight_decay)        adamw_mode (the divisor is exactly 1 otherwise)
//   g  = grad (+ weight_decay * p                 if !adamw_mode and weight_decay != 0, with the restored p)
//   m  = (m - (1 - beta1) * g) / beta1
//   v  = max((v - (1 - beta2) * g * g) / beta2, 0)
//   p  = 0 where the restored p is not finite     (DeepSpeed's guard against a vanishing divisor)
//
// DeepSpeed's kernel is this for adamw_mode with bias correction (its only use); it applies the AdamW form
// and the bias correction whatever the arguments say, so this one is the exact inverse in every mode. The
// max(., 0) removes a rounding error below zero that would make the next step's sqrt(v) NaN (DeepSpeed
// keeps it). The result equals the state before the step within fp32 rounding (a few ulps), not bit for bit.
#include "../includes/host_optimizer.h"
#include "cpu_adam.h"

#include <cmath>
#include <cstdint>

namespace anyaccel {
namespace adam {
namespace {

constexpr std::array<const char*, 2> kStateNames = {"exp_avgs", "exp_avg_sqs"};

void adam_step_cpu(const stable::TensorList& params, const stable::TensorList& grads,
                   const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                   const stable::TensorList& model_copies, int64_t step, double lr, double beta1, double beta2,
                   double eps, double weight_decay, bool bias_correction, bool adamw_mode) {
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  AdamConsts c{};
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.lerp_from_grad = (1.0 - beta1) >= 0.5;
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.weight_decay = static_cast<float>(weight_decay);
  c.decay = adamw_mode ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  c.l2 = !adamw_mode && weight_decay != 0.0;
  host::run_step<AdamConsts, 2>("adam_step", params, grads, {&exp_avgs, &exp_avg_sqs}, kStateNames, model_copies,
                                "FusedAdam", segments(), c);
}

void adam_rollback_cpu(const stable::TensorList& params, const stable::TensorList& grads,
                       const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                       const stable::TensorList& model_copies, int64_t step, double lr, double beta1, double beta2,
                       double eps, double weight_decay, bool bias_correction, bool adamw_mode) {
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  RollbackConsts c{};
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.weight_decay = static_cast<float>(weight_decay);
  c.decay = adamw_mode ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  c.l2 = !adamw_mode && weight_decay != 0.0;
  host::run_step<RollbackConsts, 2>("adam_rollback_step", params, grads, {&exp_avgs, &exp_avg_sqs}, kStateNames,
                                    model_copies, "FusedAdam", rollback_segments(), c);
}

}  // namespace
}  // namespace adam
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_HOST_KERNEL(adam_step, anyaccel::adam::adam_step_cpu)
ANYACCEL_HOST_KERNEL(adam_rollback_step, anyaccel::adam::adam_rollback_cpu)
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) { ANYACCEL_IMPL(m, isa, anyaccel::host::isa); }
