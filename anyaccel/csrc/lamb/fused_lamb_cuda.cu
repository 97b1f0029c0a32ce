// Fused multi-tensor LAMB step on CUDA (op spec anyaccel/ops/lamb/spec.py, build "fused_lamb"), on torch's
// stable ABI.
//
// Per tensor, in fp32 (DeepSpeed's FusedLamb, csrc/lamb/fused_lamb_cuda_kernel.cu; You et al., ICLR 2020):
//   g = grad / grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2
//   u = m / (sqrt(v) + eps) + wd p        (sqrt(v + eps) with eps_inside_sqrt)
//   coeff = clamp(||p|| / ||u||, min_coeff, max_coeff), 1 when either norm is 0
//   p = p - step_size * coeff * u,  step_size = lr sqrt(bc2) / bc1 (lr without bias correction)
//
// DeepSpeed launches three kernels per parameter tensor. Here one step is three launches per dtype group
// over all its tensors (the multi-tensor table of cuda/multi_tensor_apply.cuh):
//   1. update: m and v in place, and each chunk's partial sums of p^2 and u^2 (a block reduction, written to
//      its own slot: no atomics, so the sums do not depend on scheduling);
//   2. ratios: one block per tensor sums its chunks' partials in a fixed order (in double), writes the
//      tensor's coefficient for pass 3 and into the user's lamb_coeffs;
//   3. apply: p -= step_size * coeff * u, u recomputed from the stored m and v (as DeepSpeed does), and the
//      16-bit model copy in the same pass.
// Bytes per element (fp32): pass 1 reads p, g, m, v and writes m, v (24); pass 3 reads p, m, v and writes p
// (16): 40 in all, against Adam's 28.
#include <cmath>

#include "cuda/multi_tensor_apply.cuh"

namespace anyaccel {
namespace {

struct LambConsts {
  float b1, omb1, b2, omb2, eps, inv_scale, wd, step_size, max_coeff, min_coeff;
  bool eps_inside_sqrt;
  // Capturable steps: the learning rate and the 1-based step count in device memory (float32 scalars),
  // step_size derived in prepare(); nullptr otherwise (the host derived it).
  const float* lr_ptr;
  const float* step_ptr;
  double b1_d, b2_d;
  bool bias_correction;

  __device__ __forceinline__ void prepare() {
    if (lr_ptr == nullptr) return;
    const double lr = *lr_ptr, step = *step_ptr;
    step_size = static_cast<float>(bias_correction ? lr * sqrt(1.0 - pow(b2_d, step)) / (1.0 - pow(b1_d, step)) : lr);
  }

