// CPU Adam / AdamW step as a torch op.
//
// Registers, in the namespace the builder passes as -DANYACCEL_OP_NAMESPACE=<ns> (docs/architecture.md):
//
//   adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs,
//             int step, float lr, float beta1, float beta2, float eps, float weight_decay,
//             bool bias_correction, bool adamw_mode) -> ()
//   isa() -> str
//
// Algorithm: Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015) with L2 weight
// decay added to the gradient (adamw_mode=false, as torch.optim.Adam), or with decoupled weight decay
// (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019; adamw_mode=true, as
// torch.optim.AdamW). The order of operations follows torch's single-tensor / fused CPU implementations
// (torch/optim/adam.py, aten/src/ATen/native/cpu/FusedAdamKernel.cpp):
//
//   g  = grad (+ weight_decay * p                 if !adamw_mode and weight_decay != 0)
//   p  = p * (1 - lr * weight_decay)              if adamw_mode
//   m  = lerp(m, g, 1 - beta1)
//   v  = beta2 * v + (1 - beta2) * g * g
//   p  = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)   (computed as sqrt(v) * (1 / sqrt(bc2)) + eps)
//
// with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step when bias_correction, else 1.
//
// Storage: params/grads in fp32, bf16 or fp16 (grads in the params' dtype); exp_avg/exp_avg_sq in fp32 or
// in the params' dtype. Everything is computed in fp32 registers and rounded once on store (bf16: round to
// nearest even; fp16: F16C / FCVT, round to nearest even). One pass reads p, g, m, v and writes p, m, v, so
// the step is memory-bandwidth bound: 28 bytes per element for fp32, 22 for 16-bit params + fp32 state,
// 14 for 16-bit params and state.
//
// Threading (one OpenMP region over the concatenation of all tensors, split into equal aligned ranges),
// validation, the dtype table and the registration glue are shared with the other host optimizers
// (../includes/host_optimizer.h); this file keeps the math, the schema and the registration.
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "../includes/host_optimizer.h"
#include "../includes/simd.h"

namespace anyaccel {
namespace adam {
namespace {

using simd::ScalarF;
using simd::VecF;

// Per-step constants, computed once in double precision and rounded to fp32.
struct AdamConsts {
  float beta1_complement;  // 1 - beta1, the lerp weight for exp_avg
  float beta2;
  float beta2_complement;  // 1 - beta2
  float eps;
  float step_size;         // lr / bc1
  float inv_bc2_sqrt;      // 1 / sqrt(bc2)
  float weight_decay;      // used by the L2 (adamw_mode=false) variant
  float decay;             // 1 - lr * weight_decay for adamw_mode, else exactly 1
};

// Updates elements [0, n) with lanes of type V and returns how many were done (a multiple of V::kWidth).
template <typename V, bool kL2, typename P, typename S>
inline int64_t adam_lanes(P* p, const P* g, S* m, S* v, int64_t n, const AdamConsts& c) {
  const V w1 = V::set1(c.beta1_complement);
  const V b2 = V::set1(c.beta2);
  const V w2 = V::set1(c.beta2_complement);
  const V eps = V::set1(c.eps);
  const V step_size = V::set1(c.step_size);
  const V inv_bc2_sqrt = V::set1(c.inv_bc2_sqrt);
  const V wd = V::set1(c.weight_decay);
  const V decay = V::set1(c.decay);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V grad = V::load(g + i);
    V param = V::load(p + i);
    V exp_avg = V::load(m + i);
    V exp_avg_sq = V::load(v + i);
    if constexpr (kL2) {
      grad = V::fma(param, wd, grad);
    }
    param = param * decay;
    exp_avg = V::fma(w1, grad - exp_avg, exp_avg);
    exp_avg_sq = V::fma(grad * w2, grad, exp_avg_sq * b2);
    // torch divides sqrt(v) by sqrt(bc2); multiplying by the reciprocal saves a division per lane and
    // differs by at most one rounding of the denominator.
    const V denom = V::fma(V::sqrt(exp_avg_sq), inv_bc2_sqrt, eps);
    param = V::fnma(step_size, exp_avg / denom, param);
    param.store(p + i);
    exp_avg.store(m + i);
    exp_avg_sq.store(v + i);
  }
  return i;
}

// The per-segment function of the shared threading scheme (host::dtype_combos builds its table).
struct AdamKernel {
  using SegmentFn = void (*)(void*, const void*, void*, void*, int64_t, int64_t, const AdamConsts&, bool);

