// What the two translation units of the CPU LAMB op share (see ../includes/host_kernels.h for why there are
// two): the per-step constants and the two passes' segment functions the kernel unit defines.
#pragma once

#include <array>
#include <cstdint>

#include "../includes/host_segments.h"

namespace anyaccel {
namespace lamb {

// Per-step constants, computed once in double precision and rounded to fp32.
struct LambConsts {
  float beta1, beta1_complement;  // beta1, 1 - beta1
  float beta2, beta2_complement;  // beta2, 1 - beta2
  float eps;
  float inv_grad_scale;           // 1 / grad_scale
  float weight_decay;
  float step_size;                // lr * sqrt(bc2) / bc1, or lr without bias correction
  bool eps_inside_sqrt;           // sqrt(v + eps) instead of sqrt(v) + eps
};

// Pass 1 over [begin, begin + n): updates m and v, adds sum(p^2) and sum(u^2) to *w2 and *u2 (u the update).
using Pass1Fn = void (*)(const host::SegmentPtrs&, int64_t begin, int64_t n, const LambConsts&, double* w2,
                         double* u2);
// Pass 2 over [begin, begin + n): p -= step_size * coeff * u (and the model copy), u recomputed from m and v.
using Pass2Fn = void (*)(const host::SegmentPtrs&, int64_t begin, int64_t n, const LambConsts&, float coeff);

// One function per accepted dtype combination, in the op spec's order (defined in cpu_lamb_kernel.cpp).
const std::array<Pass1Fn, op::kNumCombos>& pass1();
const std::array<Pass2Fn, op::kNumCombos>& pass2();

}  // namespace lamb
}  // namespace anyaccel
