// CPU Adam / AdamW step as a torch op.
//
// Registers, in the namespace the builder passes as -DANYACCEL_OP_NAMESPACE=<ns> (docs/architecture.md):
//
//   adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs,
//             int step, float lr, float beta1, float beta2, float eps, float weight_decay,
//             bool bias_correction, bool adamw_mode) -> ()
//   isa() -> str
//
// Algorithm: Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015) with L2 weight
// decay added to the gradient (adamw_mode=false, as torch.optim.Adam), or with decoupled weight decay
// (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019; adamw_mode=true, as
// torch.optim.AdamW). The order of operations follows torch's single-tensor / fused CPU implementations
// (torch/optim/adam.py, aten/src/ATen/native/cpu/FusedAdamKernel.cpp):
//
//   g  = grad (+ weight_decay * p                 if !adamw_mode and weight_decay != 0)
//   p  = p * (1 - lr * weight_decay)              if adamw_mode
//   m  = lerp(m, g, 1 - beta1)
//   v  = beta2 * v + (1 - beta2) * g * g
//   p  = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)   (computed as sqrt(v) * (1 / sqrt(bc2)) + eps)
//
// with bc1 = 1 - beta1^step, bc2 = 1 - beta2^step when bias_correction, else 1.
//
// Storage: params/grads in fp32, bf16 or fp16 (grads in the params' dtype); exp_avg/exp_avg_sq in fp32 or
// in the params' dtype. Everything is computed in fp32 registers and rounded once on store (bf16: round to
// nearest even; fp16: F16C / FCVT, round to nearest even). One pass reads p, g, m, v and writes p, m, v, so
// the step is memory-bandwidth bound: 28 bytes per element for fp32, 22 for 16-bit params + fp32 state,
// 14 for 16-bit params and state.
//
// Threading: one OpenMP parallel region over the concatenation of all tensors, split into equal ranges
// (aligned to 64 elements) that cross tensor boundaries, so 200 small tensors balance as well as one big
// one. The thread count is at::get_num_threads(), reduced for small steps.
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
namespace adam {
namespace {

using simd::ScalarF;
using simd::VecF;

// Per-step constants, computed once in double precision and rounded to fp32.
struct AdamConsts {
  float beta1_complement;  // 1 - beta1, the lerp weight for exp_avg
  float beta2;
  float beta2_complement;  // 1 - beta2
  float eps;
  float step_size;         // lr / bc1
  float inv_bc2_sqrt;      // 1 / sqrt(bc2)
  float weight_decay;      // used by the L2 (adamw_mode=false) variant
  float decay;             // 1 - lr * weight_decay for adamw_mode, else exactly 1
};

// Updates elements [0, n) with lanes of type V and returns how many were done (a multiple of V::kWidth).
template <typename V, bool kL2, typename P, typename S>
inline int64_t adam_lanes(P* p, const P* g, S* m, S* v, int64_t n, const AdamConsts& c) {
  const V w1 = V::set1(c.beta1_complement);
  const V b2 = V::set1(c.beta2);
  const V w2 = V::set1(c.beta2_complement);
  const V eps = V::set1(c.eps);
  const V step_size = V::set1(c.step_size);
  const V inv_bc2_sqrt = V::set1(c.inv_bc2_sqrt);
  const V wd = V::set1(c.weight_decay);
  const V decay = V::set1(c.decay);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V grad = V::load(g + i);
    V param = V::load(p + i);
    V exp_avg = V::load(m + i);
    V exp_avg_sq = V::load(v + i);
    if constexpr (kL2) {
      grad = V::fma(param, wd, grad);
    }
    param = param * decay;
    exp_avg = V::fma(w1, grad - exp_avg, exp_avg);
    exp_avg_sq = V::fma(grad * w2, grad, exp_avg_sq * b2);
    // torch divides sqrt(v) by sqrt(bc2); multiplying by the reciprocal saves a division per lane and
    // differs by at most one rounding of the denominator.
    const V denom = V::fma(V::sqrt(exp_avg_sq), inv_bc2_sqrt, eps);
    param = V::fnma(step_size, exp_avg / denom, param);
    param.store(p + i);
    exp_avg.store(m + i);
    exp_avg_sq.store(v + i);
  }
  return i;
}

// Updates elements [begin, begin + n) of one tensor: vector lanes, then a scalar tail with the same math.
template <typename P, typename S>
void adam_segment(void* p, const void* g, void* m, void* v, int64_t begin, int64_t n, const AdamConsts& c,
                  bool l2) {
  P* pp = static_cast<P*>(p) + begin;
  const P* gp = static_cast<const P*>(g) + begin;
  S* mp = static_cast<S*>(m) + begin;
  S* vp = static_cast<S*>(v) + begin;
  if (l2) {
    const int64_t done = adam_lanes<VecF, true>(pp, gp, mp, vp, n, c);
    adam_lanes<ScalarF, true>(pp + done, gp + done, mp + done, vp + done, n - done, c);
  } else {
    const int64_t done = adam_lanes<VecF, false>(pp, gp, mp, vp, n, c);
    adam_lanes<ScalarF, false>(pp + done, gp + done, mp + done, vp + done, n - done, c);
  }
}

using SegmentFn = void (*)(void*, const void*, void*, void*, int64_t, int64_t, const AdamConsts&, bool);

// The accepted (param dtype, state dtype) combinations; grads always have the param dtype.
struct DtypeCombo {
  c10::ScalarType param;
  c10::ScalarType state;
  SegmentFn fn;
};

constexpr std::array<DtypeCombo, 5> kCombos = {{
    {c10::ScalarType::Float, c10::ScalarType::Float, &adam_segment<float, float>},
    {c10::ScalarType::BFloat16, c10::ScalarType::Float, &adam_segment<c10::BFloat16, float>},
    {c10::ScalarType::Half, c10::ScalarType::Float, &adam_segment<c10::Half, float>},
    {c10::ScalarType::BFloat16, c10::ScalarType::BFloat16, &adam_segment<c10::BFloat16, c10::BFloat16>},
    {c10::ScalarType::Half, c10::ScalarType::Half, &adam_segment<c10::Half, c10::Half>},
}};

constexpr const char* kAcceptedCombos =
    "(params, grads, exp_avgs/exp_avg_sqs) in {(float32, float32, float32), (bfloat16, bfloat16, float32), "
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
  TORCH_CHECK(t.defined(), "adam_step: ", list_name, "[", index,
              "] is an undefined tensor; every entry must be a defined tensor");
  TORCH_CHECK(t.device().is_cpu(), "adam_step: ", list_name, "[", index, "] is on device ", t.device(),
              "; the CPU Adam kernel accepts CPU tensors only (use FusedAdam for accelerator tensors, or "
              "move the tensor to the CPU)");
  TORCH_CHECK(t.layout() == c10::kStrided, "adam_step: ", list_name, "[", index, "] has layout ",
              t.layout(), "; only dense (strided) tensors are accepted, sparse gradients are not supported");
  TORCH_CHECK(t.is_contiguous(), "adam_step: ", list_name, "[", index, "] is not contiguous (sizes ",
              t.sizes(), ", strides ", t.strides(),
              "); pass contiguous tensors (the kernel updates tensors in place, so a .contiguous() copy of a "
              "parameter or state would not be updated)");
  TORCH_CHECK(t.sizes() == param.sizes(), "adam_step: ", list_name, "[", index, "] has shape ", t.sizes(),
              " but params[", index, "] has shape ", param.sizes(), "; they must have the same shape");
}