  // Updates elements [begin, begin + n) of one tensor: vector lanes, then a scalar tail with the same math.
  template <typename P, typename S>
  static void segment(void* p, const void* g, void* m, void* v, int64_t begin, int64_t n, const AdamConsts& c,
                      bool l2) {
    P* pp = static_cast<P*>(p) + begin;
    const P* gp = static_cast<const P*>(g) + begin;
    S* mp = static_cast<S*>(m) + begin;
    S* vp = static_cast<S*>(v) + begin;
    if (l2) {
      const int64_t done = adam_lanes<VecF, true>(pp, gp, mp, vp, n, c);
      adam_lanes<ScalarF, true>(pp + done, gp + done, mp + done, vp + done, n - done, c);
    } else {
      const int64_t done = adam_lanes<VecF, false>(pp, gp, mp, vp, n, c);
      adam_lanes<ScalarF, false>(pp + done, gp + done, mp + done, vp + done, n - done, c);
    }
  }
};

constexpr auto kCombos = host::dtype_combos<AdamKernel>();

constexpr host::OpText kText{
    "adam_step",
    "CPU Adam",
    "FusedAdam",
    "(params, grads, exp_avgs/exp_avg_sqs) in {(float32, float32, float32), (bfloat16, bfloat16, float32), "
    "(float16, float16, float32), (bfloat16, bfloat16, bfloat16), (float16, float16, float16)}",
    "both moments must share one dtype",
};

constexpr std::array<const char*, 2> kStateNames = {"exp_avgs", "exp_avg_sqs"};

void adam_step_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, int64_t step, double lr, double beta1, double beta2, double eps,
                   double weight_decay, bool bias_correction, bool adamw_mode) {
  const std::array<at::TensorList, 2> states = {exp_avgs, exp_avg_sqs};
  host::check_list_lengths(kText, params, grads, states, kStateNames);
  TORCH_CHECK(step >= 1, "adam_step: step=", step,
              " is invalid; accepted: step >= 1 (the 1-based number of this step)");
  host::check_hyper(kText, "lr", lr, lr >= 0.0, "a finite lr >= 0");
  host::check_hyper(kText, "beta1", beta1, beta1 >= 0.0 && beta1 < 1.0, "0 <= beta1 < 1");
  host::check_hyper(kText, "beta2", beta2, beta2 >= 0.0 && beta2 < 1.0, "0 <= beta2 < 1");
  host::check_hyper(kText, "eps", eps, eps > 0.0, "a finite eps > 0");
  host::check_hyper(kText, "weight_decay", weight_decay, weight_decay >= 0.0, "a finite weight_decay >= 0");

  const auto plan = host::plan_step(kText, params, grads, states, kStateNames, kCombos);

  AdamConsts c{};
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.weight_decay = static_cast<float>(weight_decay);
  c.decay = adamw_mode ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  const bool l2 = !adamw_mode && weight_decay != 0.0;

  host::parallel_segments(plan.offsets, [&](size_t t, int64_t begin, int64_t n) {
    plan.fns[t](plan.params[t], plan.grads[t], plan.states[0][t], plan.states[1][t], begin, n, c, l2);
  });
}

}  // namespace
}  // namespace adam
}  // namespace anyaccel

ANYACCEL_TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE, m) {
  m.def(
      "adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "int step, float lr, float beta1, float beta2, float eps, float weight_decay, bool bias_correction, "
      "bool adamw_mode) -> ()");
  m.def("isa() -> str", &anyaccel::host::isa);
}

ANYACCEL_HOST_KERNEL_IMPLS("adam_step", &anyaccel::adam::adam_step_cpu)
