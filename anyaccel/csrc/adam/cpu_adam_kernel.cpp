// The math of the CPU Adam op (the kernel unit; the registration unit is cpu_adam.cpp): vector lanes for
// every accepted dtype combination of the op spec. Algorithm, order of operations and storage: see
// cpu_adam.cpp.
#include "../includes/host_kernels.h"
#include "cpu_adam.h"

#include <cstdint>
#include <string>

namespace anyaccel {
namespace adam {
namespace {

using simd::VecF;

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
  // Updates elements [begin, begin + n) of one tensor: vector lanes, then the tail through vector-width
  // buffers (the same code, so lanes and tail agree bit for bit).
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const AdamConsts& c) {
    P* p = static_cast<P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* m = static_cast<S*>(t.s0) + begin;
    S* v = static_cast<S*>(t.s1) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = adam_lanes<VecF, P, G, S, C>(p, g, m, v, copy, n, c);
    if (done == n) return;
    const int64_t rest = n - done;
    host::TailBuffer<P> tp(p + done, rest);
    host::TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    host::TailBuffer<S> tm(m + done, rest);
    host::TailBuffer<S> tv(v + done, rest);
    host::CopyTail<C> tc(host::offset_copy<C>(copy, done), rest);
    adam_lanes<VecF, P, G, S, C>(tp.data(), tg.data(), tm.data(), tv.data(), tc.data(), VecF::kWidth, c);
    tp.write_back();
    tm.write_back();
    tv.write_back();
    tc.write_back();
  }
};

// The inverse of adam_lanes for the same arguments (see cpu_adam.cpp for the rules).
template <typename V, typename P, typename G, typename S, typename C>
inline int64_t rollback_lanes(P* p, const G* g, S* m, S* v, void* copy, int64_t n, const RollbackConsts& c) {
  const V b1 = V::set1(c.beta1);
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
    V exp_avg = V::load(m + i);
    V exp_avg_sq = V::load(v + i);
    // The step's update, from the state it wrote, with the step's own operations.
    const V denom = V::fma(V::sqrt(exp_avg_sq), inv_bc2_sqrt, eps);
    V param = V::fma(step_size, exp_avg / denom, V::load(p + i)) / decay;
    param = V::finite_or_zero(param);
    if (c.l2) grad = V::fma(param, wd, grad);
    exp_avg = V::fnma(w1, grad, exp_avg) / b1;
    exp_avg_sq = V::clamp_negative(V::fnma(grad * w2, grad, exp_avg_sq) / b2);
    param.store(p + i);
    exp_avg.store(m + i);
    exp_avg_sq.store(v + i);
    host::store_copy<C>(copy, i, param);
  }
  return i;
}

struct RollbackKernel {
  // Elements [begin, begin + n) of one tensor: vector lanes, then the tail through vector-width buffers.
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const RollbackConsts& c) {
    P* p = static_cast<P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* m = static_cast<S*>(t.s0) + begin;
    S* v = static_cast<S*>(t.s1) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = rollback_lanes<VecF, P, G, S, C>(p, g, m, v, copy, n, c);
    if (done == n) return;
    const int64_t rest = n - done;
    host::TailBuffer<P> tp(p + done, rest);
    host::TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    host::TailBuffer<S> tm(m + done, rest);
    host::TailBuffer<S> tv(v + done, rest);
    host::CopyTail<C> tc(host::offset_copy<C>(copy, done), rest);
    rollback_lanes<VecF, P, G, S, C>(tp.data(), tg.data(), tm.data(), tv.data(), tc.data(), VecF::kWidth, c);
    tp.write_back();
    tm.write_back();
    tv.write_back();
    tc.write_back();
  }
};

}  // namespace

const host::SegmentTable<AdamConsts>& segments() {
  static const auto table = host::segment_table<AdamKernel, AdamConsts>();
  return table;
}

const host::SegmentTable<RollbackConsts>& rollback_segments() {
  static const auto table = host::segment_table<RollbackKernel, RollbackConsts>();
  return table;
}

}  // namespace adam

namespace host {
std::string isa() { return simd::kIsaName; }
}  // namespace host
}  // namespace anyaccel
