// What anyaccel's host (CPU) optimizer ops share: validation, the dtype table, the threading scheme and
// the registration glue. Each kernel file (csrc/adam/cpu_adam.cpp, csrc/lion/cpu_lion.cpp) keeps only its
// math, its schema and its registration; everything here is parameterised by
//
//   * `OpText`: the op's name and the words its messages use (every message keeps its exact text; the
//     Python tests match them with regular expressions);
//   * `kStates`: how many optimizer-state lists the op takes (Adam: exp_avgs and exp_avg_sqs; Lion:
//     exp_avgs), all with the params' shapes and one dtype;
//   * `Kernel`: a struct whose `template <typename P, typename S> static void segment(...)` updates one
//     range of one tensor, for param/grad storage P and state storage S (its signature is the kernel's).
//
// Threading: one OpenMP parallel region over the concatenation of all tensors, split into equal ranges
// (aligned to kAlignElements elements) that cross tensor boundaries, so 200 small tensors balance as well
// as one big one. The thread count is at::get_num_threads(), reduced so that each thread gets at least
// kGrainElements elements. (The same aim as the multi-tensor apply of NVIDIA apex and DeepSpeed,
// csrc/includes/multi_tensor_apply.cuh: many tensors, one launch; here with host threads.)
//
// Including this header also defines ANYACCEL_TORCH_LIBRARY / ANYACCEL_TORCH_LIBRARY_IMPL (the namespace
// macro indirection) and ANYACCEL_HOST_KERNEL_IMPLS (one kernel for the dense and sparse CPU keys).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "simd.h"

#ifndef ANYACCEL_OP_NAMESPACE
#error "ANYACCEL_OP_NAMESPACE must be defined by the op builder (-DANYACCEL_OP_NAMESPACE=<ns>)"
#endif

// TORCH_LIBRARY pastes and stringifies its namespace argument, which would not expand a macro; one
// level of indirection makes the preprocessor expand ANYACCEL_OP_NAMESPACE first.
#define ANYACCEL_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define ANYACCEL_TORCH_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

// Registers `fn` as the kernel of op `name` (a string literal) for CPU, SparseCPU and SparseCsrCPU.
//
// A sparse gradient makes the dispatcher pick a sparse backend key; without a kernel there, torch would
// answer with a generic "could not run ... with arguments from the 'SparseCPU' backend". Registering the
// same (validating) function lets check_tensor name the tensor and the fix instead. It never computes on a
// sparse tensor: validation rejects every non-strided layout before anything is read or written.
#define ANYACCEL_HOST_KERNEL_IMPLS(name, fn)                             \
  ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, CPU, m) {           \
    m.impl(name, fn);                                                    \
  }                                                                      \
  ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, SparseCPU, m) {     \
    m.impl(name, fn);                                                    \
  }                                                                      \
  ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, SparseCsrCPU, m) {  \
    m.impl(name, fn);                                                    \
  }

