// Multi-tensor apply for element-wise optimizer steps on CUDA: one kernel launch updates every tensor
// of a parameter group.
//
// Layout of the work. Each tensor is cut into chunks of kChunk elements. The host writes one row of
// kRowWords int64 words per tensor into a pinned buffer and copies it to the device asynchronously on
// the current stream (one copy per step, its size is 64 bytes per tensor, independent of tensor sizes):
//
//   row t: [param, grad, state0, state1, model_copy, numel, first_chunk, aligned]
//
// Optimizer state is fp32, or bf16/fp16 like the parameters (torch's fused AdamW keeps it so; 14 bytes
// per element for Adam instead of 22). The accepted (param, grad, state, model copy) combinations are the
// op spec's (ANYACCEL_DTYPE_COMBOS of the generated header); a call may mix them: the tensors are grouped
// by combination and each group is one launch.
//
// Torch is reached only through its stable C ABI (torch/csrc/stable, torch/headeronly): the validation is
// checks::check_optimizer_lists (the rules the Python fakes share), tensors are allocated and copied
// through the shim (aoti_torch_empty_strided_pinned, aoti_torch_copy_), and the current stream is torch's
// (aoti_torch_get_current_cuda_stream, looked up in the already loaded libtorch_cuda.so, so the op links
// no torch CUDA library and one binary serves every torch from the ABI target on).
//
// The grid is persistent (as many blocks as stay resident at once, at most one per chunk); block b
// handles chunks b, b + gridDim.x, ... and finds the tensor of a chunk by binary search over
// first_chunk. Inside a chunk each thread moves kVec elements per iteration with 16-byte loads and
// stores (streaming cache hints: every byte is touched once), when all of the tensor's pointers are
// aligned to kVec elements; a chunk's last (numel % kVec) elements, and tensors that are not aligned,
// go through a scalar path.
//
// The idea of chunking many tensors into one launch follows NVIDIA Apex's multi_tensor_apply
// (apex/csrc/multi_tensor_apply.cuh), which packs pointers into kernel arguments and launches once per
// full argument block; here the table lives in device memory, so the launch count is always one.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if defined(USE_ROCM) && !__has_include(<hip/hip_bf16.h>)
// ROCm (this file hipified by torch.utils.hipify, USE_ROCM from the build) without hip/hip_bf16.h, e.g. the
// ROCm 5.2 of Debian 12: its hip_bfloat16 (hip/hip_bfloat16.h, round-to-nearest-even like
// __float2bfloat16_rn) stands in for __hip_bfloat16, with the two conversions the kernels use.
#include <hip/hip_bfloat16.h>
typedef hip_bfloat16 __hip_bfloat16;
__device__ __forceinline__ float __bfloat162float(hip_bfloat16 x) { return static_cast<float>(x); }
__device__ __forceinline__ hip_bfloat16 __float2bfloat16_rn(float x) { return hip_bfloat16(x); }
#else
#include <cuda_bf16.h>
#endif

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <dlfcn.h>

#include "anyaccel_op.h"  // generated from the op spec: kAcceptedCombos, ANYACCEL_DTYPE_COMBOS, ANYACCEL_IMPL
#include "../stable/checks.h"
#include "../stable/tensor.h"