  __device__ __forceinline__ float update(float p, float m, float v) const {
    const float denom = eps_inside_sqrt ? sqrtf(v + eps) : sqrtf(v) + eps;
    return m / denom + wd * p;
  }
};

constexpr int kThreads = mta::kThreads;

// `v` of the lane `off` above this one. HIP has no __shfl_down_sync before ROCm 6.2, and from then on its mask is
// 64 bits wide: a ROCm build (USE_ROCM) takes HIP's whole-wavefront __shfl_down. The sums below stay right on a
// 64-lane wavefront: each 32-thread group's tree reads only lanes of its own group into its lane 0.
#if defined(USE_ROCM)
#define ANYACCEL_SHFL_DOWN(v, off) __shfl_down((v), (off))
#else
#define ANYACCEL_SHFL_DOWN(v, off) __shfl_down_sync(0xffffffffu, (v), (off))
#endif

// Sums `a` and `b` over the block; the result is valid in thread 0. Fixed reduction order.
__device__ __forceinline__ void block_sum2(float& a, float& b) {
  __shared__ float sa[kThreads / 32], sb[kThreads / 32];
  for (int off = 16; off > 0; off >>= 1) {
    a += ANYACCEL_SHFL_DOWN(a, off);
    b += ANYACCEL_SHFL_DOWN(b, off);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < kThreads / 32 ? sa[lane] : 0.f;
    b = lane < kThreads / 32 ? sb[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
      a += ANYACCEL_SHFL_DOWN(a, off);
      b += ANYACCEL_SHFL_DOWN(b, off);
    }
  }
  __syncthreads();
}

// The tensor row holding chunk c (binary search over first_chunk, as the Adam kernel).
__device__ __forceinline__ int row_of_chunk(const int64_t* table, int num_tensors, int64_t c) {
  int lo = 0, hi = num_tensors - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (table[mid * mta::kRowWords + 6] <= c) lo = mid; else hi = mid - 1;
  }
  return lo;
}

template <typename P, typename G, typename S>
__global__ void __launch_bounds__(kThreads) lamb_update(const int64_t* __restrict__ table, int num_tensors,
                                                        int64_t num_chunks, LambConsts k,
                                                        float* __restrict__ partials) {
  k.prepare();
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const int64_t* row = table + row_of_chunk(table, num_tensors, c) * mta::kRowWords;
    const P* __restrict__ p = reinterpret_cast<const P*>(row[0]);
    const G* __restrict__ g = reinterpret_cast<const G*>(row[1]);
    S* __restrict__ m = reinterpret_cast<S*>(row[2]);
    S* __restrict__ v = reinterpret_cast<S*>(row[3]);
    const int64_t n = row[5];
    const int64_t start = (c - row[6]) * mta::kChunk;
    const int64_t end = start + mta::kChunk < n ? start + mta::kChunk : n;
    const bool aligned = row[7] != 0;
    const int64_t vec_end = aligned ? start + ((end - start) / mta::kVec) * mta::kVec : start;
    float w2 = 0.f, u2 = 0.f;
    for (int64_t i = start + int64_t(threadIdx.x) * mta::kVec; i < vec_end; i += int64_t(kThreads) * mta::kVec) {
      float pv[mta::kVec], gv[mta::kVec], mv[mta::kVec], vv[mta::kVec];
      mta::load_vec(p + i, pv);
      mta::load_vec(g + i, gv);
      mta::load_vec(m + i, mv);
      mta::load_vec(v + i, vv);
#pragma unroll
      for (int e = 0; e < mta::kVec; ++e) {
        const float gs = gv[e] * k.inv_scale;
        mv[e] = fmaf(k.b1, mv[e], k.omb1 * gs);
        vv[e] = fmaf(k.b2, vv[e], k.omb2 * gs * gs);
        const float u = k.update(pv[e], mv[e], vv[e]);
        w2 = fmaf(pv[e], pv[e], w2);
        u2 = fmaf(u, u, u2);
      }
      mta::store_vec(m + i, mv);
      mta::store_vec(v + i, vv);
    }
    for (int64_t i = vec_end + threadIdx.x; i < end; i += kThreads) {
      const float pe = mta::to_float(p[i]);
      const float gs = mta::to_float(g[i]) * k.inv_scale;
      const float me = fmaf(k.b1, mta::to_float(m[i]), k.omb1 * gs);
      const float ve = fmaf(k.b2, mta::to_float(v[i]), k.omb2 * gs * gs);
      m[i] = mta::from_float<S>(me);
      v[i] = mta::from_float<S>(ve);
      const float u = k.update(pe, me, ve);
      w2 = fmaf(pe, pe, w2);
      u2 = fmaf(u, u, u2);
    }
    block_sum2(w2, u2);
    if (threadIdx.x == 0) {
      partials[2 * c] = w2;
      partials[2 * c + 1] = u2;
    }
  }
}

// One block per tensor: its trust ratio from its chunks' partials, summed in a fixed order in double.
__global__ void __launch_bounds__(kThreads) lamb_ratios(const int64_t* __restrict__ table, int num_tensors,
                                                        int64_t num_chunks, const float* __restrict__ partials,
                                                        LambConsts k, float* __restrict__ coeff,
                                                        float* __restrict__ user_coeffs) {
  __shared__ double sw[kThreads], su[kThreads];
  const int t = blockIdx.x;
  const int64_t* row = table + int64_t(t) * mta::kRowWords;
  const int64_t first = row[6];
  const int64_t last = t + 1 < num_tensors ? table[int64_t(t + 1) * mta::kRowWords + 6] : num_chunks;
  double w2 = 0, u2 = 0;
  for (int64_t c = first + threadIdx.x; c < last; c += kThreads) {
    w2 += partials[2 * c];
    u2 += partials[2 * c + 1];
  }
  sw[threadIdx.x] = w2;
  su[threadIdx.x] = u2;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sw[threadIdx.x] += sw[threadIdx.x + s];
      su[threadIdx.x] += su[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double wn = sqrt(sw[0]), un = sqrt(su[0]);
    float r = 1.f;
    if (wn != 0.0 && un != 0.0) r = static_cast<float>(fmin(double(k.max_coeff), fmax(double(k.min_coeff), wn / un)));
    coeff[t] = r;
    user_coeffs[table[int64_t(num_tensors) * mta::kRowWords + t]] = r;
  }
}

