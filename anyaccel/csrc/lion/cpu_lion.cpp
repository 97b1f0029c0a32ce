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
// Threading (one OpenMP region over the concatenation of all tensors, split into equal aligned ranges),
// validation, the dtype table and the registration glue are shared with cpu_adam.cpp
// (../includes/host_optimizer.h); this file keeps the math, the schema and the registration.
#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "../includes/host_optimizer.h"
#include "../includes/simd.h"

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

// The per-segment function of the shared threading scheme (host::dtype_combos builds its table).
struct LionKernel {
  using SegmentFn = void (*)(void*, const void*, void*, int64_t, int64_t, const LionConsts&);

  // Updates elements [begin, begin + n) of one tensor: vector lanes, then a scalar tail with the same math.
  template <typename P, typename S>
  static void segment(void* p, const void* g, void* m, int64_t begin, int64_t n, const LionConsts& c) {
    P* pp = static_cast<P*>(p) + begin;
    const P* gp = static_cast<const P*>(g) + begin;
    S* mp = static_cast<S*>(m) + begin;
    const int64_t done = lion_lanes<VecF>(pp, gp, mp, n, c);
    lion_lanes<ScalarF>(pp + done, gp + done, mp + done, n - done, c);
  }
};

constexpr auto kCombos = host::dtype_combos<LionKernel>();

constexpr host::OpText kText{
    "lion_step",
    "CPU Lion",
    "FusedLion",
    "(params, grads, exp_avgs) in {(float32, float32, float32), (bfloat16, bfloat16, float32), "
    "(float16, float16, float32), (bfloat16, bfloat16, bfloat16), (float16, float16, float16)}",
    "",  // one state list: nothing to share a dtype with
};

constexpr std::array<const char*, 1> kStateNames = {"exp_avgs"};

void lion_step_cpu(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs, double lr,
                   double beta1, double beta2, double weight_decay) {
  const std::array<at::TensorList, 1> states = {exp_avgs};
  host::check_list_lengths(kText, params, grads, states, kStateNames);
  host::check_hyper(kText, "lr", lr, lr >= 0.0, "a finite lr >= 0");
  host::check_hyper(kText, "beta1", beta1, beta1 >= 0.0 && beta1 <= 1.0, "0 <= beta1 <= 1");
  host::check_hyper(kText, "beta2", beta2, beta2 >= 0.0 && beta2 <= 1.0, "0 <= beta2 <= 1");
  host::check_hyper(kText, "weight_decay", weight_decay, weight_decay >= 0.0, "a finite weight_decay >= 0");

  const auto plan = host::plan_step(kText, params, grads, states, kStateNames, kCombos);

  LionConsts c{};
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.neg_lr = static_cast<float>(-lr);
  c.decay = static_cast<float>(1.0 - lr * weight_decay);

  host::parallel_segments(plan.offsets, [&](size_t t, int64_t begin, int64_t n) {
    plan.fns[t](plan.params[t], plan.grads[t], plan.states[0][t], begin, n, c);
  });
}

}  // namespace
}  // namespace lion
}  // namespace anyaccel

ANYACCEL_TORCH_LIBRARY(ANYACCEL_OP_NAMESPACE, m) {
  m.def(
      "lion_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, float lr, float beta1, "
      "float beta2, float weight_decay) -> ()");
  m.def("isa() -> str", &anyaccel::host::isa);
}

ANYACCEL_HOST_KERNEL_IMPLS("lion_step", &anyaccel::lion::lion_step_cpu)