namespace anyaccel {
namespace mta {

// Tuning knobs, overridable with -D for experiments (benchmarks/gpu_optimizers.py --variants); the
// defaults are the measured best on an H200 (docs/gpu_optimizers.md).
#ifndef ANYACCEL_MTA_THREADS
#define ANYACCEL_MTA_THREADS 256
#endif
#ifndef ANYACCEL_MTA_VEC
#define ANYACCEL_MTA_VEC 4
#endif
#ifndef ANYACCEL_MTA_CHUNK
#define ANYACCEL_MTA_CHUNK 16384
#endif
#ifndef ANYACCEL_MTA_STREAMING
#define ANYACCEL_MTA_STREAMING 1
#endif
#ifndef ANYACCEL_MTA_UNROLL
#define ANYACCEL_MTA_UNROLL 1
#endif
#ifndef ANYACCEL_MTA_MIN_BLOCKS
#define ANYACCEL_MTA_MIN_BLOCKS 1
#endif

constexpr int kThreads = ANYACCEL_MTA_THREADS;   // threads per block
constexpr int kVec = ANYACCEL_MTA_VEC;           // elements per thread per vector access
constexpr int kUnroll = ANYACCEL_MTA_UNROLL;   // vector accesses per array in flight per thread
constexpr int kMinBlocks = ANYACCEL_MTA_MIN_BLOCKS;  // __launch_bounds__ minimum resident blocks per SM
constexpr int64_t kChunk = ANYACCEL_MTA_CHUNK;   // elements per chunk; a multiple of kThreads * kVec
constexpr int kRowWords = 8;          // int64 words per tensor row of the table
constexpr int kMaxStates = 2;         // optimizer state tensors per parameter (Adam: m, v; Lion: m)

static_assert(kChunk % (kThreads * kVec) == 0, "a chunk must hold whole vector iterations");

// ---- scalar conversions ------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// ---- 16-byte vector access ---------------------------------------------------------------------

// The widest load/store word for `Bytes` bytes (at most 16).
template <int Bytes> struct Word;
template <> struct Word<4> { using type = unsigned int; };
template <> struct Word<8> { using type = uint2; };
template <> struct Word<16> { using type = uint4; };

// kVec elements of T as whole words of up to 16 bytes.
template <typename T>
union VecWords {
  static constexpr int kBytes = kVec * sizeof(T);
  static constexpr int kWordBytes = kBytes < 16 ? kBytes : 16;
  using W = typename Word<kWordBytes>::type;
  static constexpr int kWords = kBytes / kWordBytes;
  W w[kWords];
  T e[kVec];
};

// The streaming hints are CUDA's __ldcs/__stcs; HIP declares them only for __half/__half2 (ROCm 5.2's
// amd_hip_fp16.h), so a ROCm build (USE_ROCM) uses plain accesses.
#if defined(USE_ROCM)
#define ANYACCEL_MTA_CACHE_HINTS 0
#else
#define ANYACCEL_MTA_CACHE_HINTS ANYACCEL_MTA_STREAMING
#endif

template <typename W>
__device__ __forceinline__ W load_word(const W* p) {
#if ANYACCEL_MTA_CACHE_HINTS
  return __ldcs(p);
#else
  return *p;
#endif
}

template <typename W>
__device__ __forceinline__ void store_word(W* p, const W& w) {
#if ANYACCEL_MTA_CACHE_HINTS
  __stcs(p, w);
#else
  *p = w;
#endif
}

template <typename T>
__device__ __forceinline__ void load_vec(const T* __restrict__ src, float (&dst)[kVec]) {
  using V = VecWords<T>;
  V u;
  const typename V::W* s = reinterpret_cast<const typename V::W*>(src);
#pragma unroll
  for (int k = 0; k < V::kWords; ++k) u.w[k] = load_word(s + k);
#pragma unroll
  for (int k = 0; k < kVec; ++k) dst[k] = to_float(u.e[k]);
}

template <typename T>
__device__ __forceinline__ void store_vec(T* __restrict__ dst, const float (&src)[kVec]) {
  using V = VecWords<T>;
  V u;
#pragma unroll
  for (int k = 0; k < kVec; ++k) u.e[k] = from_float<T>(src[k]);
  typename V::W* d = reinterpret_cast<typename V::W*>(dst);
#pragma unroll
  for (int k = 0; k < V::kWords; ++k) store_word(d + k, u.w[k]);
}

// ---- the kernel --------------------------------------------------------------------------------

// Applies `op` to every element of every tensor in `table`.
//   P: parameter dtype (fp32/bf16/fp16); G: gradient dtype; S: optimizer-state dtype (fp32, or the
//   parameter's 16-bit dtype); O: model-copy dtype (ignored unless HAS_COPY); NS: number of state
//   tensors (1 or 2). Op provides `__device__ void operator()(float& p, float g, float* s) const`
//   updating p and s[0..NS) in place, and `__device__ void prepare()` run once per thread before it (the
//   capturable ops derive their constants there); all arithmetic is fp32, 16-bit values are rounded to
//   nearest even once, when stored.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    multi_tensor_kernel(const int64_t* __restrict__ table, int num_tensors, int64_t num_chunks, Op given) {
  // The op's per-launch constants, derived on the device where they live there (the capturable variants
  // read the step and the learning rate from device memory: nothing is copied from the host at launch).
  Op op = given;
  op.prepare();
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    // Find the tensor t with row[t].first_chunk <= c < row[t+1].first_chunk.
    int lo = 0, hi = num_tensors - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) >> 1;
      if (table[mid * kRowWords + 6] <= c) lo = mid; else hi = mid - 1;
    }
    const int64_t* row = table + lo * kRowWords;
    P* __restrict__ p = reinterpret_cast<P*>(row[0]);
    const G* __restrict__ g = reinterpret_cast<const G*>(row[1]);
    S* __restrict__ s0 = reinterpret_cast<S*>(row[2]);
    S* __restrict__ s1 = reinterpret_cast<S*>(row[3]);
    O* __restrict__ out = reinterpret_cast<O*>(row[4]);
    const int64_t n = row[5];
    const bool aligned = row[7] != 0;
    const int64_t start = (c - row[6]) * kChunk;
    const int64_t end = start + kChunk < n ? start + kChunk : n;
    const int64_t vec_end = aligned ? start + ((end - start) / kVec) * kVec : start;

    // kUnroll vectors per array per trip, all loads issued before the first use.
    constexpr int64_t kStride = int64_t(kThreads) * kVec;
    int64_t i = start + int64_t(threadIdx.x) * kVec;
    for (; i + (kUnroll - 1) * kStride < vec_end; i += kUnroll * kStride) {
      float pv[kUnroll][kVec], gv[kUnroll][kVec], sv[kUnroll][kMaxStates][kVec];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * kStride;
        load_vec(p + j, pv[u]);
        load_vec(g + j, gv[u]);
        load_vec(s0 + j, sv[u][0]);
        if (NS > 1) load_vec(s1 + j, sv[u][1]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          float s[kMaxStates] = {sv[u][0][k], NS > 1 ? sv[u][1][k] : 0.f};
          op(pv[u][k], gv[u][k], s);
          sv[u][0][k] = s[0];
          if (NS > 1) sv[u][1][k] = s[1];
        }
        const int64_t j = i + u * kStride;
        store_vec(p + j, pv[u]);
        store_vec(s0 + j, sv[u][0]);
        if (NS > 1) store_vec(s1 + j, sv[u][1]);
        if (HAS_COPY) store_vec(out + j, pv[u]);
      }
    }
    for (; i < vec_end; i += kStride) {  // the vectors left over when kUnroll > 1
      float pv[kVec], gv[kVec], sv[kMaxStates][kVec];
      load_vec(p + i, pv);
      load_vec(g + i, gv);
      load_vec(s0 + i, sv[0]);
      if (NS > 1) load_vec(s1 + i, sv[1]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        float s[kMaxStates] = {sv[0][k], NS > 1 ? sv[1][k] : 0.f};
        op(pv[k], gv[k], s);
        sv[0][k] = s[0];
        if (NS > 1) sv[1][k] = s[1];
      }
      store_vec(p + i, pv);
      store_vec(s0 + i, sv[0]);
      if (NS > 1) store_vec(s1 + i, sv[1]);
      if (HAS_COPY) store_vec(out + i, pv);
    }
    for (int64_t i = vec_end + threadIdx.x; i < end; i += kThreads) {
      float pe = to_float(p[i]);
      float s[kMaxStates] = {to_float(s0[i]), NS > 1 ? to_float(s1[i]) : 0.f};
      op(pe, to_float(g[i]), s);
      p[i] = from_float<P>(pe);
      s0[i] = from_float<S>(s[0]);
      if (NS > 1) s1[i] = from_float<S>(s[1]);
      if (HAS_COPY) out[i] = from_float<O>(pe);
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------

[[noreturn]] inline void cuda_fail(const char* what, cudaError_t err) {
  STD_TORCH_CHECK(false, what, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  __builtin_unreachable();
}
#define ANYACCEL_CUDA_CHECK(expr)                                     \
  do {                                                                \
    const cudaError_t anyaccel_err_ = (expr);                         \
    if (anyaccel_err_ != cudaSuccess) ::anyaccel::mta::cuda_fail(#expr, anyaccel_err_); \
  } while (0)

// torch's GPU library: a ROCm build of torch names it libtorch_hip.so (its hipified shim keeps the CUDA names).
#if defined(USE_ROCM)
#define ANYACCEL_TORCH_GPU_LIBRARY "libtorch_hip.so"
#else
#define ANYACCEL_TORCH_GPU_LIBRARY "libtorch_cuda.so"
#endif

// torch's current CUDA stream of `device_index`: aoti_torch_get_current_cuda_stream from the
// ANYACCEL_TORCH_GPU_LIBRARY torch has already loaded (RTLD_NOLOAD: never loads a second copy), found once.
inline cudaStream_t current_stream(int32_t device_index) {
  using Fn = AOTITorchError (*)(int32_t, void**);
  static const Fn fn = [] {
    void* lib = dlopen(ANYACCEL_TORCH_GPU_LIBRARY, RTLD_NOLOAD | RTLD_LAZY);
    return lib == nullptr ? static_cast<Fn>(nullptr)
                          : reinterpret_cast<Fn>(dlsym(lib, "aoti_torch_get_current_cuda_stream"));
  }();
  STD_TORCH_CHECK(fn != nullptr,
                  "anyaccel: torch's GPU library (" ANYACCEL_TORCH_GPU_LIBRARY ") is not loaded or lacks "
                  "aoti_torch_get_current_cuda_stream; a GPU op needs a CUDA or ROCm build of torch");
  void* stream = nullptr;
  TORCH_ERROR_CODE_CHECK(fn(device_index, &stream));
  return static_cast<cudaStream_t>(stream);
}

// Sets the current device for the scope (torch's DeviceGuard through the shim).
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t index) { TORCH_ERROR_CODE_CHECK(aoti_torch_create_device_guard(index, &guard_)); }
  ~DeviceGuard() { aoti_torch_delete_device_guard(guard_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  DeviceGuardHandle guard_ = nullptr;
};

inline bool is_aligned(const void* ptr, size_t bytes) { return reinterpret_cast<uintptr_t>(ptr) % bytes == 0; }

// A device copy of `rows` (kRowWords int64 words per tensor): a pinned host tensor filled here and copied
// asynchronously on the current stream by torch (whose pinned-memory allocator keeps the host block alive
// until the copy has run). Returns the owned device tensor.
inline stable::Tensor upload_table(const std::vector<int64_t>& rows, int32_t device_index) {
  const int64_t size = static_cast<int64_t>(rows.size());
  const int64_t stride = 1;
  const int32_t i64 = aoti_torch_dtype_int64();
  AtenTensorHandle host = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided_pinned(1, &size, &stride, i64, aoti_torch_device_type_cpu(), 0, &host));
  stable::Tensor host_t(host);
  std::memcpy(host_t.data_ptr(), rows.data(), rows.size() * sizeof(int64_t));
  AtenTensorHandle dev = nullptr;
  TORCH_ERROR_CODE_CHECK(
      aoti_torch_empty_strided(1, &size, &stride, i64, aoti_torch_device_type_cuda(), device_index, &dev));
  stable::Tensor dev_t(dev);
  TORCH_ERROR_CODE_CHECK(aoti_torch_copy_(dev_t.handle(), host_t.handle(), /*non_blocking=*/1));
  return dev_t;
}

// Launches one instantiation on the current stream, persistent grid; checks the launch.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
void launch(const int64_t* table, int num_tensors, int64_t num_chunks, const Op& op, int32_t device_index,
            cudaStream_t stream) {
  if (num_chunks == 0) return;  // every tensor is empty
  auto kernel = multi_tensor_kernel<P, G, S, O, NS, HAS_COPY, Op>;
  static int blocks_per_sm = [&] {
    int b = 0;
    ANYACCEL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0));
    return std::max(b, 1);
  }();
  int sms = 0;
  ANYACCEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_index));
  const int64_t grid = std::min<int64_t>(num_chunks, int64_t(sms) * blocks_per_sm);
  kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(table, num_tensors, num_chunks, op);
  ANYACCEL_CUDA_CHECK(cudaGetLastError());
}

