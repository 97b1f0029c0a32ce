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

using simd::VecF;

template <typename V>
struct Lanes {
  V b1, w1, b2, w2, eps, inv_scale, wd, step_size;
  explicit Lanes(const LambConsts& c)
      : b1(V::set1(c.beta1)), w1(V::set1(c.beta1_complement)), b2(V::set1(c.beta2)), w2(V::set1(c.beta2_complement)),
        eps(V::set1(c.eps)), inv_scale(V::set1(c.inv_grad_scale)), wd(V::set1(c.weight_decay)),
        step_size(V::set1(c.step_size)) {}

  // The update u from p, m, v (the same expression in both passes).
  V update(V param, V exp_avg, V exp_avg_sq, bool eps_inside_sqrt) const {
    const V denom = eps_inside_sqrt ? V::sqrt(exp_avg_sq + eps) : V::sqrt(exp_avg_sq) + eps;
    return V::fma(wd, param, exp_avg / denom);
  }
};

// Sum of a vector's lanes in double (the norms accumulate in double: 1e9 fp32 squares lose digits in fp32).
inline double lane_sum(const VecF& v) {
  alignas(64) float f[VecF::kWidth];
  v.store(f);
  double s = 0;
  for (int64_t k = 0; k < VecF::kWidth; ++k) s += f[k];
  return s;
}

template <typename P, typename G, typename S>
inline int64_t pass1_lanes(const P* p, const G* g, S* m, S* v, int64_t n, const LambConsts& c, double* w2,
                           double* u2) {
  const Lanes<VecF> L(c);
  VecF acc_w = VecF::set1(0.0f), acc_u = VecF::set1(0.0f);
  double sum_w = 0, sum_u = 0;
  int64_t i = 0, since_flush = 0;
  for (; i + VecF::kWidth <= n; i += VecF::kWidth) {
    const VecF grad = VecF::load(g + i) * L.inv_scale;
    const VecF param = VecF::load(p + i);
    const VecF exp_avg = VecF::fma(L.b1, VecF::load(m + i), L.w1 * grad);
    const VecF exp_avg_sq = VecF::fma(L.b2, VecF::load(v + i), (L.w2 * grad) * grad);
    exp_avg.store(m + i);
    exp_avg_sq.store(v + i);
    const VecF u = L.update(param, exp_avg, exp_avg_sq, c.eps_inside_sqrt);
    acc_w = VecF::fma(param, param, acc_w);
    acc_u = VecF::fma(u, u, acc_u);
    if (++since_flush == 256) {  // fp32 lane sums of at most 256 squares, then into double
      sum_w += lane_sum(acc_w);
      sum_u += lane_sum(acc_u);
      acc_w = VecF::set1(0.0f);
      acc_u = VecF::set1(0.0f);
      since_flush = 0;
    }
  }
  *w2 += sum_w + lane_sum(acc_w);
  *u2 += sum_u + lane_sum(acc_u);
  return i;
}

template <typename P, typename S, typename C>
inline int64_t pass2_lanes(P* p, const S* m, const S* v, void* copy, int64_t n, const LambConsts& c, float coeff) {
  const Lanes<VecF> L(c);
  const VecF scale = L.step_size * VecF::set1(coeff);
  int64_t i = 0;
  for (; i + VecF::kWidth <= n; i += VecF::kWidth) {
    const VecF param = VecF::load(p + i);
    const VecF u = L.update(param, VecF::load(m + i), VecF::load(v + i), c.eps_inside_sqrt);
    const VecF out = VecF::fnma(scale, u, param);
    out.store(p + i);
    host::store_copy<C>(copy, i, out);
  }
  return i;
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
    if (done == n) return;
    const int64_t rest = n - done;  // the tail through vector-width buffers: padding lanes are zero
    host::TailBuffer<P> tp(const_cast<P*>(p + done), rest);
    host::TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    host::TailBuffer<S> tm(m + done, rest);
    host::TailBuffer<S> tv(v + done, rest);
    double tail_w = 0, tail_u = 0;
    pass1_lanes(tp.data(), tg.data(), tm.data(), tv.data(), VecF::kWidth, c, &tail_w, &tail_u);
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
    if (done == n) return;
    const int64_t rest = n - done;
    host::TailBuffer<P> tp(p + done, rest);
    host::TailBuffer<S> tm(const_cast<S*>(m + done), rest);
    host::TailBuffer<S> tv(const_cast<S*>(v + done), rest);
    host::CopyTail<C> tc(host::offset_copy<C>(copy, done), rest);
    pass2_lanes<P, S, C>(tp.data(), tm.data(), tv.data(), tc.data(), VecF::kWidth, c, coeff);
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
