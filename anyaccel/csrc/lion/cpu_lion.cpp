// CPU Lion step as a torch op, on torch's stable ABI.
//
// The schema, the scalar ranges and the accepted dtypes are the op spec's (anyaccel/ops/lion/spec.py),
// compiled in through the generated anyaccel_op.h. This file is the registration unit (constants,
// validation, threading); the math is the kernel unit, cpu_lion_kernel.cpp.
//
// Algorithm: Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023, Algorithm 2), in the
// order of anyaccel's CUDA FusedLion, per element in fp32:
//
//   c = beta1 * m + (1 - beta1) * g
//   p = p * (1 - lr * weight_decay) - lr * sign(c)     sign as torch.sign: +-1, 0 for +-0, NaN for NaN
//   m = beta2 * m + (1 - beta2) * g
//
// A NaN gradient therefore makes the parameter and the moment NaN (it is not skipped), as torch's
// reference Lion implementations do. With model_copies, params are fp32 masters and the result is also
// stored, rounded to nearest even, into the 16-bit copy. One pass reads p, g, m and writes p, m.
#include "../includes/host_optimizer.h"
#include "cpu_lion.h"

#include <cstdint>

namespace anyaccel {
namespace lion {
namespace {

constexpr std::array<const char*, 1> kStateNames = {"exp_avgs"};

void lion_step_cpu(const stable::TensorList& params, const stable::TensorList& grads,
                   const stable::TensorList& exp_avgs, const stable::TensorList& model_copies, double lr,
                   double beta1, double beta2, double weight_decay) {
  LionConsts c{};
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.neg_lr = static_cast<float>(-lr);
  c.decay = static_cast<float>(1.0 - lr * weight_decay);
  host::run_step<LionConsts, 1>("lion_step", params, grads, {&exp_avgs}, kStateNames, model_copies, "FusedLion",
                                segments(), c);
}

}  // namespace
}  // namespace lion
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_HOST_KERNEL(lion_step, anyaccel::lion::lion_step_cpu)
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) { ANYACCEL_IMPL(m, isa, anyaccel::host::isa); }