// Storage types of the kernels by c10::ScalarType enumerator (Undefined: no model copy).
template <c10::ScalarType T>
struct CudaType;
template <>
struct CudaType<c10::ScalarType::Float> {
  using type = float;
};
template <>
struct CudaType<c10::ScalarType::BFloat16> {
  using type = __nv_bfloat16;
};
template <>
struct CudaType<c10::ScalarType::Half> {
  using type = __half;
};
template <>
struct CudaType<c10::ScalarType::Undefined> {
  using type = float;  // unused: HAS_COPY is false
};

template <class Op>
using LaunchFn = void (*)(const int64_t*, int, int64_t, const Op&, int32_t, cudaStream_t);

#define ANYACCEL_MTA_LAUNCHER_(P, G, S, C)                                                              \
  &::anyaccel::mta::launch<typename CudaType<c10::ScalarType::P>::type,                                  \
                           typename CudaType<c10::ScalarType::G>::type,                                  \
                           typename CudaType<c10::ScalarType::S>::type,                                  \
                           typename CudaType<c10::ScalarType::C>::type, NS,                              \
                           c10::ScalarType::C != c10::ScalarType::Undefined, Op>,

// One launcher per accepted dtype combination, in the op spec's order (kAcceptedCombos' order).
template <int NS, class Op>
std::array<LaunchFn<Op>, ::anyaccel::op::kNumCombos> launchers() {
  return {{ANYACCEL_DTYPE_COMBOS(ANYACCEL_MTA_LAUNCHER_)}};
}

