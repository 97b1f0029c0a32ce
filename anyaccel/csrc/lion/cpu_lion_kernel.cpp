// The math of the CPU Lion op (the kernel unit; the registration unit is cpu_lion.cpp): vector lanes for
// every accepted dtype combination of the op spec. Algorithm and storage: see cpu_lion.cpp.
#include "../includes/host_kernels.h"
#include "cpu_lion.h"

#include <cstdint>
#include <string>

namespace anyaccel {
namespace lion {
namespace {

using V = simd::Ops;
using T = V::T;

// Updates elements [0, n) and returns how many were done: whole vectors on fixed-width levels (a multiple
// of the width), all n on SVE (predicated).
template <typename P, typename G, typename S, typename C>
inline int64_t lion_lanes(P* p, const G* g, S* m, void* copy, int64_t n, const LionConsts& c) {
  const T b1 = V::set1(c.beta1);
  const T w1 = V::set1(c.beta1_complement);
  const T b2 = V::set1(c.beta2);
  const T w2 = V::set1(c.beta2_complement);
  const T neg_lr = V::set1(c.neg_lr);
  const T decay = V::set1(c.decay);
  V::Pred pg;
  int64_t i = 0;
  for (; V::next(i, n, pg); i += V::width()) {
    const T grad = V::load(pg, g + i);
    const T exp_avg = V::load(pg, m + i);
    const T update = V::sign(V::fma(b1, exp_avg, V::mul(w1, grad)));
    const T param = V::fma(V::load(pg, p + i), decay, V::mul(neg_lr, update));
    V::store(pg, p + i, param);
    V::store(pg, m + i, V::fma(b2, exp_avg, V::mul(w2, grad)));
    host::store_copy<C>(pg, copy, i, param);
  }
  return V::done(i, n);
}

struct LionKernel {
  // Updates elements [begin, begin + n) of one tensor: vector lanes, then (fixed-width levels) the tail
  // through vector-width buffers (the same code, so lanes and tail agree bit for bit).
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const LionConsts& c) {
    host::run_segment<1, P, G, S, C>(t, begin, n, [&c](P* p, const G* g, S* m, void* copy, int64_t k) {
      return lion_lanes<P, G, S, C>(p, g, m, copy, k, c);
    });
  }
};

}  // namespace

const host::SegmentTable<LionConsts>& segments() {
  static const auto table = host::segment_table<LionKernel, LionConsts>();
  return table;
}

}  // namespace lion

namespace host {
std::string isa() { return simd::kIsaName; }
}  // namespace host
}  // namespace anyaccel
