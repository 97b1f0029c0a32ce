// The math of the CPU Adagrad op (the kernel unit; the registration unit is cpu_adagrad.cpp): vector lanes for
// every accepted dtype combination of the op spec. Algorithm, order of operations and storage: see
// cpu_adagrad.cpp.
#include "../includes/host_kernels.h"
#include "cpu_adagrad.h"

#include <cstdint>
#include <string>

namespace anyaccel {
namespace adagrad {
namespace {

using V = simd::Ops;
using T = V::T;

// Updates elements [0, n) and returns how many were done: whole vectors on fixed-width levels (a multiple
// of the width), all n on SVE (predicated).
template <typename P, typename G, typename S, typename C>
inline int64_t adagrad_lanes(P* p, const G* g, S* v, void* copy, int64_t n, const AdagradConsts& c) {
  const T lr = V::set1(c.lr);
  const T eps = V::set1(c.eps);
  const T wd = V::set1(c.weight_decay);
  V::Pred pg;
  int64_t i = 0;
  for (; V::next(i, n, pg); i += V::width()) {
    T grad = V::load(pg, g + i);
    T param = V::load(pg, p + i);
    if (c.l2) grad = V::fma(param, wd, grad);
    const T sum = V::fma(grad, grad, V::load(pg, v + i));
    param = V::fnma(lr, V::div(grad, V::add(V::sqrt(sum), eps)), param);
    V::store(pg, p + i, param);
    V::store(pg, v + i, sum);
    host::store_copy<C>(pg, copy, i, param);
  }
  return V::done(i, n);
}

struct AdagradKernel {
  // Updates elements [begin, begin + n) of one tensor: vector lanes, then (fixed-width levels) the tail
  // through vector-width buffers (the same code, so lanes and tail agree bit for bit).
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const AdagradConsts& c) {
    host::run_segment<1, P, G, S, C>(t, begin, n, [&c](P* p, const G* g, S* v, void* copy, int64_t k) {
      return adagrad_lanes<P, G, S, C>(p, g, v, copy, k, c);
    });
  }
};

}  // namespace

const host::SegmentTable<AdagradConsts>& segments() {
  static const auto table = host::segment_table<AdagradKernel, AdagradConsts>();
  return table;
}

}  // namespace adagrad

namespace host {
std::string isa() { return simd::kIsaName; }
}  // namespace host
}  // namespace anyaccel
