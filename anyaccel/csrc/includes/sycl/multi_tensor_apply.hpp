// Multi-tensor apply for element-wise optimizer steps on Intel GPUs (SYCL): one kernel submission
// updates every tensor of a parameter group. The SYCL counterpart of includes/cuda/multi_tensor_apply.cuh,
// with the same table layout, dtype combinations (the op spec's, through the generated anyaccel_op.h),
// argument checks (checks::check_optimizer_lists) and error messages, on torch's stable ABI.
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
// (https://registry.khronos.org/SYCL/specs/sycl-2020/html/sycl-2020.html); the queue is torch's current
// XPU stream's, reached through the stable shim (aoti_torch_get_current_sycl_queue, looked up in the
// libtorch_xpu.so torch has loaded).
//
// Where the kernels run is chosen at compile time, the source being the same:
//   - the default (an XPU build, what an XPU user's build compiles): the ops register for torch's XPU
//     dispatch key, take XPU tensors and submit to torch's current XPU queue, asynchronously;
//   - ANYACCEL_SYCL_HOST_DEVICE=1 (a host-device build): the ops register for the CPU dispatch key, take
//     torch CPU tensors and run on the SYCL runtime's CPU device (a queue of our own, waited on before the
//     op returns, as a CPU op must). This is how the SYCL kernels are compiled by a real SYCL compiler and
//     run where no XPU is (Intel's OpenCL CPU device under icpx, AdaptiveCpp's OpenMP backend under acpp).
//     Torch's CPU tensors are plain host allocations, so the device must accept system allocations
//     (sycl::aspect::usm_system_allocations); it is checked.
#pragma once

#include <sycl/sycl.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <array>
#include <cstring>

#include <dlfcn.h>

#ifndef ANYACCEL_SYCL_HOST_DEVICE
#define ANYACCEL_SYCL_HOST_DEVICE 0
#endif
// The dispatch key the .sycl files register their kernels under (see the top of this file).
#if ANYACCEL_SYCL_HOST_DEVICE
#define ANYACCEL_SYCL_DISPATCH_KEY CPU
#else
#define ANYACCEL_SYCL_DISPATCH_KEY XPU
#endif

#include "anyaccel_op.h"  // generated from the op spec: kAcceptedCombos, ANYACCEL_DTYPE_COMBOS, ANYACCEL_IMPL
#include "stable/checks.h"
#include "stable/tensor.h"

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

// bfloat16 is not part of SYCL 2020. DPC++ provides it as the sycl_ext_oneapi_bfloat16 extension (which
// converts with the hardware's instructions where there are some); its feature-test macro is
// SYCL_EXT_ONEAPI_BFLOAT16 in recent DPC++ releases, SYCL_EXT_ONEAPI_BFLOAT16_MATH_FUNCTIONS (same header)
// in older ones. Elsewhere (AdaptiveCpp, or with ANYACCEL_SYCL_PORTABLE_BF16=1) a 16-bit storage type
// with the conversions of c10::BFloat16 (round to nearest even, NaN kept quiet) stands in: the same bits.
#if !defined(ANYACCEL_SYCL_PORTABLE_BF16) && \
    (defined(SYCL_EXT_ONEAPI_BFLOAT16) || defined(SYCL_EXT_ONEAPI_BFLOAT16_MATH_FUNCTIONS))
