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

using simd::VecF;

// Updates elements [0, n) with lanes of type V and returns how many were done (a multiple of V::kWidth).
template <typename V, typename P, typename G, typename S, typename C>
inline int64_t adagrad_lanes(P* p, const G* g, S* v, void* copy, int64_t n, const AdagradConsts& c) {
  const V lr = V::set1(c.lr);
  const V eps = V::set1(c.eps);
  const V wd = V::set1(c.weight_decay);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V grad = V::load(g + i);
    V param = V::load(p + i);
    if (c.l2) grad = V::fma(param, wd, grad);
    const V sum = V::fma(grad, grad, V::load(v + i));
    param = V::fnma(lr, grad / (V::sqrt(sum) + eps), param);
    param.store(p + i);
    sum.store(v + i);
    host::store_copy<C>(copy, i, param);
  }
  return i;
}

struct AdagradKernel {
  // Updates elements [begin, begin + n) of one tensor: vector lanes, then the tail through vector-width
  // buffers (the same code, so lanes and tail agree bit for bit).
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const AdagradConsts& c) {
    P* p = static_cast<P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* v = static_cast<S*>(t.s0) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = adagrad_lanes<VecF, P, G, S, C>(p, g, v, copy, n, c);
    if (done == n) return;
    const int64_t rest = n - done;
    host::TailBuffer<P> tp(p + done, rest);
    host::TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    host::TailBuffer<S> tv(v + done, rest);
    host::CopyTail<C> tc(host::offset_copy<C>(copy, done), rest);
    adagrad_lanes<VecF, P, G, S, C>(tp.data(), tg.data(), tv.data(), tc.data(), VecF::kWidth, c);
    tp.write_back();
    tv.write_back();
    tc.write_back();
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
