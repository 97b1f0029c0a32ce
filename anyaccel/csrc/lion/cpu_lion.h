// What the two translation units of the CPU Lion op share (see ../includes/host_kernels.h for why there are
// two): the per-step constants and the table of segment functions the kernel unit defines.
#pragma once

#include "../includes/host_segments.h"

namespace anyaccel {
namespace lion {

// Per-step constants, computed once in double precision and rounded to fp32.
struct LionConsts {
  float beta1;
  float beta1_complement;  // 1 - beta1
  float beta2;
  float beta2_complement;  // 1 - beta2
  float neg_lr;            // -lr
  float decay;             // 1 - lr * weight_decay (exactly 1 without weight decay)
};

// One segment function per accepted dtype combination (defined in cpu_lion_kernel.cpp).
const host::SegmentTable<LionConsts>& segments();

}  // namespace lion
}  // namespace anyaccel
