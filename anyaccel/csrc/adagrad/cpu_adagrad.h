// What the two translation units of the CPU Adagrad op share (see ../includes/host_kernels.h for why there
// are two): the per-step constants and the table of segment functions the kernel unit defines.
#pragma once

#include "../includes/host_segments.h"

namespace anyaccel {
namespace adagrad {

// Per-step constants, rounded once to fp32.
struct AdagradConsts {
  float lr;
  float eps;
  float weight_decay;  // the L2 term added to the gradient
  bool l2;             // weight_decay != 0
};

// One segment function per accepted dtype combination (defined in cpu_adagrad_kernel.cpp).
const host::SegmentTable<AdagradConsts>& segments();

}  // namespace adagrad
}  // namespace anyaccel
