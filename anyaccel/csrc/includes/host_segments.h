// What the two translation units of a host optimizer op share: the pointers of one tensor's piece of a step
// and the table of segment functions, one per accepted dtype combination. No torch header, no SIMD header.
#pragma once

#include <array>
#include <cstdint>

#include "anyaccel_dtypes.h"  // generated from the op spec: kNumCombos

namespace anyaccel {
namespace host {

// The pointers of one tensor's piece of a step: params, grads, up to two states, model copy (or nullptr).
struct SegmentPtrs {
  void* p;
  const void* g;
  void* s0;
  void* s1;
  void* copy;
};

// Updates elements [begin, begin + n) of one tensor.
template <typename Consts>
using SegmentFn = void (*)(const SegmentPtrs&, int64_t begin, int64_t n, const Consts&);

// One segment function per accepted dtype combination, in the op spec's order.
template <typename Consts>
using SegmentTable = std::array<SegmentFn<Consts>, ::anyaccel::op::kNumCombos>;

}  // namespace host
}  // namespace anyaccel