using bf16 = sycl::ext::oneapi::bfloat16;
#else
struct bf16 {
  uint16_t bits;
  bf16() = default;
  explicit bf16(float x) {
    const uint32_t u = sycl::bit_cast<uint32_t>(x);
    bits = x != x ? uint16_t(0x7fc0) : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  explicit operator float() const { return sycl::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
};
static_assert(sizeof(bf16) == 2, "bf16 must be 16 bits wide");
#endif
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

#if ANYACCEL_SYCL_HOST_DEVICE
// The SYCL runtime's CPU device, one in-order queue per process, made on first use. Its work reads and
// writes torch CPU tensors in place, so the device must accept plain host allocations.
inline sycl::queue& current_queue() {
  static sycl::queue queue = [] {
    sycl::queue q{sycl::cpu_selector_v, sycl::property::queue::in_order{}};
    STD_TORCH_CHECK(q.get_device().has(sycl::aspect::usm_system_allocations),
                    "anyaccel: the SYCL CPU device ", q.get_device().get_info<sycl::info::device::name>(),
                    " does not accept system allocations (sycl::aspect::usm_system_allocations), which a "
                    "host-device build (ANYACCEL_SYCL_HOST_DEVICE=1) needs to work on torch CPU tensors");
    return q;
  }();
  return queue;
}

// The device type of the tensors the ops take.
inline int32_t kernel_device_type() { return aoti_torch_device_type_cpu(); }
#else
// torch's current XPU queue: aoti_torch_get_current_sycl_queue from the libtorch_xpu.so torch has loaded
// (RTLD_NOLOAD: never a second copy), found once. It follows the current device (set by the guard).
inline sycl::queue& current_queue() {
  using Fn = AOTITorchError (*)(void**);
  static const Fn fn = [] {
    void* lib = dlopen("libtorch_xpu.so", RTLD_NOLOAD | RTLD_LAZY);
    return lib == nullptr ? static_cast<Fn>(nullptr)
                          : reinterpret_cast<Fn>(dlsym(lib, "aoti_torch_get_current_sycl_queue"));
  }();
  STD_TORCH_CHECK(fn != nullptr,
                  "anyaccel: torch's XPU library (libtorch_xpu.so) is not loaded or lacks "
                  "aoti_torch_get_current_sycl_queue; an XPU op needs an XPU build of torch");
  void* queue = nullptr;
  TORCH_ERROR_CODE_CHECK(fn(&queue));
  return *static_cast<sycl::queue*>(queue);
}

// The device type of the tensors the ops take.
inline int32_t kernel_device_type() { return aoti_torch_device_type_xpu(); }
#endif

// Makes the host wait for the submitted work in a host-device build (a CPU op returns with its results
// written); an XPU op returns at once, its work ordered on torch's queue.
inline void finish(sycl::queue& queue) {
  if (ANYACCEL_SYCL_HOST_DEVICE) queue.wait_and_throw();
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t index) {
    if (!ANYACCEL_SYCL_HOST_DEVICE) TORCH_ERROR_CODE_CHECK(aoti_torch_create_device_guard(index, &guard_));
  }
  ~DeviceGuard() {
    if (guard_ != nullptr) aoti_torch_delete_device_guard(guard_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  DeviceGuardHandle guard_ = nullptr;
};

// The kernels' copy of `rows`. On an XPU: a device tensor filled from a pinned host tensor, copied
// asynchronously by torch on the current stream (its pinned-memory allocator keeps the host block alive
// until the copy has run). In a host-device build: a CPU tensor, which the CPU device reads in place.
inline stable::Tensor upload_table(const std::vector<int64_t>& rows, int32_t device_index) {
  const int64_t size = static_cast<int64_t>(rows.size());
  const int64_t stride = 1;
  const int32_t i64 = aoti_torch_dtype_int64();
  AtenTensorHandle host = nullptr;
  if (ANYACCEL_SYCL_HOST_DEVICE) {
    TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, &size, &stride, i64, aoti_torch_device_type_cpu(), 0, &host));
  } else {
    TORCH_ERROR_CODE_CHECK(
        aoti_torch_empty_strided_pinned(1, &size, &stride, i64, aoti_torch_device_type_cpu(), 0, &host));
  }
  stable::Tensor host_t(host);
  std::memcpy(host_t.data_ptr(), rows.data(), rows.size() * sizeof(int64_t));
  if (ANYACCEL_SYCL_HOST_DEVICE) return host_t;
  AtenTensorHandle dev = nullptr;
  TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(1, &size, &stride, i64, aoti_torch_device_type_xpu(), device_index, &dev));
  stable::Tensor dev_t(dev);
  TORCH_ERROR_CODE_CHECK(aoti_torch_copy_(dev_t.handle(), host_t.handle(), /*non_blocking=*/1));
  return dev_t;
}

// Submits one instantiation to the current XPU queue with a persistent nd-range.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
void launch(const int64_t* table, int num_tensors, int64_t num_chunks, const Op& op) {
  if (num_chunks == 0) return;  // every tensor is empty
  sycl::queue& queue = current_queue();
  const int64_t units = queue.get_device().get_info<sycl::info::device::max_compute_units>();
  const int64_t groups = std::max<int64_t>(1, std::min<int64_t>(num_chunks, units * kGroupsPerUnit));
  MultiTensorKernel<P, G, S, O, NS, HAS_COPY, Op> kernel{table, num_tensors, num_chunks, op};
  queue.parallel_for(sycl::nd_range<1>(sycl::range<1>(static_cast<size_t>(groups) * kGroup), sycl::range<1>(kGroup)),
                     kernel);
  finish(queue);
}

// Storage types by c10::ScalarType enumerator (Undefined: no model copy).
template <c10::ScalarType T>
struct SyclType;
template <>
struct SyclType<c10::ScalarType::Float> {
  using type = float;
};
template <>
struct SyclType<c10::ScalarType::BFloat16> {
  using type = bf16;
};
template <>
struct SyclType<c10::ScalarType::Half> {
  using type = half;
};
template <>
struct SyclType<c10::ScalarType::Undefined> {
  using type = float;  // unused: HAS_COPY is false
};

