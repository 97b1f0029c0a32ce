// What the two translation units of the CPU Adam op share (see ../includes/host_kernels.h for why there are
// two): the per-step constants and the table of segment functions the kernel unit defines.
#pragma once

#include "../includes/host_segments.h"

namespace anyaccel {
namespace adam {

// Per-step constants, computed once in double precision and rounded to fp32.
struct AdamConsts {
  float beta1;             // 1 - lerp weight, for the weight >= 0.5 form
  float beta1_complement;  // 1 - beta1, the lerp weight for exp_avg
  bool lerp_from_grad;     // torch.lerp's form for weights >= 0.5: g - (g - m) * (1 - w)
  float beta2;
  float beta2_complement;  // 1 - beta2
  float eps;
  float step_size;         // lr / bc1
  float inv_bc2_sqrt;      // 1 / sqrt(bc2)
  float weight_decay;      // used by the L2 (adamw_mode=false) variant
  float decay;             // 1 - lr * weight_decay for adamw_mode, else exactly 1
  bool l2;                 // !adamw_mode && weight_decay != 0
};

// One segment function per accepted dtype combination (defined in cpu_adam_kernel.cpp).
const host::SegmentTable<AdamConsts>& segments();

// Per-call constants of the rollback (the inverse of one step with the same arguments), computed once in
// double precision and rounded to fp32.
struct RollbackConsts {
  float beta1;
  float beta1_complement;  // 1 - beta1
  float beta2;
  float beta2_complement;  // 1 - beta2
  float eps;
  float step_size;         // lr / bc1 (the step's)
  float inv_bc2_sqrt;      // 1 / sqrt(bc2) (the step's)
  float weight_decay;      // the L2 (adamw_mode=false) term
  float decay;             // 1 - lr * weight_decay for adamw_mode, else exactly 1
  bool l2;                 // !adamw_mode && weight_decay != 0
};

// One rollback segment function per accepted dtype combination (defined in cpu_adam_kernel.cpp).
const host::SegmentTable<RollbackConsts>& rollback_segments();

}  // namespace adam
}  // namespace anyaccel
