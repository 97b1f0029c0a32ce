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
// per element for Adam instead of 22): the dtype of the state lists selects the kernel.
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

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

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

template <typename W>
__device__ __forceinline__ W load_word(const W* p) {
#if ANYACCEL_MTA_STREAMING
  return __ldcs(p);
#else
  return *p;
#endif
}

template <typename W>
__device__ __forceinline__ void store_word(W* p, const W& w) {
#if ANYACCEL_MTA_STREAMING
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
//   updating p and s[0..NS) in place; all arithmetic is fp32, 16-bit values are rounded to nearest even
//   once, when stored.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    multi_tensor_kernel(const int64_t* __restrict__ table, int num_tensors, int64_t num_chunks, Op op) {
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

// Errors are built by string concatenation and thrown as c10::ValueError / c10::TypeError (Python
// ValueError / TypeError) without c10::str's ostream formatting of numbers: seen on the H200 image, a
// failing TORCH_CHECK with integer arguments in this nvcc-compiled library crashed inside the stream's
// number formatting instead of raising.
[[noreturn]] inline void value_error(const std::string& msg) {
  throw c10::ValueError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}
[[noreturn]] inline void type_error(const std::string& msg) {
  throw c10::TypeError(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}

inline std::string dtype_name(c10::ScalarType t) {
  return t == c10::ScalarType::Undefined ? std::string("none") : std::string(c10::toString(t));
}

// Checks one tensor of a list against its parameter `ref` (the parameter itself for the params list,
// where only device, dtype and contiguity are compared).
inline void check_tensor(const at::Tensor& t, const char* list, size_t i, const at::Tensor& ref,
                         c10::ScalarType dtype, const char* op) {
  const std::string op_s(op);
  if (!t.defined()) value_error(op_s + ": " + where(list, i) + " is undefined (None); pass a tensor");
  if (t.device() != ref.device()) {
    value_error(op_s + ": " + where(list, i) + " is on " + t.device().str() + " but params[" + std::to_string(i) +
                "] is on " + ref.device().str() + "; move every tensor of a step to one CUDA device");
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

inline bool is_aligned(const void* ptr, size_t bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
}

// Validates `lists` (devices, dtypes, element counts, contiguity) and builds the device table.
// Returns the table on the params' device and sets *num_chunks. Side effect: one pinned host
// allocation and one asynchronous host-to-device copy on the current stream.
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
                  p0.device().str() + "; move every tensor of a step to one CUDA device");
    }
    check_tensor(lists.grads[i], "grads", i, p, gdt, op);
    bool aligned = is_aligned(p.data_ptr(), kVec * p.element_size()) &&
                   is_aligned(lists.grads[i].data_ptr(), kVec * lists.grads[i].element_size());
    void* sp[kMaxStates] = {nullptr, nullptr};
    for (size_t s = 0; s < lists.states.size(); ++s) {
      const at::Tensor& st = lists.states[s][i];
      check_tensor(st, kStateNames[s], i, p, sdt, op);
      sp[s] = st.data_ptr();
      aligned = aligned && is_aligned(sp[s], kVec * st.element_size());
    }
    void* cp = nullptr;
    if (has_copy) {
      check_tensor(lists.copies[i], "model_copies", i, p, odt, op);
      cp = lists.copies[i].data_ptr();
      aligned = aligned && is_aligned(cp, kVec * lists.copies[i].element_size());
    }
    const int64_t numel = p.numel();
    row[0] = reinterpret_cast<int64_t>(p.data_ptr());
    row[1] = reinterpret_cast<int64_t>(lists.grads[i].data_ptr());
    row[2] = reinterpret_cast<int64_t>(sp[0]);
    row[3] = reinterpret_cast<int64_t>(sp[1]);
    row[4] = reinterpret_cast<int64_t>(cp);
    row[5] = numel;
    row[6] = chunks;
    row[7] = aligned ? 1 : 0;
    chunks += (numel + kChunk - 1) / kChunk;
  }
  *num_chunks = chunks;
  at::Tensor dev = at::empty({host.numel()}, at::TensorOptions().dtype(at::kLong).device(p0.device()));
  dev.copy_(host, /*non_blocking=*/true);
  return dev;
}

// Launches one instantiation on the current stream, persistent grid; checks the launch.
template <typename P, typename G, typename S, typename O, int NS, bool HAS_COPY, class Op>
void launch(const at::Tensor& table, int num_tensors, int64_t num_chunks, const Op& op) {
  if (num_chunks == 0) return;  // every tensor is empty
  auto kernel = multi_tensor_kernel<P, G, S, O, NS, HAS_COPY, Op>;
  static int blocks_per_sm = [&] {
    int b = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, kThreads, 0));
    return std::max(b, 1);
  }();
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c10::cuda::current_device()));
  const int64_t grid = std::min<int64_t>(num_chunks, int64_t(sms) * blocks_per_sm);
  kernel<<<static_cast<unsigned>(grid), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      table.data_ptr<int64_t>(), num_tensors, num_chunks, op);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// One supported (param, grad, state, copy) dtype combination and its launcher. Backend differences as
// data: each op lists its combinations in a table and `dispatch` looks the step's dtypes up in it.
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
  if (!p0.defined() || !p0.is_cuda()) {
    value_error(op_s + ": params[0] must be a CUDA tensor, got " + (p0.defined() ? p0.device().str() : "None"));
  }
  const c10::cuda::CUDAGuard guard(p0.device());
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

// The dtype combinations every element-wise optimizer supports: parameters and gradients of one
// dtype with fp32 state, or (16-bit parameters) state in the parameters' dtype as torch's fused AdamW
// keeps it; or fp32 master parameters with fp32 or low-precision gradients and fp32 state, writing a
// bf16/fp16 model copy in the same pass.
#define ANYACCEL_MTA_V(OP, NS, P, G, S, O, HAS_COPY, PT, GT, ST, OT)              \
  {c10::ScalarType::P, c10::ScalarType::G, c10::ScalarType::S, c10::ScalarType::O, \
   &::anyaccel::mta::launch<PT, GT, ST, OT, NS, HAS_COPY, OP>}
#define ANYACCEL_MTA_VARIANTS(OP, NS)                                                                     \
  ANYACCEL_MTA_V(OP, NS, Float, Float, Float, Undefined, false, float, float, float, float),               \
  ANYACCEL_MTA_V(OP, NS, BFloat16, BFloat16, Float, Undefined, false, __nv_bfloat16, __nv_bfloat16, float, \
                 float),                                                                                   \
  ANYACCEL_MTA_V(OP, NS, Half, Half, Float, Undefined, false, __half, __half, float, float),               \
  ANYACCEL_MTA_V(OP, NS, BFloat16, BFloat16, BFloat16, Undefined, false, __nv_bfloat16, __nv_bfloat16,     \
                 __nv_bfloat16, float),                                                                    \
  ANYACCEL_MTA_V(OP, NS, Half, Half, Half, Undefined, false, __half, __half, __half, float),               \
  ANYACCEL_MTA_V(OP, NS, Float, Float, Float, BFloat16, true, float, float, float, __nv_bfloat16),         \
  ANYACCEL_MTA_V(OP, NS, Float, Float, Float, Half, true, float, float, float, __half),                    \
  ANYACCEL_MTA_V(OP, NS, Float, BFloat16, Float, BFloat16, true, float, __nv_bfloat16, float,             \
                 __nv_bfloat16),                                                                           \
  ANYACCEL_MTA_V(OP, NS, Float, Half, Float, Half, true, float, __half, float, __half)

}  // namespace mta
}  // namespace anyaccel