// The tensors of one dtype combination of a step, uploaded as one table (see the top of this file), plus,
// after the kTable rows, the global index (position in the op's lists) of each row's tensor.
struct Group {
  size_t combo;                // index into the op spec's accepted combinations
  stable::Tensor table;        // int64 on the device: count rows of kRowWords words, then count indices
  int count;                   // tensors in the group
  int64_t chunks;              // chunks of kChunk elements over the group
  const int64_t* rows() const { return static_cast<const int64_t*>(table.const_data_ptr()); }
  const int64_t* indices() const { return rows() + static_cast<int64_t>(count) * kRowWords; }
};

// The first checks of a CUDA step, before a device guard can be set from params[0]: a non-empty list of
// CUDA tensors. Returns params[0]'s device index.
inline int32_t first_param_device(const char* op_name, const stable::TensorList& params) {
  if (params.size() == 0) checks::fail(std::string(op_name) + ": params is empty; pass at least one tensor");
  if (params[0].device_type() != aoti_torch_device_type_cuda()) {
    checks::fail(std::string(op_name) + ": params[0] is on device " + params[0].device_text() +
                 "; this is the CUDA kernel (use the CPU optimizer for host tensors)");
  }
  return params[0].device_index();
}

// The host table of one dtype combination of a validated step: its non-empty tensors' rows, then their
// global indices. Sets *count and *chunks (0 when the combination has no such tensor).
template <int NS>
std::vector<int64_t> group_rows(const checks::OptimizerPlan<NS>& plan, size_t combo, int* count, int64_t* chunks) {
  const bool has_copy = !plan.copies.empty();
  std::vector<int64_t> rows, index;
  *chunks = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan.combo[i] != static_cast<int>(combo) || plan.numel[i] == 0) continue;
    void* p = plan.params[i];
    const void* g = plan.grads[i];
    void* s0 = plan.states[0][i];
    void* s1 = NS > 1 ? plan.states[NS - 1][i] : nullptr;
    void* cp = has_copy ? plan.copies[i] : nullptr;
    const auto& c = ::anyaccel::op::kAcceptedCombos[combo];
    const size_t pe = aoti_torch_dtype_element_size(c.param), ge = aoti_torch_dtype_element_size(c.grad),
                 se = aoti_torch_dtype_element_size(c.state);
    const bool aligned = is_aligned(p, kVec * pe) && is_aligned(g, kVec * ge) && is_aligned(s0, kVec * se) &&
                         (s1 == nullptr || is_aligned(s1, kVec * se)) &&
                         (cp == nullptr || is_aligned(cp, kVec * aoti_torch_dtype_element_size(c.copy)));
    const int64_t numel = plan.numel[i];
    rows.insert(rows.end(), {reinterpret_cast<int64_t>(p), reinterpret_cast<int64_t>(g),
                             reinterpret_cast<int64_t>(s0), reinterpret_cast<int64_t>(s1),
                             reinterpret_cast<int64_t>(cp), numel, *chunks, aligned ? 1 : 0});
    index.push_back(static_cast<int64_t>(i));
    *chunks += (numel + kChunk - 1) / kChunk;
  }
  *count = static_cast<int>(index.size());
  rows.insert(rows.end(), index.begin(), index.end());
  return rows;
}

