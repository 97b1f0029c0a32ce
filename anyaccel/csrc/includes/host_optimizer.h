// What anyaccel's host (CPU) optimizer ops share: the dtype table, the threading scheme and the
// registration glue, on torch's stable ABI. Each kernel file (csrc/adam/cpu_adam.cpp,
// csrc/lion/cpu_lion.cpp) keeps only its math and its registration.
//
// Validation is checks::check_optimizer_lists (stable/checks.h), the same rules as the Python fakes; the
// scalar ranges are checked by the generated schema header before the kernel runs.
//
// Dtypes: the op spec's accepted combinations (param, grad, state, model copy) arrive as the X-macro
// ANYACCEL_DTYPE_COMBOS of the generated header; segment_table<Kernel>() instantiates one segment function
// per combination, in the spec's order, so the table and the checks' accepted list cannot disagree.
//
// Threading: elements [0, total) of the concatenation of all tensors are split into equal ranges aligned to
// kAlignElements that cross tensor boundaries, so 200 small tensors balance as well as one big one. The
// ranges run on torch's own intra-op thread pool through the stable ABI (torch_parallel_for, 2.10+), so the
// kernels follow torch.set_num_threads and the process's affinity as torch does, and the op links no
// OpenMP runtime of its own. At most ceil(total / kGrainElements) threads work on one step. (The same aim
// as the multi-tensor apply of NVIDIA apex and DeepSpeed: many tensors, one call.)
#pragma once

#include <torch/csrc/stable/c/shim.h>
#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "anyaccel_op.h"  // generated from the op spec: ANYACCEL_DTYPE_COMBOS, kAcceptedCombos, ANYACCEL_IMPL
#include "simd.h"
#include "stable/checks.h"
#include "stable/tensor.h"

// Registers `kernel` as the kernel of spec function `fn` for CPU and for the sparse CPU keys: a sparse
// gradient makes the dispatcher pick a sparse key, where the same (validating) function names the tensor
// and the fix instead of torch's generic "could not run ... with arguments from the 'SparseCPU' backend".
// It never computes on a sparse tensor: validation rejects every non-strided layout first.
#define ANYACCEL_HOST_KERNEL(fn, kernel)                                  \
  ANYACCEL_LIBRARY_IMPL(CPU, m) { ANYACCEL_IMPL(m, fn, kernel); }         \
  ANYACCEL_LIBRARY_IMPL(SparseCPU, m) { ANYACCEL_IMPL(m, fn, kernel); }   \
  ANYACCEL_LIBRARY_IMPL(SparseCsrCPU, m) { ANYACCEL_IMPL(m, fn, kernel); }

