// The registration side of anyaccel's host (CPU) optimizer ops: validation, threading and the registration
// glue, on torch's stable ABI. Each op's registration unit (csrc/adam/cpu_adam.cpp, csrc/lion/cpu_lion.cpp)
// keeps only its constants and its registration; its math lives in the kernel unit (host_kernels.h), which
// hands over one segment function per dtype combination (host_segments.h).
//
// Validation is checks::check_optimizer_lists (stable/checks.h), the same rules as the Python fakes; the
// scalar ranges are checked by the generated schema header before the kernel runs.
//
// Threading: elements [0, total) of the concatenation of all tensors are split into equal ranges aligned to
// kAlignElements that cross tensor boundaries, so 200 small tensors balance as well as one big one. The
// ranges run on torch's own intra-op thread pool through the stable ABI (torch_parallel_for, 2.10+), so the
// kernels follow torch.set_num_threads and the process's affinity as torch does, and the op links no
// OpenMP runtime of its own. At most ceil(total / kGrainElements) threads work on one step. (The same aim
// as the multi-tensor apply of NVIDIA apex and DeepSpeed: many tensors, one call.)
#pragma once

#include <torch/csrc/stable/c/shim.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "anyaccel_op.h"  // generated from the op spec: kAcceptedCombos, ANYACCEL_IMPL
#include "host_segments.h"
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

// Validates a host optimizer step (checks::check_optimizer_lists, CPU rules) and runs the kernel unit's
// segment functions over it.
template <typename Consts, size_t kStates>
void run_step(const char* op, const stable::TensorList& params, const stable::TensorList& grads,
              const std::array<const stable::TensorList*, kStates>& states,
              const std::array<const char*, kStates>& state_names, const stable::TensorList& copies,
              const char* device_alternative, const SegmentTable<Consts>& table, const Consts& consts) {
  static_assert(kStates >= 1 && kStates <= 2, "host optimizers have one or two state lists");
  const auto plan = checks::check_optimizer_lists(op, params, grads, states, state_names, copies,
                                                  ::anyaccel::op::kAcceptedCombos, aoti_torch_device_type_cpu(),
                                                  device_alternative);
  const bool has_copy = !plan.copies.empty();
  parallel_segments(plan.numel, plan.total, [&](size_t t, int64_t begin, int64_t n) {
    const SegmentPtrs ptrs{plan.params[t], plan.grads[t], plan.states[0][t],
                           kStates > 1 ? plan.states[kStates - 1][t] : nullptr, has_copy ? plan.copies[t] : nullptr};
    table[plan.combo[t]](ptrs, begin, n, consts);
  });
}

// The ISA level compiled in ("avx512", "avx2", "neon" or "portable"): the `isa() -> str` op of every host
// optimizer, defined by each op's kernel unit (where simd.h is compiled).
std::string isa();

}  // namespace host
}  // namespace anyaccel
