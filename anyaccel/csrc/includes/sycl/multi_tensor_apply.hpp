// Multi-tensor apply for element-wise optimizer steps on Intel GPUs (SYCL): one kernel submission
// updates every tensor of a parameter group. The SYCL counterpart of includes/cuda/multi_tensor_apply.cuh,
// with the same table layout, dtype combinations, argument checks and error messages.
//
// Layout of the work. Each tensor is cut into chunks of kChunk elements. The host writes one row of
// kRowWords int64 words per tensor into a pinned buffer and copies it to the device asynchronously on
// the current XPU stream (64 bytes per tensor per step, independent of tensor sizes):
//
//   row t: [param, grad, state0, state1, model_copy, numel, first_chunk, unused]
//
// The nd-range is persistent (at most kGroupsPerUnit work-groups per compute unit, at most one per
// chunk); work-group w handles chunks w, w + num_groups, ... and finds the tensor of a chunk by binary
// search over first_chunk. Inside a chunk, work-item i touches elements i, i + kGroup, ... so that
// neighbouring work-items access neighbouring addresses.
//
// The chunking of many tensors into one launch follows NVIDIA Apex's multi_tensor_apply
// (apex/csrc/multi_tensor_apply.cuh); the SYCL API is the SYCL 2020 specification
// (https://registry.khronos.org/SYCL/specs/sycl-2020/html/sycl-2020.html), the stream is torch's
// c10::xpu::XPUStream (c10/xpu/XPUStream.h).
#pragma once

#include <sycl/sycl.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <c10/xpu/XPUStream.h>

namespace anyaccel {
namespace mta {

#ifndef ANYACCEL_MTA_GROUP
#define ANYACCEL_MTA_GROUP 256
#endif
#ifndef ANYACCEL_MTA_CHUNK
#define ANYACCEL_MTA_CHUNK 16384
#endif

constexpr int kGroup = ANYACCEL_MTA_GROUP;     // work-items per work-group
constexpr int64_t kChunk = ANYACCEL_MTA_CHUNK;  // elements per chunk
constexpr int kRowWords = 8;                    // int64 words per tensor row of the table
constexpr int kMaxStates = 2;                   // optimizer state tensors per parameter (Adam: m, v; Lion: m)
constexpr int64_t kGroupsPerUnit = 8;           // resident work-groups per compute unit aimed at

static_assert(kChunk % kGroup == 0, "a chunk must hold whole work-group iterations");

using bf16 = sycl::ext::oneapi::bfloat16;
using half = sycl::half;

// fp32 <-> storage type. Both 16-bit types convert from float rounding to nearest even.
template <typename T>
inline float to_float(T x) { return static_cast<float>(x); }
template <typename T>
inline T from_float(float x) { return T(x); }

// Applies `op` to every element of every tensor in `table`.
//   P: parameter type (float/bf16/half); G: gradient type; S: optimizer-state type; O: model-copy type
//   (ignored unless HAS_COPY); NS: number of state tensors (1 or 2). Op provides
//   `void operator()(float& p, float g, float* s) const` updating p and s[0..NS) in place; all arithmetic
//   is fp32 and 16-bit values are rounded once, when stored.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
struct MultiTensorKernel {
  const int64_t* table;
  int num_tensors;
  int64_t num_chunks;
  Op op;