template <typename P, typename S, typename O, bool HAS_COPY>
__global__ void __launch_bounds__(kThreads) lamb_apply(const int64_t* __restrict__ table, int num_tensors,
                                                       int64_t num_chunks, LambConsts k,
                                                       const float* __restrict__ coeff) {
  k.prepare();
  for (int64_t c = blockIdx.x; c < num_chunks; c += gridDim.x) {
    const int t = row_of_chunk(table, num_tensors, c);
    const int64_t* row = table + int64_t(t) * mta::kRowWords;
    P* __restrict__ p = reinterpret_cast<P*>(row[0]);
    const S* __restrict__ m = reinterpret_cast<const S*>(row[2]);
    const S* __restrict__ v = reinterpret_cast<const S*>(row[3]);
    O* __restrict__ out = reinterpret_cast<O*>(row[4]);
    const int64_t n = row[5];
    const int64_t start = (c - row[6]) * mta::kChunk;
    const int64_t end = start + mta::kChunk < n ? start + mta::kChunk : n;
    const bool aligned = row[7] != 0;
    const int64_t vec_end = aligned ? start + ((end - start) / mta::kVec) * mta::kVec : start;
    const float scale = k.step_size * coeff[t];
    for (int64_t i = start + int64_t(threadIdx.x) * mta::kVec; i < vec_end; i += int64_t(kThreads) * mta::kVec) {
      float pv[mta::kVec], mv[mta::kVec], vv[mta::kVec];
      mta::load_vec(p + i, pv);
      mta::load_vec(m + i, mv);
      mta::load_vec(v + i, vv);
#pragma unroll
      for (int e = 0; e < mta::kVec; ++e) pv[e] = fmaf(-scale, k.update(pv[e], mv[e], vv[e]), pv[e]);
      mta::store_vec(p + i, pv);
      if (HAS_COPY) mta::store_vec(out + i, pv);
    }
    for (int64_t i = vec_end + threadIdx.x; i < end; i += kThreads) {
      float pe = mta::to_float(p[i]);
      pe = fmaf(-scale, k.update(pe, mta::to_float(m[i]), mta::to_float(v[i])), pe);
      p[i] = mta::from_float<P>(pe);
      if (HAS_COPY) out[i] = mta::from_float<O>(pe);
    }
  }
}

__global__ void fill_ones(float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 1.f;
}

// The three launches of one dtype group.
// A dtype group's table as the kernels read it: rows, then global indices.
struct GroupView {
  const int64_t* rows;
  int count;
  int64_t chunks;
};

template <typename P, typename G, typename S, typename O, bool HAS_COPY>
void lamb_group(const GroupView& group, const LambConsts& k, float* user_coeffs, int32_t device_index,
                cudaStream_t stream) {
  static int blocks_per_sm = [] {
    int b = 0;
    ANYACCEL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, lamb_update<P, G, S>, kThreads, 0));
    return b > 0 ? b : 1;
  }();
  int sms = 0;
  ANYACCEL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_index));
  const int64_t grid = std::min<int64_t>(group.chunks, int64_t(sms) * blocks_per_sm);
  // Scratch: 2 partial sums per chunk, then one coefficient per tensor (fp32, on the device).
  const int64_t words = 2 * group.chunks + group.count;
  const int64_t stride = 1;
  AtenTensorHandle scratch_h = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(1, &words, &stride, aoti_torch_dtype_float32(),
                                                  aoti_torch_device_type_cuda(), device_index, &scratch_h));
  const stable::Tensor scratch(scratch_h);
  float* partials = static_cast<float*>(scratch.data_ptr());
  float* coeff = partials + 2 * group.chunks;
  lamb_update<P, G, S><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(group.rows, group.count, group.chunks,
                                                                             k, partials);
  ANYACCEL_CUDA_CHECK(cudaGetLastError());
  lamb_ratios<<<static_cast<unsigned>(group.count), kThreads, 0, stream>>>(group.rows, group.count, group.chunks,
                                                                           partials, k, coeff, user_coeffs);
  ANYACCEL_CUDA_CHECK(cudaGetLastError());
  lamb_apply<P, S, O, HAS_COPY><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(group.rows, group.count,
                                                                                     group.chunks, k, coeff);
  ANYACCEL_CUDA_CHECK(cudaGetLastError());
}