void check_hyper(const char* name, double value, bool ok, const char* accepted) {
  TORCH_CHECK(std::isfinite(value) && ok, "adam_step: ", name, "=", value, " is invalid; accepted: ",
              accepted);
}

void adam_step_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, int64_t step, double lr, double beta1, double beta2, double eps,
                   double weight_decay, bool bias_correction, bool adamw_mode) {
  const size_t n = params.size();
  TORCH_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n, "adam_step: got ", n,
              " params, ", grads.size(), " grads, ", exp_avgs.size(), " exp_avgs and ", exp_avg_sqs.size(),
              " exp_avg_sqs; the four lists must have one entry per parameter");
  TORCH_CHECK(step >= 1, "adam_step: step=", step,
              " is invalid; accepted: step >= 1 (the 1-based number of this step)");
  check_hyper("lr", lr, lr >= 0.0, "a finite lr >= 0");
  check_hyper("beta1", beta1, beta1 >= 0.0 && beta1 < 1.0, "0 <= beta1 < 1");
  check_hyper("beta2", beta2, beta2 >= 0.0 && beta2 < 1.0, "0 <= beta2 < 1");
  check_hyper("eps", eps, eps > 0.0, "a finite eps > 0");
  check_hyper("weight_decay", weight_decay, weight_decay >= 0.0, "a finite weight_decay >= 0");

  std::vector<SegmentFn> fns(n);
  std::vector<int64_t> offsets(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& p = params[i];
    TORCH_CHECK(p.defined(), "adam_step: params[", i, "] is an undefined tensor");
    check_tensor(p, "params", i, p);
    check_tensor(grads[i], "grads", i, p);
    check_tensor(exp_avgs[i], "exp_avgs", i, p);
    check_tensor(exp_avg_sqs[i], "exp_avg_sqs", i, p);
    TORCH_CHECK(grads[i].scalar_type() == p.scalar_type(), "adam_step: grads[", i, "] has dtype ",
                grads[i].scalar_type(), " but params[", i, "] has dtype ", p.scalar_type(),
                "; a gradient must have its parameter's dtype. Accepted: ", kAcceptedCombos);
    TORCH_CHECK(exp_avgs[i].scalar_type() == exp_avg_sqs[i].scalar_type(), "adam_step: exp_avgs[", i,
                "] has dtype ", exp_avgs[i].scalar_type(), " but exp_avg_sqs[", i, "] has dtype ",
                exp_avg_sqs[i].scalar_type(), "; both moments must share one dtype. Accepted: ",
                kAcceptedCombos);
    fns[i] = find_segment_fn(p.scalar_type(), exp_avgs[i].scalar_type());
    TORCH_CHECK(fns[i] != nullptr, "adam_step: params[", i, "] has dtype ", p.scalar_type(),
                " with optimizer state of dtype ", exp_avgs[i].scalar_type(),
                ", which is not supported. Accepted: ", kAcceptedCombos);
    offsets[i + 1] = offsets[i] + p.numel();
  }
  const int64_t total = offsets[n];
  if (total == 0) {
    return;
  }

  AdamConsts c{};
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.weight_decay = static_cast<float>(weight_decay);
  c.decay = adamw_mode ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  const bool l2 = !adamw_mode && weight_decay != 0.0;

  std::vector<void*> p_ptr(n), m_ptr(n), v_ptr(n);
  std::vector<const void*> g_ptr(n);
  for (size_t i = 0; i < n; ++i) {
    p_ptr[i] = params[i].data_ptr();
    g_ptr[i] = grads[i].const_data_ptr();
    m_ptr[i] = exp_avgs[i].data_ptr();
    v_ptr[i] = exp_avg_sqs[i].data_ptr();
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
          fns[t](p_ptr[t], g_ptr[t], m_ptr[t], v_ptr[t], pos - offsets[t], seg_end - pos, c, l2);
          pos = seg_end;
        }
      }
    }
  }
}

std::string isa() { return simd::kIsaName; }

}  // namespace
}  // namespace adam
}  // namespace anyaccel

ANYACCEL_TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE, m) {
  m.def(
      "adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "int step, float lr, float beta1, float beta2, float eps, float weight_decay, bool bias_correction, "
      "bool adamw_mode) -> ()");
  m.def("isa() -> str", &anyaccel::adam::isa);
}

ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, CPU, m) {
  m.impl("adam_step", &anyaccel::adam::adam_step_cpu);
}

// A sparse gradient makes the dispatcher pick a sparse backend key; without a kernel there, torch would
// answer with a generic "could not run ... with arguments from the 'SparseCPU' backend". Registering the
// same (validating) function lets check_tensor name the tensor and the fix instead. It never computes on a
// sparse tensor: validation rejects every non-strided layout before anything is read or written.
ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, SparseCPU, m) {
  m.impl("adam_step", &anyaccel::adam::adam_step_cpu);
}

ANYACCEL_TORCH_LIBRARY_IMPL(ANYACCEL_OP_NAMESPACE, SparseCsrCPU, m) {
  m.impl("adam_step", &anyaccel::adam::adam_step_cpu);
}