  void operator()(sycl::nd_item<1> item) const {
    const int64_t groups = static_cast<int64_t>(item.get_group_range(0));
    const int64_t lid = static_cast<int64_t>(item.get_local_id(0));
    for (int64_t c = static_cast<int64_t>(item.get_group(0)); c < num_chunks; c += groups) {
      // Find the tensor t with row[t].first_chunk <= c < row[t+1].first_chunk.
      int lo = 0, hi = num_tensors - 1;
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (table[mid * kRowWords + 6] <= c) lo = mid; else hi = mid - 1;
      }
      const int64_t* row = table + lo * kRowWords;
      P* p = reinterpret_cast<P*>(row[0]);
      const G* g = reinterpret_cast<const G*>(row[1]);
      S* s0 = reinterpret_cast<S*>(row[2]);
      S* s1 = reinterpret_cast<S*>(row[3]);
      O* out = reinterpret_cast<O*>(row[4]);
      const int64_t n = row[5];
      const int64_t start = (c - row[6]) * kChunk;
      const int64_t end = start + kChunk < n ? start + kChunk : n;
      for (int64_t i = start + lid; i < end; i += kGroup) {
        float pe = to_float(p[i]);
        float s[kMaxStates] = {to_float(s0[i]), NS > 1 ? to_float(s1[i]) : 0.f};
        op(pe, to_float(g[i]), s);
        p[i] = from_float<P>(pe);
        s0[i] = from_float<S>(s[0]);
        if constexpr (NS > 1) s1[i] = from_float<S>(s[1]);
        if constexpr (HAS_COPY) out[i] = from_float<O>(pe);
      }
    }
  }
};

// ---- host side ---------------------------------------------------------------------------------

// The tensors of one optimizer step, as the op received them.
struct TensorLists {
  at::TensorList params, grads;
  std::vector<at::TensorList> states;  // NS lists
  at::TensorList copies;               // empty, or one model copy per parameter
  const char* op_name;
};

inline std::string where(const char* list, size_t i) {
  return std::string(list) + "[" + std::to_string(i) + "]";
}

// Python ValueError / TypeError, messages built by concatenation (as in the CUDA header).
[[noreturn]] inline void value_error(const std::string& msg) {
  throw c10::ValueError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}
[[noreturn]] inline void type_error(const std::string& msg) {
  throw c10::TypeError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}

inline std::string dtype_name(c10::ScalarType t) {
  return t == c10::ScalarType::Undefined ? std::string("none") : std::string(c10::toString(t));
}

// Checks one tensor of a list against its parameter `ref` (the parameter itself for the params list).
inline void check_tensor(const at::Tensor& t, const char* list, size_t i, const at::Tensor& ref,
                         c10::ScalarType dtype, const char* op) {
  const std::string op_s(op);
  if (!t.defined()) value_error(op_s + ": " + where(list, i) + " is undefined (None); pass a tensor");
  if (t.device() != ref.device()) {
    value_error(op_s + ": " + where(list, i) + " is on " + t.device().str() + " but params[" + std::to_string(i) +
                "] is on " + ref.device().str() + "; move every tensor of a step to one XPU device");
  }
  if (t.scalar_type() != dtype) {
    type_error(op_s + ": " + where(list, i) + " has dtype " + dtype_name(t.scalar_type()) + ", expected " +
               dtype_name(dtype) + "; every tensor of one list must share a dtype (the Python front end "
               "groups parameters by dtype)");
  }
  if (t.numel() != ref.numel()) {
    value_error(op_s + ": " + where(list, i) + " has " + std::to_string(t.numel()) + " elements but params[" +
                std::to_string(i) + "] has " + std::to_string(ref.numel()) + "; shapes must match");
  }
  if (!t.is_contiguous()) {
    value_error(op_s + ": " + where(list, i) + " is not contiguous; call .contiguous() on it (the kernel walks "
                "memory linearly)");
  }
}

// Validates `lists` (counts, devices, dtypes, element counts, contiguity) and builds the device table.
// Returns the table on the params' device and sets *num_chunks. Side effect: one pinned host allocation
// and one asynchronous host-to-device copy on the current XPU stream.
inline at::Tensor build_table(const TensorLists& lists, int64_t* num_chunks) {
  const size_t n = lists.params.size();
  const char* op = lists.op_name;
  const std::string op_s(op);
  const std::string count = std::to_string(n);
  if (n == 0) value_error(op_s + ": params is empty; pass at least one tensor");
  if (lists.grads.size() != n) {
    value_error(op_s + ": got " + count + " params but " + std::to_string(lists.grads.size()) +
                " grads; pass one gradient per parameter");
  }
  static const char* kStateNames[kMaxStates] = {"exp_avgs", "exp_avg_sqs"};
  for (size_t s = 0; s < lists.states.size(); ++s) {
    if (lists.states[s].size() != n) {
      value_error(op_s + ": got " + count + " params but " + std::to_string(lists.states[s].size()) + " " +
                  kStateNames[s] + "; pass one state tensor per parameter");
    }
  }
  const bool has_copy = !lists.copies.empty();
  if (has_copy && lists.copies.size() != n) {
    value_error(op_s + ": got " + count + " params but " + std::to_string(lists.copies.size()) +
                " model_copies; pass none or one per parameter");
  }

  const at::Tensor& p0 = lists.params[0];
  const auto pdt = p0.scalar_type();
  const auto gdt = lists.grads[0].defined() ? lists.grads[0].scalar_type() : pdt;
  const auto odt = has_copy && lists.copies[0].defined() ? lists.copies[0].scalar_type() : pdt;
  const auto sdt = !lists.states.empty() && !lists.states[0].empty() && lists.states[0][0].defined()
                       ? lists.states[0][0].scalar_type()
                       : at::kFloat;

  at::Tensor host = at::empty({static_cast<int64_t>(n) * kRowWords},
                              at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  int64_t* row = host.data_ptr<int64_t>();
  int64_t chunks = 0;
  for (size_t i = 0; i < n; ++i, row += kRowWords) {
    const at::Tensor& p = lists.params[i];
    check_tensor(p, "params", i, p.defined() ? p : p0, pdt, op);
    if (p.device() != p0.device()) {
      value_error(op_s + ": params[" + std::to_string(i) + "] is on " + p.device().str() + " but params[0] is on " +
                  p0.device().str() + "; move every tensor of a step to one XPU device");
    }
    check_tensor(lists.grads[i], "grads", i, p, gdt, op);
    void* sp[kMaxStates] = {nullptr, nullptr};
    for (size_t s = 0; s < lists.states.size(); ++s) {
      const at::Tensor& st = lists.states[s][i];
      check_tensor(st, kStateNames[s], i, p, sdt, op);
      sp[s] = st.data_ptr();
    }
    void* cp = nullptr;
    if (has_copy) {
      check_tensor(lists.copies[i], "model_copies", i, p, odt, op);
      cp = lists.copies[i].data_ptr();
    }
    const int64_t numel = p.numel();
    row[0] = reinterpret_cast<int64_t>(p.data_ptr());
    row[1] = reinterpret_cast<int64_t>(lists.grads[i].data_ptr());
    row[2] = reinterpret_cast<int64_t>(sp[0]);
    row[3] = reinterpret_cast<int64_t>(sp[1]);
    row[4] = reinterpret_cast<int64_t>(cp);
    row[5] = numel;
    row[6] = chunks;
    row[7] = 0;
    chunks += (numel + kChunk - 1) / kChunk;
  }
  *num_chunks = chunks;
  at::Tensor dev = at::empty({host.numel()}, at::TensorOptions().dtype(at::kLong).device(p0.device()));
  dev.copy_(host, /*non_blocking=*/true);
  return dev;
}

// Submits one instantiation to the current XPU stream's queue with a persistent nd-range.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
void launch(const at::Tensor& table, int num_tensors, int64_t num_chunks, const Op& op) {
  if (num_chunks == 0) return;  // every tensor is empty
  sycl::queue& queue = c10::xpu::getCurrentXPUStream().queue();
  const int64_t units = queue.get_device().get_info<sycl::info::device::max_compute_units>();
  const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(num_chunks, units * kGroupsPerUnit));
  MultiTensorKernel<P, G, S, O, NS, HAS_COPY, Op> kernel{table.data_ptr<int64_t>(), num_tensors, num_chunks, op};
  queue.parallel_for(sycl::nd_range<1>(sycl::range<1>(static_cast<size_t>(groups) * kGroup), sycl::range<1>(kGroup)),
                     kernel);
}

// One supported (param, grad, state, copy) dtype combination and its launcher (data, as in CUDA).
template <class Op>
struct Variant {
  c10::ScalarType param, grad, state, copy;  // copy == Undefined: no model copy
  void (*fn)(const at::Tensor&, int, int64_t, const Op&);
};

template <class Op, size_t N>
void dispatch(const Variant<Op> (&variants)[N], const TensorLists& lists, const Op& op) {
  const std::string op_s(lists.op_name);
  if (lists.params.empty()) value_error(op_s + ": params is empty; pass at least one tensor");
  const at::Tensor& p0 = lists.params[0];
  if (!p0.defined() || !p0.is_xpu()) {
    value_error(op_s + ": params[0] must be an XPU tensor, got " + (p0.defined() ? p0.device().str() : "None"));
  }
  const c10::DeviceGuard guard(p0.device());
  int64_t num_chunks = 0;
  at::Tensor table = build_table(lists, &num_chunks);
  const auto pdt = p0.scalar_type();
  const auto gdt = lists.grads[0].scalar_type();
  const auto cdt = lists.copies.empty() ? c10::ScalarType::Undefined : lists.copies[0].scalar_type();
  const auto sdt = lists.states[0][0].scalar_type();
  std::string accepted;
  for (const auto& v : variants) {
    if (v.param == pdt && v.grad == gdt && v.state == sdt && v.copy == cdt) {
      v.fn(table, static_cast<int>(lists.params.size()), num_chunks, op);
      return;
    }
    accepted += " (" + dtype_name(v.param) + ", " + dtype_name(v.grad) + ", " + dtype_name(v.state) + ", " +
                dtype_name(v.copy) + ")";
  }
  type_error(op_s + ": unsupported dtypes (params, grads, state, model_copies) = (" + dtype_name(pdt) + ", " +
             dtype_name(gdt) + ", " + dtype_name(sdt) + ", " + dtype_name(cdt) + "); accepted:" + accepted +
             ". Optimizer state is float32, or the parameters' 16-bit dtype when there are no model copies.");
}

// The dtype combinations, the same as the CUDA ops': parameters and gradients of one dtype with fp32
// state, or (16-bit parameters) state in the parameters' dtype; or fp32 master parameters with fp32 or
// 16-bit gradients and fp32 state, writing a bf16/fp16 model copy in the same pass.
#define ANYACCEL_SYCL_MTA_V(OP, NS, P, G, S, O, HAS_COPY, PT, GT, ST, OT)          \
  {c10::ScalarType::P, c10::ScalarType::G, c10::ScalarType::S, c10::ScalarType::O, \
   &::anyaccel::mta::launch<PT, GT, ST, OT, NS, HAS_COPY, OP>}
#define ANYACCEL_SYCL_MTA_VARIANTS(OP, NS)                                                                   \
  ANYACCEL_SYCL_MTA_V(OP, NS, Float, Float, Float, Undefined, false, float, float, float, float),              \
  ANYACCEL_SYCL_MTA_V(OP, NS, BFloat16, BFloat16, Float, Undefined, false, ::anyaccel::mta::bf16,              \
                      ::anyaccel::mta::bf16, float, float),                                                    \
  ANYACCEL_SYCL_MTA_V(OP, NS, Half, Half, Float, Undefined, false, ::anyaccel::mta::half,                      \
                      ::anyaccel::mta::half, float, float),                                                    \
  ANYACCEL_SYCL_MTA_V(OP, NS, BFloat16, BFloat16, BFloat16, Undefined, false, ::anyaccel::mta::bf16,           \
                      ::anyaccel::mta::bf16, ::anyaccel::mta::bf16, float),                                    \
  ANYACCEL_SYCL_MTA_V(OP, NS, Half, Half, Half, Undefined, false, ::anyaccel::mta::half,                       \
                      ::anyaccel::mta::half, ::anyaccel::mta::half, float),                                    \
  ANYACCEL_SYCL_MTA_V(OP, NS, Float, Float, Float, BFloat16, true, float, float, float, ::anyaccel::mta::bf16), \
  ANYACCEL_SYCL_MTA_V(OP, NS, Float, Float, Float, Half, true, float, float, float, ::anyaccel::mta::half),     \
  ANYACCEL_SYCL_MTA_V(OP, NS, Float, BFloat16, Float, BFloat16, true, float, ::anyaccel::mta::bf16, float,     \
                      ::anyaccel::mta::bf16),                                                                  \
  ANYACCEL_SYCL_MTA_V(OP, NS, Float, Half, Float, Half, true, float, ::anyaccel::mta::half, float,             \
                      ::anyaccel::mta::half)

}  // namespace mta
}  // namespace anyaccel