using GroupFn = void (*)(const GroupView&, const LambConsts&, float*, int32_t, cudaStream_t);

#define ANYACCEL_LAMB_GROUP_(P, G, S, C)                                                                    \
  &lamb_group<typename mta::CudaType<c10::ScalarType::P>::type, typename mta::CudaType<c10::ScalarType::G>::type, \
              typename mta::CudaType<c10::ScalarType::S>::type, typename mta::CudaType<c10::ScalarType::C>::type, \
              c10::ScalarType::C != c10::ScalarType::Undefined>,

const std::array<GroupFn, op::kNumCombos> kGroups = {{ANYACCEL_DTYPE_COMBOS(ANYACCEL_LAMB_GROUP_)}};

LambConsts make_consts(int64_t step, double lr, double beta1, double beta2, double eps, double weight_decay,
                       double grad_scale, double max_coeff, double min_coeff, bool bias_correction,
                       bool eps_inside_sqrt) {
  if (!(min_coeff <= max_coeff)) {
    checks::fail("lamb_step: min_coeff=" + checks::number_text(min_coeff) + " is larger than max_coeff=" +
                 checks::number_text(max_coeff) + "; accepted: min_coeff <= max_coeff");
  }
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  LambConsts k{};
  k.b1 = static_cast<float>(beta1);
  k.omb1 = static_cast<float>(1.0 - beta1);
  k.b2 = static_cast<float>(beta2);
  k.omb2 = static_cast<float>(1.0 - beta2);
  k.eps = static_cast<float>(eps);
  k.inv_scale = static_cast<float>(1.0 / grad_scale);
  k.wd = static_cast<float>(weight_decay);
  k.step_size = static_cast<float>(bias_correction ? lr * std::sqrt(bc2) / bc1 : lr);
  k.max_coeff = static_cast<float>(max_coeff);
  k.min_coeff = static_cast<float>(min_coeff);
  k.eps_inside_sqrt = eps_inside_sqrt;
  k.lr_ptr = nullptr;
  k.step_ptr = nullptr;
  k.b1_d = beta1;
  k.b2_d = beta2;
  k.bias_correction = bias_correction;
  return k;
}

// Every coefficient starts at 1: tensors without elements (in no group) keep it (both norms are 0).
void init_coeffs(float* user, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int count = static_cast<int>(n);
  fill_ones<<<(count + kThreads - 1) / kThreads, kThreads, 0, stream>>>(user, count);
  ANYACCEL_CUDA_CHECK(cudaGetLastError());
}

void lamb_step_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                    const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                    const stable::TensorList& model_copies, const stable::Tensor& lamb_coeffs, int64_t step,
                    double lr, double beta1, double beta2, double eps, double weight_decay, double grad_scale,
                    double max_coeff, double min_coeff, bool bias_correction, bool eps_inside_sqrt) {
  const LambConsts k = make_consts(step, lr, beta1, beta2, eps, weight_decay, grad_scale, max_coeff, min_coeff,
                                   bias_correction, eps_inside_sqrt);
  const mta::DeviceGuard guard(mta::first_param_device("lamb_step", params));
  checks::OptimizerPlan<2> plan;
  const auto groups = mta::make_groups<2>("lamb_step", params, grads, {&exp_avgs, &exp_avg_sqs},
                                          {"exp_avgs", "exp_avg_sqs"}, model_copies, &plan);
  checks::check_coefficients("lamb_step", "lamb_coeffs", lamb_coeffs, plan);
  const cudaStream_t stream = mta::current_stream(plan.device_index);
  float* user = static_cast<float*>(lamb_coeffs.data_ptr());
  init_coeffs(user, plan.size(), stream);
  for (const mta::Group& g : groups) {
    kGroups[g.combo](GroupView{g.rows(), g.count, g.chunks}, k, user, plan.device_index, stream);
  }
}