namespace anyaccel {
namespace host {

// The words an op's messages use. Every member is a string literal with static storage.
struct OpText {
  const char* op;               // the op's name, the prefix of every message: "adam_step"
  const char* kernel;           // "CPU Adam", as in "the CPU Adam kernel accepts CPU tensors only"
  const char* fused;            // the accelerator optimizer to point to: "FusedAdam"
  const char* accepted_combos;  // the accepted dtype combinations, appended to every dtype message
  const char* state_dtype_rule; // why all state lists share one dtype (only used with two or more)
};

// Minimum elements per thread before another thread is worth waking (about 64 KiB of fp32 params).
constexpr int64_t kGrainElements = 1 << 14;
// Thread ranges start on multiples of this many elements (a 64-byte line of 16 fp32 lanes, times 4).
constexpr int64_t kAlignElements = 64;

// One accepted (param dtype, state dtype) combination and the segment function serving it; grads always
// have the param dtype.
template <typename SegmentFn>
struct DtypeCombo {
  c10::ScalarType param;
  c10::ScalarType state;
  SegmentFn fn;
};

// The accepted combinations, the same for every host optimizer: fp32/fp32, bf16 or fp16 params with fp32
// state, and bf16 or fp16 params with state in the param dtype.
template <typename Kernel>
constexpr std::array<DtypeCombo<typename Kernel::SegmentFn>, 5> dtype_combos() {
  return {{
      {c10::ScalarType::Float, c10::ScalarType::Float, &Kernel::template segment<float, float>},
      {c10::ScalarType::BFloat16, c10::ScalarType::Float, &Kernel::template segment<c10::BFloat16, float>},
      {c10::ScalarType::Half, c10::ScalarType::Float, &Kernel::template segment<c10::Half, float>},
      {c10::ScalarType::BFloat16, c10::ScalarType::BFloat16,
       &Kernel::template segment<c10::BFloat16, c10::BFloat16>},
      {c10::ScalarType::Half, c10::ScalarType::Half, &Kernel::template segment<c10::Half, c10::Half>},
  }};
}

// The segment function for (param, state), or nullptr when the combination is not accepted.
template <typename SegmentFn, size_t kCombos>
SegmentFn find_segment_fn(const std::array<DtypeCombo<SegmentFn>, kCombos>& combos, c10::ScalarType param,
                          c10::ScalarType state) {
  for (const DtypeCombo<SegmentFn>& combo : combos) {
    if (combo.param == param && combo.state == state) {
      return combo.fn;
    }
  }
  return nullptr;
}

// Checks that `t` (entry `index` of list `list_name`) is a defined, dense, contiguous CPU tensor with the
// shape of `param`; raises c10::Error (RuntimeError in Python) naming the tensor and the fix otherwise.
inline void check_tensor(const OpText& text, const at::Tensor& t, const char* list_name, size_t index,
                         const at::Tensor& param) {
  TORCH_CHECK(t.defined(), text.op, ": ", list_name, "[", index,
              "] is an undefined tensor; every entry must be a defined tensor");
  TORCH_CHECK(t.device().is_cpu(), text.op, ": ", list_name, "[", index, "] is on device ", t.device(),
              "; the ", text.kernel, " kernel accepts CPU tensors only (use ", text.fused,
              " for accelerator tensors, or move the tensor to the CPU)");
  TORCH_CHECK(t.layout() == c10::kStrided, text.op, ": ", list_name, "[", index, "] has layout ",
              t.layout(), "; only dense (strided) tensors are accepted, sparse gradients are not supported");
  TORCH_CHECK(t.is_contiguous(), text.op, ": ", list_name, "[", index, "] is not contiguous (sizes ",
              t.sizes(), ", strides ", t.strides(),
              "); pass contiguous tensors (the kernel updates tensors in place, so a .contiguous() copy of a "
              "parameter or state would not be updated)");
  TORCH_CHECK(t.sizes() == param.sizes(), text.op, ": ", list_name, "[", index, "] has shape ", t.sizes(),
              " but params[", index, "] has shape ", param.sizes(), "; they must have the same shape");
}

// Raises c10::Error "<op>: <name>=<value> is invalid; accepted: <accepted>" unless `value` is finite and
// `ok` (the caller's range test) holds.
inline void check_hyper(const OpText& text, const char* name, double value, bool ok, const char* accepted) {
  TORCH_CHECK(std::isfinite(value) && ok, text.op, ": ", name, "=", value, " is invalid; accepted: ",
              accepted);
}

// "<op>: got 3 params, 3 grads and 2 exp_avgs; the three lists must have one entry per parameter".
template <size_t kStates>
std::string list_length_message(const OpText& text, size_t n, size_t num_grads,
                                const std::array<at::TensorList, kStates>& states,
                                const std::array<const char*, kStates>& state_names) {
  static constexpr std::array<const char*, 6> kCountWords = {"zero", "one", "two", "three", "four", "five"};
  static_assert(kStates >= 1 && kStates + 2 < kCountWords.size(), "kStates must be 1 to 3");
  std::ostringstream out;
  out << text.op << ": got " << n << " params, " << num_grads << " grads";
  for (size_t k = 0; k < kStates; ++k) {
    out << (k + 1 == kStates ? " and " : ", ") << states[k].size() << " " << state_names[k];
  }
  out << "; the " << kCountWords[kStates + 2] << " lists must have one entry per parameter";
  return out.str();
}

// Checks that grads and every state list have one entry per parameter; raises c10::Error otherwise.
template <size_t kStates>
void check_list_lengths(const OpText& text, at::TensorList params, at::TensorList grads,
                        const std::array<at::TensorList, kStates>& states,
                        const std::array<const char*, kStates>& state_names) {
  const size_t n = params.size();
  bool ok = grads.size() == n;
  for (const at::TensorList& list : states) {
    ok = ok && list.size() == n;
  }
  TORCH_CHECK(ok, list_length_message(text, n, grads.size(), states, state_names));
}

// The validated work of one step: a segment function and raw pointers per tensor, and where each tensor
// starts in the concatenation of all of them (offsets[t], in elements; offsets[n] is the total).
template <typename SegmentFn, size_t kStates>
struct StepPlan {
  std::vector<SegmentFn> fns;
  std::vector<int64_t> offsets;
  std::vector<void*> params;
  std::vector<const void*> grads;
  std::array<std::vector<void*>, kStates> states;

