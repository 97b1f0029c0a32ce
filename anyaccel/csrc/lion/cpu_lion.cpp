// CPU Lion step as a torch op.
//
// Registers, in the namespace the builder passes as -DANYACCEL_OP_NAMESPACE=<ns> (docs/architecture.md):
//
//   lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, float lr, float beta1,
//             float beta2, float weight_decay) -> ()
//   isa() -> str
//
// Algorithm: Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023, Algorithm 2), with
// decoupled weight decay. The order of operations is the one of anyaccel's CUDA kernel
// (csrc/lion/fused_lion_cuda.cu), so CPU and GPU results agree to the rounding of one fma:
//
//   c = fma(beta1, m, (1 - beta1) * g)
//   p = fma(p, 1 - lr * weight_decay, -lr * sign(c))      sign as torch.sign: sign(0) = 0, NaN propagates
//   m = fma(beta2, m, (1 - beta2) * g)
//
// The scalar constants (1 - beta1, 1 - beta2, 1 - lr * weight_decay) are computed once in double and
// rounded to fp32.
//
// Storage: params/grads in fp32, bf16 or fp16 (grads in the params' dtype); exp_avg in fp32 or in the
// params' dtype. Everything is computed in fp32 registers and rounded once on store (simd.h: bf16 and fp16
// round to nearest even). One pass reads p, g, m and writes p, m, so the step is memory-bandwidth bound:
// 20 bytes per element for fp32, 14 for 16-bit params + fp32 state, 10 for 16-bit params and state.
//
// Threading: one OpenMP parallel region over the concatenation of all tensors, split into equal ranges
// (aligned to 64 elements) that cross tensor boundaries, so 200 small tensors balance as well as one big
// one. The thread count is at::get_num_threads(), reduced for small steps. (Same scheme as cpu_adam.cpp.)
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <torch/library.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../includes/simd.h"

#ifndef ANYACCEL_OP_NAMESPACE
#error "ANYACCEL_OP_NAMESPACE must be defined by the op builder (-DANYACCEL_OP_NAMESPACE=<ns>)"
#endif

