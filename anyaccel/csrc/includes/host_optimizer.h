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

// How a step's elements are split among workers: elements [0, total) of the concatenation of all tensors,
// one aligned range per worker, at most ceil(total / kGrainElements) workers and torch's thread count.
class WorkSplit {
 public:
  WorkSplit(const std::vector<int64_t>& numel, int64_t total) : total_(total), offsets_(numel.size() + 1, 0) {
    for (size_t i = 0; i < numel.size(); ++i) offsets_[i + 1] = offsets_[i] + numel[i];
    uint32_t max_threads = 1;
    TORCH_ERROR_CODE_CHECK(torch_get_num_threads(&max_threads));
    workers_ = std::max<int64_t>(
        1, std::min<int64_t>(static_cast<int64_t>(max_threads), (total + kGrainElements - 1) / kGrainElements));
    per_worker_ = ((total + workers_ - 1) / workers_ + kAlignElements - 1) / kAlignElements * kAlignElements;
  }

  int64_t workers() const { return workers_; }

  // Calls `piece(t, begin, count)` for each piece of tensor t in worker w's range (begin relative to t).
  template <typename Piece>
  void pieces(int64_t w, const Piece& piece) const {
    const size_t n = offsets_.size() - 1;
    const int64_t begin = std::min(total_, w * per_worker_);
    const int64_t end = std::min(total_, begin + per_worker_);
    if (begin >= end) return;
    // The tensor holding element `begin`: the last t with offsets[t] <= begin (skips empty tensors).
    size_t t = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin()) - 1;
    for (int64_t pos = begin; pos < end && t < n; ++t) {
      const int64_t seg_end = std::min(end, offsets_[t + 1]);
      if (seg_end > pos) {
        piece(t, pos - offsets_[t], seg_end - pos);
        pos = seg_end;
      }
    }
  }

  // Runs `work(w)` for every worker on torch's intra-op pool (inline when there is one). `work` runs
  // concurrently for different w and must not throw.
  template <typename Work>
  void run(const Work& work) const {
    if (total_ == 0) return;
    if (workers_ == 1) {
      work(0);
      return;
    }
    auto callback = [](int64_t b, int64_t e, void* ctx) {
      const Work& f = *static_cast<const Work*>(ctx);
      for (int64_t w = b; w < e; ++w) f(w);
    };
    TORCH_ERROR_CODE_CHECK(
        torch_parallel_for(0, workers_, 1, callback, const_cast<void*>(static_cast<const void*>(&work))));
  }

 private:
  int64_t total_;
  std::vector<int64_t> offsets_;
  int64_t workers_ = 1;
  int64_t per_worker_ = 0;
};

// Splits the plan's elements among workers and calls `segment(t, begin, count)` for each piece of tensor t.
template <typename Segment>
void parallel_segments(const std::vector<int64_t>& numel, int64_t total, const Segment& segment) {
  const WorkSplit split(numel, total);
  split.run([&](int64_t w) { split.pieces(w, segment); });
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

// The ISA level compiled in ("avx512", "avx2", "sve", "neon" or "portable"): the `isa() -> str` op of every host
// optimizer, defined by each op's kernel unit (where simd.h is compiled).
std::string isa();

}  // namespace host
}  // namespace anyaccel
