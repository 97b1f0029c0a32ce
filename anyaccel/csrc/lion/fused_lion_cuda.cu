// Fused multi-tensor Lion step on CUDA (op spec anyaccel/ops/lion/spec.py, build "fused_lion"), on
// torch's stable ABI.
//
// Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023, Algorithm 2), per element in
// fp32:  c = beta1 * m + (1 - beta1) * g;  p = p * (1 - lr * wd) - lr * sign(c);  m = beta2 * m + (1 - beta2) * g
// (sign as torch.sign). With model_copies, p is an fp32 master and the 16-bit copy is written in the same
// pass. The schema, scalar ranges and dtype combinations come from the spec (generated anyaccel_op.h).
#include "cuda/multi_tensor_apply.cuh"

namespace anyaccel {
namespace {

struct LionOp {
  float beta1, beta2, lr, decay;  // decay = 1 - lr * weight_decay
  float omb1, omb2;               // 1 - beta1, 1 - beta2, computed in double on the host
  float weight_decay;
  const float* lr_ptr;            // capturable: the learning rate in device memory, else nullptr

  __device__ __forceinline__ void prepare() {
    if (lr_ptr == nullptr) return;
    lr = *lr_ptr;
    decay = 1.f - lr * weight_decay;
  }

  __device__ __forceinline__ void operator()(float& p, float g, float* s) const {
    const float c = fmaf(beta1, s[0], omb1 * g);
    const float sgn = c > 0.f ? 1.f : (c < 0.f ? -1.f : c);  // torch.sign: +-0 and NaN pass through
    p = fmaf(p, decay, -lr * sgn);
    s[0] = fmaf(beta2, s[0], omb2 * g);
  }
};

LionOp make_op(double lr, double beta1, double beta2, double weight_decay) {
  return LionOp{static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(lr),
                static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(1.0 - beta1),
                static_cast<float>(1.0 - beta2), static_cast<float>(weight_decay), nullptr};
}

void lion_step_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                    const stable::TensorList& exp_avgs, const stable::TensorList& model_copies, double lr,
                    double beta1, double beta2, double weight_decay) {
  mta::run_step<1>("lion_step", params, grads, {&exp_avgs}, {"exp_avgs"}, model_copies,
                   make_op(lr, beta1, beta2, weight_decay));
}

stable::Tensor lion_plan_cuda(const stable::TensorList& params, const stable::TensorList& grads,
                              const stable::TensorList& exp_avgs, const stable::TensorList& model_copies) {
  return mta::make_plan<1>("lion_plan", params, grads, {&exp_avgs}, {"exp_avgs"}, model_copies);
}

void lion_step_planned_cuda(const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks, double lr,
                            double beta1, double beta2, double weight_decay) {
  mta::run_planned<1>("lion_step_planned", plan, combo, count, chunks, make_op(lr, beta1, beta2, weight_decay));
}

void lion_step_planned_capturable_cuda(const stable::Tensor& plan, int64_t combo, int64_t count, int64_t chunks,
                                       const stable::Tensor& lr, double beta1, double beta2, double weight_decay) {
  checks::check_device_scalar("lion_step_planned_capturable", "lr", lr, plan);
  LionOp op = make_op(0.0, beta1, beta2, weight_decay);
  op.lr_ptr = static_cast<const float*>(lr.const_data_ptr());
  mta::run_planned<1>("lion_step_planned_capturable", plan, combo, count, chunks, op);
}

}  // namespace
}  // namespace anyaccel

ANYACCEL_LIBRARY(m) { ANYACCEL_DEFINE_OPS(m); }
ANYACCEL_LIBRARY_IMPL(CUDA, m) {
  ANYACCEL_IMPL(m, lion_step, anyaccel::lion_step_cuda);
  ANYACCEL_IMPL(m, lion_plan, anyaccel::lion_plan_cuda);
  ANYACCEL_IMPL(m, lion_step_planned, anyaccel::lion_step_planned_cuda);
  ANYACCEL_IMPL(m, lion_step_planned_capturable, anyaccel::lion_step_planned_capturable_cuda);
}
