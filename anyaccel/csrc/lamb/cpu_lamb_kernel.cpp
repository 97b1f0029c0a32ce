// The math of the CPU LAMB op (the kernel unit; the registration unit is cpu_lamb.cpp): two vectorised
// passes per tensor for every accepted dtype combination of the op spec. Algorithm: see
// anyaccel/ops/lamb/spec.py (DeepSpeed's FusedLamb, csrc/lamb/fused_lamb_cuda_kernel.cu).
#include "../includes/host_kernels.h"
#include "cpu_lamb.h"

#include <cstdint>
#include <string>

namespace anyaccel {
namespace lamb {
namespace {

using V = simd::Ops;
using T = V::T;

// The update u from p, m, v (the same expression in both passes).
inline T lamb_update(T param, T exp_avg, T exp_avg_sq, T eps, T wd, bool eps_inside_sqrt) {
  const T denom = eps_inside_sqrt ? V::sqrt(V::add(exp_avg_sq, eps)) : V::add(V::sqrt(exp_avg_sq), eps);
  return V::fma(wd, param, V::div(exp_avg, denom));
}

// Pass 1 over elements [0, n); returns how many were done: whole vectors on fixed-width levels, all n on
// SVE (predicated; inactive lanes are zero, as padding lanes are, and add nothing to the sums).
template <typename P, typename G, typename S>
inline int64_t pass1_lanes(const P* p, const G* g, S* m, S* v, int64_t n, const LambConsts& c, double* w2,
                           double* u2) {
  const T b1 = V::set1(c.beta1), w1 = V::set1(c.beta1_complement);
  const T b2 = V::set1(c.beta2), wc2 = V::set1(c.beta2_complement);
  const T eps = V::set1(c.eps), inv_scale = V::set1(c.inv_grad_scale), wd = V::set1(c.weight_decay);
  T acc_w = V::set1(0.0f), acc_u = V::set1(0.0f);
  double sum_w = 0, sum_u = 0;
  V::Pred pg;
  int64_t i = 0, since_flush = 0;
  for (; V::next(i, n, pg); i += V::width()) {
    const T grad = V::mul(V::load(pg, g + i), inv_scale);
    const T param = V::load(pg, p + i);
    const T exp_avg = V::fma(b1, V::load(pg, m + i), V::mul(w1, grad));
    const T exp_avg_sq = V::fma(b2, V::load(pg, v + i), V::mul(V::mul(wc2, grad), grad));
    V::store(pg, m + i, exp_avg);
    V::store(pg, v + i, exp_avg_sq);
    const T u = lamb_update(param, exp_avg, exp_avg_sq, eps, wd, c.eps_inside_sqrt);
    acc_w = V::fma(param, param, acc_w);
    acc_u = V::fma(u, u, acc_u);
    if (++since_flush == 256) {  // fp32 lane sums of at most 256 squares, then into double
      sum_w += V::lane_sum(acc_w);
      sum_u += V::lane_sum(acc_u);
      acc_w = V::set1(0.0f);
      acc_u = V::set1(0.0f);
      since_flush = 0;
    }
  }
  *w2 += sum_w + V::lane_sum(acc_w);
  *u2 += sum_u + V::lane_sum(acc_u);
  return V::done(i, n);
}

template <typename P, typename S, typename C>
inline int64_t pass2_lanes(P* p, const S* m, const S* v, void* copy, int64_t n, const LambConsts& c, float coeff) {
  const T eps = V::set1(c.eps), wd = V::set1(c.weight_decay);
  const T scale = V::mul(V::set1(c.step_size), V::set1(coeff));
  V::Pred pg;
  int64_t i = 0;
  for (; V::next(i, n, pg); i += V::width()) {
    const T param = V::load(pg, p + i);
    const T u = lamb_update(param, V::load(pg, m + i), V::load(pg, v + i), eps, wd, c.eps_inside_sqrt);
    const T out = V::fnma(scale, u, param);
    V::store(pg, p + i, out);
    host::store_copy<C>(pg, copy, i, out);
  }
  return V::done(i, n);
}

struct LambKernel {
  template <typename P, typename G, typename S, typename C>
  static void pass1(const host::SegmentPtrs& t, int64_t begin, int64_t n, const LambConsts& c, double* w2,
                    double* u2) {
    const P* p = static_cast<const P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* m = static_cast<S*>(t.s0) + begin;
    S* v = static_cast<S*>(t.s1) + begin;
    const int64_t done = pass1_lanes(p, g, m, v, n, c, w2, u2);
    if (!host::has_tail(done, n)) return;
    const int64_t rest = n - done;  // the tail through vector-width buffers: padding lanes are zero
    host::TailBuffer<P> tp(const_cast<P*>(p + done), rest);
    host::TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    host::TailBuffer<S> tm(m + done, rest);
    host::TailBuffer<S> tv(v + done, rest);
    double tail_w = 0, tail_u = 0;
    pass1_lanes(tp.data(), tg.data(), tm.data(), tv.data(), V::kTailWidth, c, &tail_w, &tail_u);
    tm.write_back();
    tv.write_back();
    // Padding lanes have p = g = m = v = 0: their update is 0 / (sqrt(0) + eps) + 0 = 0 (or 0 / sqrt(eps)),
    // so they add nothing to either sum.
    *w2 += tail_w;
    *u2 += tail_u;
  }

  template <typename P, typename G, typename S, typename C>
  static void pass2(const host::SegmentPtrs& t, int64_t begin, int64_t n, const LambConsts& c, float coeff) {
    P* p = static_cast<P*>(t.p) + begin;
    const S* m = static_cast<const S*>(t.s0) + begin;
    const S* v = static_cast<const S*>(t.s1) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = pass2_lanes<P, S, C>(p, m, v, copy, n, c, coeff);
    if (!host::has_tail(done, n)) return;
    const int64_t rest = n - done;
    host::TailBuffer<P> tp(p + done, rest);
    host::TailBuffer<S> tm(const_cast<S*>(m + done), rest);
    host::TailBuffer<S> tv(const_cast<S*>(v + done), rest);
    host::CopyTail<C> tc(host::offset_copy<C>(copy, done), rest);
    pass2_lanes<P, S, C>(tp.data(), tm.data(), tv.data(), tc.data(), V::kTailWidth, c, coeff);
    tp.write_back();
    tc.write_back();
  }
};

#define ANYACCEL_LAMB_PASS1_(P, G, S, C)                                                                   \
  &LambKernel::pass1<typename host::DType_##P::type, typename host::DType_##G::type,                      \
                     typename host::DType_##S::type, typename host::DType_##C::type>,
#define ANYACCEL_LAMB_PASS2_(P, G, S, C)                                                                   \
  &LambKernel::pass2<typename host::DType_##P::type, typename host::DType_##G::type,                      \
                     typename host::DType_##S::type, typename host::DType_##C::type>,

}  // namespace

const std::array<Pass1Fn, op::kNumCombos>& pass1() {
  static const std::array<Pass1Fn, op::kNumCombos> table = {{ANYACCEL_DTYPE_COMBOS(ANYACCEL_LAMB_PASS1_)}};
  return table;
}

const std::array<Pass2Fn, op::kNumCombos>& pass2() {
  static const std::array<Pass2Fn, op::kNumCombos> table = {{ANYACCEL_DTYPE_COMBOS(ANYACCEL_LAMB_PASS2_)}};
  return table;
}

}  // namespace lamb

namespace host {
std::string isa() { return simd::kIsaName; }
}  // namespace host
}  // namespace anyaccel
