// CPU Lion step as a torch op, on torch's stable ABI.
//
// The schema, the scalar ranges and the accepted dtypes are the op spec's (anyaccel/ops/lion/spec.py),
// compiled in through the generated anyaccel_op.h; this file keeps the math and the registration.
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

#include <cstdint>

namespace anyaccel {
namespace lion {
namespace {

using simd::ScalarF;
using simd::VecF;

struct LionConsts {
  float beta1;
  float beta1_complement;  // 1 - beta1
  float beta2;
  float beta2_complement;  // 1 - beta2
  float neg_lr;            // -lr
  float decay;             // 1 - lr * weight_decay (exactly 1 without weight decay)
};

template <typename V, typename P, typename G, typename S, typename C>
inline int64_t lion_lanes(P* p, const G* g, S* m, void* copy, int64_t n, const LionConsts& c) {
  const V b1 = V::set1(c.beta1);
  const V w1 = V::set1(c.beta1_complement);
  const V b2 = V::set1(c.beta2);
  const V w2 = V::set1(c.beta2_complement);
  const V neg_lr = V::set1(c.neg_lr);
  const V decay = V::set1(c.decay);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    const V grad = V::load(g + i);
    const V exp_avg = V::load(m + i);
    const V update = V::sign(V::fma(b1, exp_avg, w1 * grad));
    const V param = V::fma(V::load(p + i), decay, neg_lr * update);
    param.store(p + i);
    V::fma(b2, exp_avg, w2 * grad).store(m + i);
    host::store_copy<C>(copy, i, param);
  }
  return i;
}

struct LionKernel {
  using Consts = LionConsts;

  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const LionConsts& c) {
    P* p = static_cast<P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* m = static_cast<S*>(t.s0) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = lion_lanes<VecF, P, G, S, C>(p, g, m, copy, n, c);
    lion_lanes<ScalarF, P, G, S, C>(p + done, g + done, m + done, host::offset_copy<C>(copy, done), n - done, c);
  }
};

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
  host::run_step<LionKernel, 1>("lion_step", params, grads, {&exp_avgs}, kStateNames, model_copies, "FusedLion", c);
}

}  // namespace
}  // namespace lion
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_HOST_KERNEL(lion_step, anyaccel::lion::lion_step_cpu)
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) { ANYACCEL_IMPL(m, isa, anyaccel::host::isa); }