// Validates a step (checks::check_optimizer_lists, accelerator rules) and groups its non-empty tensors by
// dtype combination, one uploaded table per group. `plan_out` receives the validated plan. Call it under a
// device guard of first_param_device().
template <int NS>
std::vector<Group> make_groups(const char* op_name, const stable::TensorList& params, const stable::TensorList& grads,
                               const std::array<const stable::TensorList*, NS>& states,
                               const std::array<const char*, NS>& state_names, const stable::TensorList& copies,
                               checks::OptimizerPlan<NS>* plan_out) {
  *plan_out = checks::check_optimizer_lists(op_name, params, grads, states, state_names, copies,
                                            ::anyaccel::op::kAcceptedCombos, aoti_torch_device_type_cuda(), "");
  std::vector<Group> groups;
  for (size_t combo = 0; combo < ::anyaccel::op::kNumCombos; ++combo) {
    int count = 0;
    int64_t chunks = 0;
    const std::vector<int64_t> rows = group_rows<NS>(*plan_out, combo, &count, &chunks);
    if (count == 0) continue;
    groups.push_back(Group{combo, upload_table(rows, plan_out->device_index), count, chunks});
  }
  return groups;
}

// ---- plans: a step's validated table, kept on the device between steps ---------------------------
//
// A plan is one dtype combination's table in one device int64 tensor:
//   [kPlanMagic, combo, count, chunks, rows (count x kRowWords), global indices (count)]
// `<op>_plan` validates the tensors once and returns it; `<op>_step_planned` launches from it with no
// tensor list and no host-to-device copy (a step costs the same whatever the tensor count, and can be
// captured in a CUDA graph). The caller keeps every tensor of the plan alive and unchanged in place
// (anyaccel's front ends keep references and rebuild the plan when a tensor changes).
constexpr int64_t kPlanMagic = 0x616e7961636365;  // "anyacce"
constexpr int kPlanHeader = 4;

