// The math of the CPU Lion op (the kernel unit; the registration unit is cpu_lion.cpp): vector lanes for
// every accepted dtype combination of the op spec. Algorithm and storage: see cpu_lion.cpp.
#include "../includes/host_kernels.h"
#include "cpu_lion.h"

#include <cstdint>
#include <string>

namespace anyaccel {
namespace lion {
namespace {

using simd::VecF;

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
  // Updates elements [begin, begin + n) of one tensor: vector lanes, then the tail through vector-width
  // buffers (the same code, so lanes and tail agree bit for bit).
  template <typename P, typename G, typename S, typename C>
  static void segment(const host::SegmentPtrs& t, int64_t begin, int64_t n, const LionConsts& c) {
    P* p = static_cast<P*>(t.p) + begin;
    const G* g = static_cast<const G*>(t.g) + begin;
    S* m = static_cast<S*>(t.s0) + begin;
    void* copy = host::offset_copy<C>(t.copy, begin);
    const int64_t done = lion_lanes<VecF, P, G, S, C>(p, g, m, copy, n, c);
    if (done == n) return;
    const int64_t rest = n - done;
    host::TailBuffer<P> tp(p + done, rest);
    host::TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    host::TailBuffer<S> tm(m + done, rest);
    host::CopyTail<C> tc(host::offset_copy<C>(copy, done), rest);
    lion_lanes<VecF, P, G, S, C>(tp.data(), tg.data(), tm.data(), tc.data(), VecF::kWidth, c);
    tp.write_back();
    tm.write_back();
    tc.write_back();
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