// TORCH_LIBRARY pastes and stringifies its namespace argument, which would not expand a macro; one
// level of indirection makes the preprocessor expand ANYACCEL_OP_NAMESPACE first.
#define ANYACCEL_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define ANYACCEL_TORCH_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace anyaccel {
namespace lion {
namespace {

using simd::ScalarF;
using simd::VecF;

// Per-call constants, computed in double precision and rounded to fp32.
struct LionConsts {
  float beta1;
  float beta1_complement;  // 1 - beta1
  float beta2;
  float beta2_complement;  // 1 - beta2
  float neg_lr;            // -lr
  float decay;             // 1 - lr * weight_decay (exactly 1 without weight decay)
};

// Updates elements [0, n) with lanes of type V and returns how many were done (a multiple of V::kWidth).
template <typename V, typename P, typename S>
inline int64_t lion_lanes(P* p, const P* g, S* m, int64_t n, const LionConsts& c) {
  const V b1 = V::set1(c.beta1);
  const V w1 = V::set1(c.beta1_complement);
  const V b2 = V::set1(c.beta2);
  const V w2 = V::set1(c.beta2_complement);
  const V neg_lr = V::set1(c.neg_lr);
  const V decay = V::set1(c.decay);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    const V grad = V::load(g + i);
    const V exp_avg = V::load(m + i);
    const V update = V::sign(V::fma(b1, exp_avg, w1 * grad));
    const V param = V::fma(V::load(p + i), decay, neg_lr * update);
    param.store(p + i);
    V::fma(b2, exp_avg, w2 * grad).store(m + i);
  }
  return i;
}

// Updates elements [begin, begin + n) of one tensor: vector lanes, then a scalar tail with the same math.
template <typename P, typename S>
void lion_segment(void* p, const void* g, void* m, int64_t begin, int64_t n, const LionConsts& c) {
  P* pp = static_cast<P*>(p) + begin;
  const P* gp = static_cast<const P*>(g) + begin;
  S* mp = static_cast<S*>(m) + begin;
  const int64_t done = lion_lanes<VecF>(pp, gp, mp, n, c);
  lion_lanes<ScalarF>(pp + done, gp + done, mp + done, n - done, c);
}

using SegmentFn = void (*)(void*, const void*, void*, int64_t, int64_t, const LionConsts&);

// The accepted (param dtype, state dtype) combinations; grads always have the param dtype.
struct DtypeCombo {
  c10::ScalarType param;
  c10::ScalarType state;
  SegmentFn fn;
};

constexpr std::array<DtypeCombo, 5> kCombos = {{
    {c10::ScalarType::Float, c10::ScalarType::Float, &lion_segment<float, float>},
    {c10::ScalarType::BFloat16, c10::ScalarType::Float, &lion_segment<c10::BFloat16, float>},
    {c10::ScalarType::Half, c10::ScalarType::Float, &lion_segment<c10::Half, float>},
    {c10::ScalarType::BFloat16, c10::ScalarType::BFloat16, &lion_segment<c10::BFloat16, c10::BFloat16>},
    {c10::ScalarType::Half, c10::ScalarType::Half, &lion_segment<c10::Half, c10::Half>},
}};

constexpr const char* kAcceptedCombos =
    "(params, grads, exp_avgs) in {(float32, float32, float32), (bfloat16, bfloat16, float32), "
    "(float16, float16, float32), (bfloat16, bfloat16, bfloat16), (float16, float16, float16)}";

SegmentFn find_segment_fn(c10::ScalarType param, c10::ScalarType state) {
  for (const DtypeCombo& combo : kCombos) {
    if (combo.param == param && combo.state == state) {
      return combo.fn;
    }
  }
  return nullptr;
}

// Minimum elements per thread before another thread is worth waking (about 64 KiB of fp32 params).
constexpr int64_t kGrainElements = 1 << 14;
// Thread ranges start on multiples of this many elements (a 64-byte line of 16 fp32 lanes, times 4).
constexpr int64_t kAlignElements = 64;

void check_tensor(const at::Tensor& t, const char* list_name, size_t index, const at::Tensor& param) {
  TORCH_CHECK(t.defined(), "lion_step: ", list_name, "[", index,
              "] is an undefined tensor; every entry must be a defined tensor");
  TORCH_CHECK(t.device().is_cpu(), "lion_step: ", list_name, "[", index, "] is on device ", t.device(),
              "; the CPU Lion kernel accepts CPU tensors only (use FusedLion for accelerator tensors, or "
              "move the tensor to the CPU)");
  TORCH_CHECK(t.layout() == c10::kStrided, "lion_step: ", list_name, "[", index, "] has layout ",
              t.layout(), "; only dense (strided) tensors are accepted, sparse gradients are not supported");
  TORCH_CHECK(t.is_contiguous(), "lion_step: ", list_name, "[", index, "] is not contiguous (sizes ",
              t.sizes(), ", strides ", t.strides(),
              "); pass contiguous tensors (the kernel updates tensors in place, so a .contiguous() copy of a "
              "parameter or state would not be updated)");
  TORCH_CHECK(t.sizes() == param.sizes(), "lion_step: ", list_name, "[", index, "] has shape ", t.sizes(),
              " but params[", index, "] has shape ", param.sizes(), "; they must have the same shape");
}

void check_hyper(const char* name, double value, bool ok, const char* accepted) {
  TORCH_CHECK(std::isfinite(value) && ok, "lion_step: ", name, "=", value, " is invalid; accepted: ",
              accepted);
}

void lion_step_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, double lr,
                   double beta1, double beta2, double weight_decay) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n, "lion_step: got ", n, " params, ", grads.size(),
              " grads and ", exp_avgs.size(), " exp_avgs; the three lists must have one entry per parameter");
  check_hyper("lr", lr, lr >= 0.0, "a finite lr >= 0");
  check_hyper("beta1", beta1, beta1 >= 0.0 && beta1 <= 1.0, "0 <= beta1 <= 1");
  check_hyper("beta2", beta2, beta2 >= 0.0 && beta2 <= 1.0, "0 <= beta2 <= 1");
  check_hyper("weight_decay", weight_decay, weight_decay >= 0.0, "a finite weight_decay >= 0");

  std::vector<SegmentFn> fns(n);
  std::vector<int64_t> offsets(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.defined(), "lion_step: params[", i, "] is an undefined tensor");
    check_tensor(p, "params", i, p);
    check_tensor(grads[i], "grads", i, p);
    check_tensor(exp_avgs[i], "exp_avgs", i, p);
    TORCH_CHECK(grads[i].scalar_type() == p.scalar_type(), "lion_step: grads[", i, "] has dtype ",
                grads[i].scalar_type(), " but params[", i, "] has dtype ", p.scalar_type(),
                "; a gradient must have its parameter's dtype. Accepted: ", kAcceptedCombos);
    fns[i] = find_segment_fn(p.scalar_type(), exp_avgs[i].scalar_type());
    TORCH_CHECK(fns[i] != nullptr, "lion_step: params[", i, "] has dtype ", p.scalar_type(),
                " with optimizer state of dtype ", exp_avgs[i].scalar_type(),
                ", which is not supported. Accepted: ", kAcceptedCombos);
    offsets[i + 1] = offsets[i] + p.numel();
  }
  const int64_t total = offsets[n];
  if (total == 0) {
    return;
  }

  LionConsts c{};
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.neg_lr = static_cast<float>(-lr);
  c.decay = static_cast<float>(1.0 - lr * weight_decay);

  std::vector<void*> p_ptr(n), m_ptr(n);
  std::vector<const void*> g_ptr(n);
  for (size_t i = 0; i < n; ++i) {
    p_ptr[i] = params[i].data_ptr();
    g_ptr[i] = grads[i].const_data_ptr();
    m_ptr[i] = exp_avgs[i].data_ptr();
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
          fns[t](p_ptr[t], g_ptr[t], m_ptr[t], pos - offsets[t], seg_end - pos, c);
          pos = seg_end;
        }
      }
    }
  }
}

std::string isa() { return simd::kIsaName; }

}  // namespace
}  // namespace lion
}  // namespace anyaccel

ANYACCEL_TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE, m) {
  m.def(
      "lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, float lr, float beta1, "
      "float beta2, float weight_decay) -> ()");
  m.def("isa() -> str", &anyaccel::lion::isa);
}

ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, CPU, m) {
  m.impl("lion_step", &anyaccel::lion::lion_step_cpu);
}

// A sparse gradient makes the dispatcher pick a sparse backend key; without a kernel there, torch would
// answer with a generic "could not run ... with arguments from the 'SparseCPU' backend". Registering the
// same (validating) function lets check_tensor name the tensor and the fix instead. It never computes on a
// sparse tensor: validation rejects every non-strided layout before anything is read or written.
ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, SparseCPU, m) {
  m.impl("lion_step", &anyaccel::lion::lion_step_cpu);
}

ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, SparseCsrCPU, m) {
  m.impl("lion_step", &anyaccel::lion::lion_step_cpu);
}