// Validates the lists (one dtype combination, at least one element) and returns the plan tensor.
template <int NS>
stable::Tensor make_plan(const char* op_name, const stable::TensorList& params, const stable::TensorList& grads,
                         const std::array<const stable::TensorList*, NS>& states,
                         const std::array<const char*, NS>& state_names, const stable::TensorList& copies) {
  const DeviceGuard guard(first_param_device(op_name, params));
  const auto plan = checks::check_optimizer_lists(op_name, params, grads, states, state_names, copies,
                                                  ::anyaccel::op::kAcceptedCombos, aoti_torch_device_type_cuda(), "");
  size_t used = 0, combo = 0;
  for (size_t c = 0; c < ::anyaccel::op::kNumCombos; ++c) {
    for (size_t i = 0; i < plan.size(); ++i) {
      if (plan.combo[i] == static_cast<int>(c) && plan.numel[i] > 0) {
        ++used;
        combo = c;
        break;
      }
    }
  }
  if (used != 1) {
    checks::fail(std::string(op_name) + ": a plan covers tensors of one dtype combination with at least one "
                 "element; got " + std::to_string(used) + " combinations (group the tensors by dtype, as "
                 "anyaccel's fused optimizers do)");
  }
  int count = 0;
  int64_t chunks = 0;
  const std::vector<int64_t> rows = group_rows<NS>(plan, combo, &count, &chunks);
  std::vector<int64_t> words = {kPlanMagic, static_cast<int64_t>(combo), count, chunks};
  words.insert(words.end(), rows.begin(), rows.end());
  return upload_table(words, plan.device_index);
}

