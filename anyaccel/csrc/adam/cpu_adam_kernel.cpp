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

using V = simd::Ops;
using T = V::T;

// Updates elements [0, n) and returns how many were done: whole vectors on fixed-width levels (a multiple
// of the width), all n on SVE (predicated).
template <typename P, typename G, typename S, typename C>
inline int64_t adam_lanes(P* p, const G* g, S* m, S* v, void* copy, int64_t n, const AdamConsts& c) {
  const T w1 = V::set1(c.beta1_complement);
  const T b1 = V::set1(c.beta1);
  const T b2 = V::set1(c.beta2);
  const T w2 = V::set1(c.beta2_complement);
  const T eps = V::set1(c.eps);
  const T step_size = V::set1(c.step_size);
  const T inv_bc2_sqrt = V::set1(c.inv_bc2_sqrt);
  const T wd = V::set1(c.weight_decay);
  const T decay = V::set1(c.decay);
  V::Pred pg;
  int64_t i = 0;
  for (; V::next(i, n, pg); i += V::width()) {
    T grad = V::load(pg, g + i);
    T param = V::load(pg, p + i);
    T exp_avg = V::load(pg, m + i);
    T exp_avg_sq = V::load(pg, v + i);
    if (c.l2) grad = V::fma(param, wd, grad);
    param = V::mul(param, decay);
    const T diff = V::sub(grad, exp_avg);
    exp_avg = c.lerp_from_grad ? V::fnma(diff, b1, grad) : V::fma(w1, diff, exp_avg);
    exp_avg_sq = V::fma(V::mul(grad, w2), grad, V::mul(exp_avg_sq, b2));
    // torch divides sqrt(v) by sqrt(bc2); multiplying by the reciprocal saves a division per lane and
    // differs by at most one rounding of the denominator.
    const T denom = V::fma(V::sqrt(exp_avg_sq), inv_bc2_sqrt, eps);
    param = V::fnma(step_size, V::div(exp_avg, denom), param);
    V::store(pg, p + i, param);
    V::store(pg, m + i, exp_avg);
    V::store(pg, v + i, exp_avg_sq);
    host::store_copy<C>(pg, copy, i, param);
  }
  return V::done(i, n);
}

struct AdamKernel {
  // Updates elements [begin, begin + n) of one tensor: vector lanes, then (fixed-width levels) the tail
  // through vector-width buffers (the same code, so lanes and tail agree bit for bit).
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const AdamConsts& c) {
    host::run_segment<2, P, G, S, C>(t, begin, n, [&c](P* p, const G* g, S* m, S* v, void* copy, int64_t k) {
      return adam_lanes<P, G, S, C>(p, g, m, v, copy, k, c);
    });
  }
};

// The inverse of adam_lanes for the same arguments (see cpu_adam.cpp for the rules).
template <typename P, typename G, typename S, typename C>
inline int64_t rollback_lanes(P* p, const G* g, S* m, S* v, void* copy, int64_t n, const RollbackConsts& c) {
  const T b1 = V::set1(c.beta1);
  const T w1 = V::set1(c.beta1_complement);
  const T b2 = V::set1(c.beta2);
  const T w2 = V::set1(c.beta2_complement);
  const T eps = V::set1(c.eps);
  const T step_size = V::set1(c.step_size);
  const T inv_bc2_sqrt = V::set1(c.inv_bc2_sqrt);
  const T wd = V::set1(c.weight_decay);
  const T decay = V::set1(c.decay);
  V::Pred pg;
  int64_t i = 0;
  for (; V::next(i, n, pg); i += V::width()) {
    T grad = V::load(pg, g + i);
    T exp_avg = V::load(pg, m + i);
    T exp_avg_sq = V::load(pg, v + i);
    // The step's update, from the state it wrote, with the step's own operations.
    const T denom = V::fma(V::sqrt(exp_avg_sq), inv_bc2_sqrt, eps);
    T param = V::div(V::fma(step_size, V::div(exp_avg, denom), V::load(pg, p + i)), decay);
    param = V::finite_or_zero(param);
    if (c.l2) grad = V::fma(param, wd, grad);
    exp_avg = V::div(V::fnma(w1, grad, exp_avg), b1);
    exp_avg_sq = V::clamp_negative(V::div(V::fnma(V::mul(grad, w2), grad, exp_avg_sq), b2));
    V::store(pg, p + i, param);
    V::store(pg, m + i, exp_avg);
    V::store(pg, v + i, exp_avg_sq);
    host::store_copy<C>(pg, copy, i, param);
  }
  return V::done(i, n);
}

struct RollbackKernel {
  // Elements [begin, begin + n) of one tensor: vector lanes, then the tail through vector-width buffers.
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const RollbackConsts& c) {
    host::run_segment<2, P, G, S, C>(t, begin, n, [&c](P* p, const G* g, S* m, S* v, void* copy, int64_t k) {
      return rollback_lanes<P, G, S, C>(p, g, m, v, copy, k, c);
    });
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