  int64_t total() const { return offsets.back(); }
};

// Validates every tensor (check_tensor on params, grads and each state list, then dtypes: grads in the
// param dtype, all state lists in one dtype, the (param, state) pair in `combos`), in that order per
// tensor, and returns the plan. Raises c10::Error naming the first bad tensor. Pointers are taken only
// when there is at least one element to update (so an all-empty step touches no data pointer).
template <typename SegmentFn, size_t kStates, size_t kCombos>
StepPlan<SegmentFn, kStates> plan_step(const OpText& text, at::TensorList params, at::TensorList grads,
                                       const std::array<at::TensorList, kStates>& states,
                                       const std::array<const char*, kStates>& state_names,
                                       const std::array<DtypeCombo<SegmentFn>, kCombos>& combos) {
  static_assert(kStates >= 1, "a host optimizer has at least one state list");
  const size_t n = params.size();
  StepPlan<SegmentFn, kStates> plan;
  plan.fns.resize(n);
  plan.offsets.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.defined(), text.op, ": params[", i, "] is an undefined tensor");
    check_tensor(text, p, "params", i, p);
    check_tensor(text, grads[i], "grads", i, p);
    for (size_t k = 0; k < kStates; ++k) {
      check_tensor(text, states[k][i], state_names[k], i, p);
    }
    TORCH_CHECK(grads[i].scalar_type() == p.scalar_type(), text.op, ": grads[", i, "] has dtype ",
                grads[i].scalar_type(), " but params[", i, "] has dtype ", p.scalar_type(),
                "; a gradient must have its parameter's dtype. Accepted: ", text.accepted_combos);
    const c10::ScalarType state_dtype = states[0][i].scalar_type();
    for (size_t k = 1; k < kStates; ++k) {
      TORCH_CHECK(states[k][i].scalar_type() == state_dtype, text.op, ": ", state_names[0], "[", i,
                  "] has dtype ", state_dtype, " but ", state_names[k], "[", i, "] has dtype ",
                  states[k][i].scalar_type(), "; ", text.state_dtype_rule, ". Accepted: ", text.accepted_combos);
    }
    plan.fns[i] = find_segment_fn(combos, p.scalar_type(), state_dtype);
    TORCH_CHECK(plan.fns[i] != nullptr, text.op, ": params[", i, "] has dtype ", p.scalar_type(),
                " with optimizer state of dtype ", state_dtype, ", which is not supported. Accepted: ",
                text.accepted_combos);
    plan.offsets[i + 1] = plan.offsets[i] + p.numel();
  }
  if (plan.total() == 0) {
    return plan;
  }
  plan.params.resize(n);
  plan.grads.resize(n);
  for (std::vector<void*>& list : plan.states) {
    list.resize(n);
  }
  for (size_t i = 0; i < n; ++i) {
    plan.params[i] = params[i].data_ptr();
    plan.grads[i] = grads[i].const_data_ptr();
    for (size_t k = 0; k < kStates; ++k) {
      plan.states[k][i] = states[k][i].data_ptr();
    }
  }
  return plan;
}

// Splits elements [0, offsets.back()) into one aligned range per OpenMP thread and calls
// `segment(t, begin, count)` for each piece of tensor t in the thread's range (begin is relative to tensor
// t). Uses at most ceil(total / kGrainElements) threads (one for a small step); returns at once when the
// work is empty. `segment` is called concurrently on disjoint ranges and must not throw.
template <typename Segment>
void parallel_segments(const std::vector<int64_t>& offsets, const Segment& segment) {
  const size_t n = offsets.size() - 1;
  const int64_t total = offsets.back();
  if (total == 0) {
    return;
  }
  const int64_t max_threads = std::max<int64_t>(1, at::get_num_threads());
  const int64_t num_threads =
      std::max<int64_t>(1, std::min<int64_t>(max_threads, (total + kGrainElements - 1) / kGrainElements));

#pragma omp parallel num_threads(static_cast<int>(num_threads))
  {
    const int64_t tid = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
    const int64_t per_thread = ((total + nt - 1) / nt + kAlignElements - 1) / kAlignElements * kAlignElements;
    const int64_t begin = std::min(total, tid * per_thread);
    const int64_t end = std::min(total, begin + per_thread);
    if (begin < end) {
      // The tensor holding element `begin`: the last t with offsets[t] <= begin (skips empty tensors).
      size_t t = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), begin) - offsets.begin()) - 1;
      for (int64_t pos = begin; pos < end && t < n; ++t) {
        const int64_t seg_end = std::min(end, offsets[t + 1]);
        if (seg_end > pos) {
          segment(t, pos - offsets[t], seg_end - pos);
          pos = seg_end;
        }
      }
    }
  }
}

// The ISA level compiled in ("avx512", "avx2", "neon" or "portable"), the `isa() -> str` op of every host
// optimizer.
inline std::string isa() { return simd::kIsaName; }

}  // namespace host
}  // namespace anyaccel
