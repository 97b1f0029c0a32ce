// The math side of anyaccel's host (CPU) optimizer ops: what a kernel-only translation unit needs.
//
// A CPU op is two translation units compiled in parallel: the kernel unit (csrc/<family>/cpu_<family>_kernel.cpp)
// includes only this header, simd.h and the generated anyaccel_dtypes.h (no torch header beyond the
// header-only BFloat16/Half types), and the registration unit (csrc/<family>/cpu_<family>.cpp) includes
// host_optimizer.h and torch's stable ABI. torch's stable headers and the SIMD code generation each cost
// about 1.5 s of compile time; split, they overlap on two cores (the cold build of CPU Adam is the sum of
// the two otherwise).
//
// Dtypes: the op spec's accepted combinations (param, grad, state, model copy) arrive as the X-macro
// ANYACCEL_DTYPE_COMBOS; segment_table<Kernel>() instantiates one segment function per combination, in the
// spec's order, the order of the registration unit's checks (kAcceptedCombos).
#pragma once

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "anyaccel_dtypes.h"  // generated from the op spec: ANYACCEL_DTYPE_COMBOS, kNumCombos
#include "host_segments.h"
#include "simd.h"

namespace anyaccel {
namespace host {

// The X-macro's dtype names (c10::ScalarType enumerator names) -> C++ storage types (void: no model copy).
// Tag types rather than c10::ScalarType itself, so this unit needs no torch header beyond BFloat16/Half.
struct DType_Float {
  using type = float;
};
struct DType_BFloat16 {
  using type = c10::BFloat16;
};
struct DType_Half {
  using type = c10::Half;
};
struct DType_Undefined {
  using type = void;
};

#define ANYACCEL_HOST_SEGMENT_(P, G, S, C)                                                                  \
  &Kernel::template segment<typename DType_##P::type, typename DType_##G::type, typename DType_##S::type, \
                            typename DType_##C::type>,

// One segment function per accepted dtype combination, in the op spec's order. Kernel provides
// `template <typename P, typename G, typename S, typename C> static void segment(const SegmentPtrs&, int64_t
// begin, int64_t n, const Consts&)`, where C is void when the combination has no model copy.
template <typename Kernel, typename Consts>
SegmentTable<Consts> segment_table() {
  return {{ANYACCEL_DTYPE_COMBOS(ANYACCEL_HOST_SEGMENT_)}};
}

// The model copy pointer advanced by `n` elements of C (nullptr stays nullptr; C is void without a copy).
template <typename C>
inline void* offset_copy(void* copy, int64_t n) {
  if constexpr (std::is_void_v<C>) {
    return nullptr;
  } else {
    return copy == nullptr ? nullptr : static_cast<void*>(static_cast<C*>(copy) + n);
  }
}

// Stores the lanes `pg` selects of `v` into the model copy, or nothing when the combination has none (C is
// void).
template <typename C>
inline void store_copy(simd::Ops::Pred pg, void* copy, int64_t i, simd::Ops::T v) {
  if constexpr (!std::is_void_v<C>) simd::Ops::store(pg, static_cast<C*>(copy) + i, v);
}

// Whether a kernel's vector loop over n elements left a tail (`done` < n) to run through TailBuffers:
// never on SVE, whose predicated loop covers every element.
inline bool has_tail(int64_t done, int64_t n) { return !simd::Ops::kPredicated && done != n; }

// A vector-width stack copy of the last n < kWidth elements of one array, so a kernel's tail runs through
// the same vector code as its body (one instantiation per dtype combination instead of two; padding lanes
// are zero and their results are dropped). `write_back` copies the n real elements back. Fixed-width
// levels only (has_tail is false on SVE).
template <typename T>
struct TailBuffer {
  static constexpr int64_t kWidth = simd::Ops::kTailWidth;
  alignas(64) T buf[kWidth];
  T* src;
  int64_t n;

  TailBuffer(T* s, int64_t count) : src(s), n(count) {
    std::memset(static_cast<void*>(buf), 0, sizeof(buf));
    if (s != nullptr) {
      std::memcpy(static_cast<void*>(buf), static_cast<const void*>(s), static_cast<size_t>(count) * sizeof(T));
    }
  }
  T* data() { return buf; }
  void write_back() {
    if (src != nullptr) {
      std::memcpy(static_cast<void*>(src), static_cast<const void*>(buf), static_cast<size_t>(n) * sizeof(T));
    }
  }
};

// The tail buffer of a model copy of storage C (nothing when C is void: no copy).
template <typename C>
struct CopyTail {
  TailBuffer<C> t;
  CopyTail(void* copy, int64_t n) : t(static_cast<C*>(copy), n) {}
  void* data() { return t.src == nullptr ? nullptr : static_cast<void*>(t.data()); }
  void write_back() { t.write_back(); }
};
template <>
struct CopyTail<void> {
  CopyTail(void*, int64_t) {}
  void* data() { return nullptr; }
  void write_back() {}
};

// Runs a kernel's vector loop over elements [begin, begin + n) of one tensor of `t`, then (fixed-width levels)
// its tail through vector-width buffers: the same code, so lanes and tail agree bit for bit. NumStates (1 or
// 2) state arrays come from t.s0 (and t.s1). `lanes(P* p, const G* g, S* s0[, S* s1], void* copy, int64_t n)`
// updates the first elements of its arrays and returns how many its vector loop covered (`V::done`).
template <int NumStates, typename P, typename G, typename S, typename C, typename Lanes>
inline void run_segment(const SegmentPtrs& t, int64_t begin, int64_t n, const Lanes& lanes) {
  static_assert(NumStates == 1 || NumStates == 2, "run_segment: one or two state arrays");
  P* p = static_cast<P*>(t.p) + begin;
  const G* g = static_cast<const G*>(t.g) + begin;
  S* s0 = static_cast<S*>(t.s0) + begin;
  void* copy = offset_copy<C>(t.copy, begin);
  if constexpr (NumStates == 2) {
    S* s1 = static_cast<S*>(t.s1) + begin;
    const int64_t done = lanes(p, g, s0, s1, copy, n);
    if (!has_tail(done, n)) return;
    const int64_t rest = n - done;
    TailBuffer<P> tp(p + done, rest);
    TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    TailBuffer<S> t0(s0 + done, rest);
    TailBuffer<S> t1(s1 + done, rest);
    CopyTail<C> tc(offset_copy<C>(copy, done), rest);
    lanes(tp.data(), tg.data(), t0.data(), t1.data(), tc.data(), simd::Ops::kTailWidth);
    tp.write_back();
    t0.write_back();
    t1.write_back();
    tc.write_back();
  } else {
    const int64_t done = lanes(p, g, s0, copy, n);
    if (!has_tail(done, n)) return;
    const int64_t rest = n - done;
    TailBuffer<P> tp(p + done, rest);
    TailBuffer<G> tg(const_cast<G*>(g + done), rest);
    TailBuffer<S> t0(s0 + done, rest);
    CopyTail<C> tc(offset_copy<C>(copy, done), rest);
    lanes(tp.data(), tg.data(), t0.data(), tc.data(), simd::Ops::kTailWidth);
    tp.write_back();
    t0.write_back();
    tc.write_back();
  }
}

}  // namespace host
}  // namespace anyaccel