stable::Tensor lamb_plan_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                              const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                              const stable::TensorList& model_copies) {
  return mta::make_plan<2>("lamb_plan", params, grads, {&exp_avgs, &exp_avg_sqs}, {"exp_avgs", "exp_avg_sqs"},
                           model_copies);
}

// The planned steps: the trust ratios go to lamb_coeffs[global index], one entry per tensor of the plan's
// lists (so lamb_coeffs has as many elements as those lists had).
void run_planned(const char* op_name, const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks,
                 const stable::Tensor& lamb_coeffs, const LambConsts& k) {
  const int64_t* rows = mta::plan_rows(op_name, plan, combo, count, chunks);
  const int32_t device = plan.device_index();
  if (!(lamb_coeffs.dtype() == aoti_torch_dtype_float32() && lamb_coeffs.is_contiguous() &&
        lamb_coeffs.device_type() == plan.device_type() && lamb_coeffs.device_index() == device &&
        lamb_coeffs.numel() >= count)) {
    checks::fail(std::string(op_name) + ": lamb_coeffs must be a contiguous float32 tensor on " + plan.device_text() +
                 " with one entry per tensor of the plan's lists; got " + stable::dtype_name(lamb_coeffs.dtype()) +
                 " with " + std::to_string(lamb_coeffs.numel()) + " elements on " + lamb_coeffs.device_text());
  }
  const mta::DeviceGuard guard(device);
  const cudaStream_t stream = mta::current_stream(device);
  float* user = static_cast<float*>(lamb_coeffs.data_ptr());
  init_coeffs(user, static_cast<size_t>(lamb_coeffs.numel()), stream);
  kGroups[static_cast<size_t>(combo)](GroupView{rows, static_cast<int>(count), chunks}, k, user, device, stream);
}

void lamb_step_planned_cuda(const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks,
                            const stable::Tensor& lamb_coeffs, int64_t step, double lr, double beta1, double beta2,
                            double eps, double weight_decay, double grad_scale, double max_coeff, double min_coeff,
                            bool bias_correction, bool eps_inside_sqrt) {
  run_planned("lamb_step_planned", plan, combo, count, chunks, lamb_coeffs,
              make_consts(step, lr, beta1, beta2, eps, weight_decay, grad_scale, max_coeff, min_coeff,
                          bias_correction, eps_inside_sqrt));
}

void lamb_step_planned_capturable_cuda(const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks,
                                       const stable::Tensor& lamb_coeffs, const stable::Tensor& step,
                                       const stable::Tensor& lr, double beta1, double beta2, double eps,
                                       double weight_decay, double grad_scale, double max_coeff, double min_coeff,
                                       bool bias_correction, bool eps_inside_sqrt) {
  checks::check_device_scalar("lamb_step_planned_capturable", "step", step, plan);
  checks::check_device_scalar("lamb_step_planned_capturable", "lr", lr, plan);
  LambConsts k = make_consts(1, 0.0, beta1, beta2, eps, weight_decay, grad_scale, max_coeff, min_coeff,
                             bias_correction, eps_inside_sqrt);
  k.lr_ptr = static_cast<const float*>(lr.const_data_ptr());
  k.step_ptr = static_cast<const float*>(step.const_data_ptr());
  run_planned("lamb_step_planned_capturable", plan, combo, count, chunks, lamb_coeffs, k);
}

}  // namespace
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_LIBRARY_IMPL(CUDA, m) {
  ANYACCEL_IMPL(m, lamb_step, anyaccel::lamb_step_cuda);
  ANYACCEL_IMPL(m, lamb_plan, anyaccel::lamb_plan_cuda);
  ANYACCEL_IMPL(m, lamb_step_planned, anyaccel::lamb_step_planned_cuda);
  ANYACCEL_IMPL(m, lamb_step_planned_capturable, anyaccel::lamb_step_planned_capturable_cuda);
}
