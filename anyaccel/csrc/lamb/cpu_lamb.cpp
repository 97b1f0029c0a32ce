// CPU LAMB step as a torch op, on torch's stable ABI (op spec anyaccel/ops/lamb/spec.py, build "cpu_lamb").
//
// The schema, the scalar ranges and the accepted dtypes are the spec's, compiled in through the generated
// anyaccel_op.h. This file is the registration unit (constants, validation, the two passes' threading and
// the per-tensor trust ratios); the math is the kernel unit, cpu_lamb_kernel.cpp.
//
// Per tensor (DeepSpeed's FusedLamb, csrc/lamb/fused_lamb_cuda_kernel.cu; You et al., ICLR 2020):
//   pass 1: g = grad / grad_scale; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//           u = m / (sqrt(v) + eps) + wd p  (sqrt(v + eps) with eps_inside_sqrt); accumulate ||p||^2, ||u||^2
//   coeff = clamp(||p|| / ||u||, min_coeff, max_coeff), 1 when either norm is 0
//   pass 2: p -= step_size * coeff * u (u recomputed from the stored m and v), the model copy too.
// The norms are accumulated per worker and per tensor in double, then summed in worker order: the result
// does not depend on thread timing (it does on the thread count, as the split changes).
#include "../includes/host_optimizer.h"
#include "cpu_lamb.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace anyaccel {
namespace lamb {
namespace {

constexpr std::array<const char*, 2> kStateNames = {"exp_avgs", "exp_avg_sqs"};

void lamb_step_cpu(const stable::TensorList& params, const stable::TensorList& grads,
                   const stable::TensorList& exp_avgs, const stable::TensorList& exp_avg_sqs,
                   const stable::TensorList& model_copies, const stable::Tensor& lamb_coeffs, int64_t step,
                   double lr, double beta1, double beta2, double eps, double weight_decay, double grad_scale,
                   double max_coeff, double min_coeff, bool bias_correction, bool eps_inside_sqrt) {
  if (!(min_coeff <= max_coeff)) {
    checks::fail("lamb_step: min_coeff=" + checks::number_text(min_coeff) + " is larger than max_coeff=" +
                 checks::number_text(max_coeff) + "; accepted: min_coeff <= max_coeff");
  }
  const auto plan = checks::check_optimizer_lists("lamb_step", params, grads, {&exp_avgs, &exp_avg_sqs},
                                                  kStateNames, model_copies, op::kAcceptedCombos,
                                                  aoti_torch_device_type_cpu(), "FusedLamb");
  checks::check_coefficients("lamb_step", "lamb_coeffs", lamb_coeffs, plan);
  const double bc1 = bias_correction ? 1.0 - std::pow(beta1, static_cast<double>(step)) : 1.0;
  const double bc2 = bias_correction ? 1.0 - std::pow(beta2, static_cast<double>(step)) : 1.0;
  LambConsts c{};
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.inv_grad_scale = static_cast<float>(1.0 / grad_scale);
  c.weight_decay = static_cast<float>(weight_decay);
  c.step_size = static_cast<float>(bias_correction ? lr * std::sqrt(bc2) / bc1 : lr);
  c.eps_inside_sqrt = eps_inside_sqrt;

  const size_t n = plan.size();
  const bool has_copy = !plan.copies.empty();
  auto ptrs = [&](size_t t) {
    return host::SegmentPtrs{plan.params[t], plan.grads[t], plan.states[0][t], plan.states[1][t],
                             has_copy ? plan.copies[t] : nullptr};
  };
  const host::WorkSplit split(plan.numel, plan.total);
  std::vector<double> partial(static_cast<size_t>(split.workers()) * n * 2, 0.0);  // [worker][tensor][w2, u2]
  const auto& p1 = pass1();
  split.run([&](int64_t w) {
    double* mine = partial.data() + static_cast<size_t>(w) * n * 2;
    split.pieces(w, [&](size_t t, int64_t begin, int64_t count) {
      p1[plan.combo[t]](ptrs(t), begin, count, c, &mine[2 * t], &mine[2 * t + 1]);
    });
  });
  std::vector<float> coeff(n, 1.0f);
  for (size_t t = 0; t < n; ++t) {
    double w2 = 0, u2 = 0;
    for (int64_t w = 0; w < split.workers(); ++w) {
      w2 += partial[(static_cast<size_t>(w) * n + t) * 2];
      u2 += partial[(static_cast<size_t>(w) * n + t) * 2 + 1];
    }
    const double w_norm = std::sqrt(w2), u_norm = std::sqrt(u2);
    if (w_norm != 0.0 && u_norm != 0.0) {
      coeff[t] = static_cast<float>(std::min(max_coeff, std::max(min_coeff, w_norm / u_norm)));
    }
  }
  const auto& p2 = pass2();
  split.run([&](int64_t w) {
    split.pieces(w, [&](size_t t, int64_t begin, int64_t count) {
      p2[plan.combo[t]](ptrs(t), begin, count, c, coeff[t]);
    });
  });
  if (n > 0) {
    float* out = static_cast<float*>(lamb_coeffs.data_ptr());
    for (size_t t = 0; t < n; ++t) out[t] = coeff[t];
  }
}

}  // namespace
}  // namespace lamb
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_HOST_KERNEL(lamb_step, anyaccel::lamb::lamb_step_cpu)
ANYACCEL_LIBRARY_IMPL(CompositeExplicitAutograd, m) { ANYACCEL_IMPL(m, isa, anyaccel::host::isa); }
