// CPU Adagrad step as a torch op, on torch's stable ABI.
//
// The schema, the scalar ranges and the accepted dtypes are the op spec's (anyaccel/ops/adagrad/spec.py),
// compiled in through the generated anyaccel_op.h. This file is the registration unit (constants,
// validation, threading); the math is the kernel unit, cpu_adagrad_kernel.cpp.
//
// Algorithm: Adagrad (Duchi, Hazan & Singer, "Adaptive Subgradient Methods for Online Learning and
// Stochastic Optimization", JMLR 2011) with L2 weight decay added to the gradient, in the order of torch's
// torch.optim.Adagrad (torch/optim/adagrad.py, without lr_decay) and DeepSpeed's DeepSpeedCPUAdagrad
// (deepspeed/ops/csrc/includes/cpu_adagrad.h), per element in fp32:
//
//   g  = grad (+ weight_decay * p                 if weight_decay != 0)
//   v  = v + g * g                                (one fma)
//   p  = p - lr * g / (sqrt(v) + eps)             (one fma after the division)
//
// With model_copies, params are fp32 masters and the result is also stored, rounded to nearest even, into the
// 16-bit copy. One pass reads p, g, v and writes p, v (and the copy). Unlike DeepSpeed's scalar tail, the
// gradient is never written.
#include "../includes/host_optimizer.h"
#include "cpu_adagrad.h"

#include <cstdint>

namespace anyaccel {
namespace adagrad {
namespace {

constexpr std::array<const char*, 1> kStateNames = {"exp_avg_sqs"};

void adagrad_step_cpu(const stable::TensorList& params, const stable::TensorList& grads,
                      const stable::TensorList& exp_avg_sqs, const stable::TensorList& model_copies, double lr,
                      double eps, double weight_decay) {
  AdagradConsts c{};
  c.lr = static_cast<float>(lr);
  c.eps = static_cast<float>(eps);
  c.weight_decay = static_cast<float>(weight_decay);
  c.l2 = weight_decay != 0.0;
  host::run_step<AdagradConsts, 1>("adagrad_step", params, grads, {&exp_avg_sqs}, kStateNames, model_copies,
                                   "torch.optim.Adagrad", segments(), c);
}

}  // namespace
}  // namespace adagrad
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_HOST_KERNEL(adagrad_step, anyaccel::adagrad::adagrad_step_cpu)
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) { ANYACCEL_IMPL(m, isa, anyaccel::host::isa); }
