// CPU Adam / AdamW step as a torch op, on torch's stable ABI.
//
// The schema, the scalar ranges and the accepted dtypes are the op spec's (anyaccel/ops/adam/spec.py),
// compiled in through the generated anyaccel_op.h; this file keeps the math and the registration.
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
#include "../includes/host_optimizer.h"

#include <cmath>
#include <cstdint>

namespace anyaccel {
namespace adam {
namespace {

using simd::ScalarF;
using simd::VecF;

// Per-step constants, computed once in double precision and rounded to fp32.
struct AdamConsts {
  float beta1;             // 1 - lerp weight, for the weight >= 0.5 form
  float beta1_complement;  // 1 - beta1, the lerp weight for exp_avg
  bool lerp_from_grad;     // torch.lerp's form for weights >= 0.5: g - (g - m) * (1 - w)
  float beta2;
  float beta2_complement;  // 1 - beta2
  float eps;
  float step_size;         // lr / bc1
  float inv_bc2_sqrt;      // 1 / sqrt(bc2)
  float weight_decay;      // used by the L2 (adamw_mode=false) variant
  float decay;             // 1 - lr * weight_decay for adamw_mode, else exactly 1
  bool l2;                 // !adamw_mode && weight_decay != 0
};

// Updates elements [0, n) with lanes of type V and returns how many were done (a multiple of V::kWidth).
template <typename V, typename P, typename G, typename S, typename C>
inline int64_t adam_lanes(P* p, const G* g, S* m, S* v, void* copy, int64_t n, const AdamConsts& c) {
  const V w1 = V::set1(c.beta1_complement);
  const V b1 = V::set1(c.beta1);
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
    if (c.l2) grad = V::fma(param, wd, grad);
    param = param * decay;
    const V diff = grad - exp_avg;
    exp_avg = c.lerp_from_grad ? V::fnma(diff, b1, grad) : V::fma(w1, diff, exp_avg);
    exp_avg_sq = V::fma(grad * w2, grad, exp_avg_sq * b2);
    // torch divides sqrt(v) by sqrt(bc2); multiplying by the reciprocal saves a division per lane and
    // differs by at most one rounding of the denominator.
    const V denom = V::fma(V::sqrt(exp_avg_sq), inv_bc2_sqrt, eps);
    param = V::fnma(step_size, exp_avg / denom, param);
    param.store(p + i);
    exp_avg.store(m + i);
    exp_avg_sq.store(v + i);
    host::store_copy<C>(copy, i, param);
  }
  return i;
}

struct AdamKernel {
  using Consts = AdamConsts;

  // Updates elements [begin, begin + n) of one tensor: vector lanes, then a scalar tail with the same math.
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const AdamConsts& c) {
    P* p = static_cast<P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* m = static_cast<S*>(t.s0) + begin;
    S* v = static_cast<S*>(t.s1) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = adam_lanes<VecF, P, G, S, C>(p, g, m, v, copy, n, c);
    adam_lanes<ScalarF, P, G, S, C>(p + done, g + done, m + done, v + done, host::offset_copy<C>(copy, done),
                                    n - done, c);
  }
};

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
  host::run_step<AdamKernel, 2>("adam_step", params, grads, {&exp_avgs, &exp_avg_sqs}, kStateNames, model_copies,
                                "FusedAdam", c);
}

}  // namespace
}  // namespace adam
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_HOST_KERNEL(adam_step, anyaccel::adam::adam_step_cpu)
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) { ANYACCEL_IMPL(m, isa, anyaccel::host::isa); }