// Checks the launch arguments a planned step takes from its caller against what a plan can hold.
inline const int64_t* plan_rows(const char* op_name, const stable::Tensor& plan, int64_t combo, int64_t count,
                                int64_t chunks) {
  const bool ok = plan.dtype() == aoti_torch_dtype_int64() && plan.device_type() == aoti_torch_device_type_cuda() &&
                  plan.is_contiguous() && combo >= 0 && combo < static_cast<int64_t>(::anyaccel::op::kNumCombos) &&
                  count > 0 && chunks >= count && plan.numel() == kPlanHeader + count * (kRowWords + 1);
  if (!ok) {
    checks::fail(std::string(op_name) + ": plan, combo, count and chunks must be those of one plan built by the "
                 "op's _plan function (a contiguous CUDA int64 tensor of " + std::to_string(kPlanHeader) +
                 " + count * " + std::to_string(kRowWords + 1) + " words); got a " + stable::dtype_name(plan.dtype()) +
                 " tensor of " + std::to_string(plan.numel()) + " elements on " + plan.device_text() +
                 ", combo " + std::to_string(combo) + ", count " + std::to_string(count) + ", chunks " +
                 std::to_string(chunks));
  }
  return static_cast<const int64_t*>(plan.const_data_ptr()) + kPlanHeader;
}

// Launches one planned step of `op` on torch's current stream of the plan's device.
template <int NS, class Op>
void run_planned(const char* op_name, const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks,
                 const Op& op) {
  const int64_t* rows = plan_rows(op_name, plan, combo, count, chunks);
  const int32_t device = plan.device_index();
  const DeviceGuard guard(device);
  static const auto table_launchers = launchers<NS, Op>();
  table_launchers[static_cast<size_t>(combo)](rows, static_cast<int>(count), chunks, op, device,
                                              current_stream(device));
}

// Validates a step, groups its tensors by dtype combination and launches one kernel per group on torch's
// current stream of params[0]'s device.
template <int NS, class Op>
void run_step(const char* op_name, const stable::TensorList& params, const stable::TensorList& grads,
              const std::array<const stable::TensorList*, NS>& states, const std::array<const char*, NS>& state_names,
              const stable::TensorList& copies, const Op& op) {
  const DeviceGuard guard(first_param_device(op_name, params));
  checks::OptimizerPlan<NS> plan;
  const auto groups = make_groups<NS>(op_name, params, grads, states, state_names, copies, &plan);
  const cudaStream_t stream = current_stream(plan.device_index);
  static const auto table_launchers = launchers<NS, Op>();
  for (const Group& g : groups) {
    table_launchers[g.combo](g.rows(), g.count, g.chunks, op, plan.device_index, stream);
  }
}

}  // namespace mta
}  // namespace anyaccel