namespace anyaccel {
namespace host {

// Minimum elements per thread before another thread is worth waking (about 64 KiB of fp32 params).
constexpr int64_t kGrainElements = 1 << 14;
// Thread ranges start on multiples of this many elements (a 64-byte line of 16 fp32 lanes, times 4).
constexpr int64_t kAlignElements = 64;

// c10::ScalarType enumerator -> C++ storage type (void for "no model copy").
template <c10::ScalarType T>
struct CType;
template <>
struct CType<c10::ScalarType::Float> {
  using type = float;
};
template <>
struct CType<c10::ScalarType::BFloat16> {
  using type = c10::BFloat16;
};
template <>
struct CType<c10::ScalarType::Half> {
  using type = c10::Half;
};
template <>
struct CType<c10::ScalarType::Undefined> {
  using type = void;
};

// The pointers of one tensor's piece of a step: params P, grads G, up to two states S, model copy C.
struct SegmentPtrs {
  void* p;
  const void* g;
  void* s0;
  void* s1;
  void* copy;
};

// Kernel provides `using Consts = ...;` and
// `template <typename P, typename G, typename S, typename C> static void segment(const SegmentPtrs&, int64_t
// begin, int64_t n, const Consts&)`, where C is void when the combination has no model copy.
template <typename Kernel>
using SegmentFn = void (*)(const SegmentPtrs&, int64_t, int64_t, const typename Kernel::Consts&);

#define ANYACCEL_HOST_SEGMENT_(P, G, S, C)                                                                        \
  &Kernel::template segment<typename CType<c10::ScalarType::P>::type, typename CType<c10::ScalarType::G>::type, \
                            typename CType<c10::ScalarType::S>::type, typename CType<c10::ScalarType::C>::type>,

// One segment function per accepted dtype combination, in the op spec's order (kAcceptedCombos' order).
template <typename Kernel>
std::array<SegmentFn<Kernel>, ::anyaccel::op::kNumCombos> segment_table() {
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

// Stores `v` into the model copy, or nothing when the combination has none (C is void).
template <typename C, typename V>
inline void store_copy(void* copy, int64_t i, const V& v) {
  if constexpr (!std::is_void_v<C>) v.store(static_cast<C*>(copy) + i);
}

// Splits the plan's elements into one aligned range per worker and calls `segment(t, begin, count)` for
// each piece of tensor t (begin relative to tensor t). `segment` runs concurrently on disjoint ranges and
// must not throw.
template <typename Segment>
void parallel_segments(const std::vector<int64_t>& numel, int64_t total, const Segment& segment) {
  if (total == 0) return;
  const size_t n = numel.size();
  std::vector<int64_t> offsets(n + 1, 0);
  for (size_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + numel[i];
  uint32_t max_threads = 1;
  TORCH_ERROR_CODE_CHECK(torch_get_num_threads(&max_threads));
  const int64_t workers = std::max<int64_t>(
      1, std::min<int64_t>(static_cast<int64_t>(max_threads), (total + kGrainElements - 1) / kGrainElements));
  const int64_t per_worker = ((total + workers - 1) / workers + kAlignElements - 1) / kAlignElements * kAlignElements;
  auto run_range = [&](int64_t w) {
    const int64_t begin = std::min(total, w * per_worker);
    const int64_t end = std::min(total, begin + per_worker);
    if (begin >= end) return;
    // The tensor holding element `begin`: the last t with offsets[t] <= begin (skips empty tensors).
    size_t t = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin()) - 1;
    for (int64_t pos = begin; pos < end && t < n; ++t) {
      const int64_t seg_end = std::min(end, offsets[t + 1]);
      if (seg_end > pos) {
        segment(t, pos - offsets[t], seg_end - pos);
        pos = seg_end;
      }
    }
  };
  if (workers == 1) {
    run_range(0);
    return;
  }
  using RunRange = decltype(run_range);
  auto callback = [](int64_t b, int64_t e, void* ctx) {
    const RunRange& f = *static_cast<const RunRange*>(ctx);
    for (int64_t w = b; w < e; ++w) f(w);
  };
  TORCH_ERROR_CODE_CHECK(torch_parallel_for(0, workers, 1, callback, const_cast<void*>(static_cast<const void*>(&run_range))));
}

// Validates a host optimizer step (checks::check_optimizer_lists, CPU rules) and runs Kernel over it.
template <typename Kernel, size_t kStates>
void run_step(const char* op, const stable::TensorList& params, const stable::TensorList& grads,
              const std::array<const stable::TensorList*, kStates>& states,
              const std::array<const char*, kStates>& state_names, const stable::TensorList& copies,
              const char* device_alternative, const typename Kernel::Consts& consts) {
  static_assert(kStates >= 1 && kStates <= 2, "host optimizers have one or two state lists");
  const auto plan = checks::check_optimizer_lists(op, params, grads, states, state_names, copies,
                                                  ::anyaccel::op::kAcceptedCombos, aoti_torch_device_type_cpu(),
                                                  device_alternative);
  static const auto table = segment_table<Kernel>();
  const bool has_copy = !plan.copies.empty();
  parallel_segments(plan.numel, plan.total, [&](size_t t, int64_t begin, int64_t n) {
    const SegmentPtrs ptrs{plan.params[t], plan.grads[t], plan.states[0][t], kStates > 1 ? plan.states[kStates - 1][t] : nullptr,
                           has_copy ? plan.copies[t] : nullptr};
    table[plan.combo[t]](ptrs, begin, n, consts);
  });
}

// The ISA level compiled in ("avx512", "avx2", "neon" or "portable"), the `isa() -> str` op of every host
// optimizer.
inline std::string isa() { return simd::kIsaName; }

}  // namespace host
}  // namespace anyaccel