template <class Op>
using LaunchFn = void (*)(const int64_t*, int, int64_t, const Op&);

#define ANYACCEL_SYCL_LAUNCHER_(P, G, S, C)                                                                          \
  &::anyaccel::mta::launch<typename SyclType<c10::ScalarType::P>::type, typename SyclType<c10::ScalarType::G>::type, \
                           typename SyclType<c10::ScalarType::S>::type, typename SyclType<c10::ScalarType::C>::type,  \
                           NS, c10::ScalarType::C != c10::ScalarType::Undefined, Op>,

template <int NS, class Op>
std::array<LaunchFn<Op>, ::anyaccel::op::kNumCombos> launchers() {
  return {{ANYACCEL_DTYPE_COMBOS(ANYACCEL_SYCL_LAUNCHER_)}};
}

// The tensors of one dtype combination: their table rows (the layout at the top of this file), the index
// of each in the step's lists, and their chunk count.
struct Group {
  std::vector<int64_t> rows;
  std::vector<int64_t> index;
  int count = 0;
  int64_t chunks = 0;
};

// Splits a validated plan by dtype combination (combinations without elements are left empty).
template <size_t NS>
std::array<Group, ::anyaccel::op::kNumCombos> make_groups(const checks::OptimizerPlan<NS>& plan) {
  std::array<Group, ::anyaccel::op::kNumCombos> groups;
  const bool has_copy = !plan.copies.empty();
  for (size_t i = 0; i < plan.size(); ++i) {
    const int64_t numel = plan.numel[i];
    if (numel == 0) continue;
    Group& g = groups[static_cast<size_t>(plan.combo[i])];
    g.rows.insert(g.rows.end(), {reinterpret_cast<int64_t>(plan.params[i]), reinterpret_cast<int64_t>(plan.grads[i]),
                                 reinterpret_cast<int64_t>(plan.states[0][i]),
                                 reinterpret_cast<int64_t>(NS > 1 ? plan.states[NS - 1][i] : nullptr),
                                 reinterpret_cast<int64_t>(has_copy ? plan.copies[i] : nullptr), numel, g.chunks, 0});
    g.index.push_back(static_cast<int64_t>(i));
    g.chunks += (numel + kChunk - 1) / kChunk;
    ++g.count;
  }
  return groups;
}

// Validates a step (the accelerator rules of checks::check_optimizer_lists) on the tensors of the build's
// device type (kernel_device_type); the plan's device is made current.
template <size_t NS>
checks::OptimizerPlan<NS> check_step(const char* op_name, const stable::TensorList& params,
                                     const stable::TensorList& grads,
                                     const std::array<const stable::TensorList*, NS>& states,
                                     const std::array<const char*, NS>& state_names,
                                     const stable::TensorList& copies) {
  STD_TORCH_CHECK(params.size() > 0, op_name, ": params is empty; pass at least one tensor");
  const int32_t device_type = kernel_device_type();
  STD_TORCH_CHECK(params[0].device_type() == device_type, op_name, ": params[0] is on device ",
                  params[0].device_text(), ANYACCEL_SYCL_HOST_DEVICE
                      ? "; this is a host-device build of the SYCL kernel, which takes CPU tensors"
                      : "; this is the XPU kernel (use the CPU optimizer for host tensors)");
  return checks::check_optimizer_lists(op_name, params, grads, states, state_names, copies,
                                       ::anyaccel::op::kAcceptedCombos, device_type, "the XPU build of this op");
}

// Validates a step, groups its tensors by dtype combination and submits one kernel per group on torch's
// current XPU queue of params[0]'s device (the CPU device's queue in a host-device build).
template <int NS, class Op>
void run_step(const char* op_name, const stable::TensorList& params, const stable::TensorList& grads,
              const std::array<const stable::TensorList*, NS>& states, const std::array<const char*, NS>& state_names,
              const stable::TensorList& copies, const Op& op) {
  const auto plan = check_step<NS>(op_name, params, grads, states, state_names, copies);
  DeviceGuard guard(plan.device_index);
  static const auto table_launchers = launchers<NS, Op>();
  const auto groups = make_groups(plan);
  for (size_t combo = 0; combo < ::anyaccel::op::kNumCombos; ++combo) {
    const Group& g = groups[combo];
    if (g.count == 0) continue;
    const stable::Tensor table = upload_table(g.rows, plan.device_index);
    table_launchers[combo](static_cast<const int64_t*>(table.const_data_ptr()), g.count, g.chunks, op);
  }
}

}  // namespace mta
}  // namespace anyaccel
