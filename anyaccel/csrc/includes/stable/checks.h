// Input checks shared by every anyaccel kernel (host and accelerator), on the stable ABI.
//
// The rules and their messages are those of anyaccel/ops/validation.py, which the Python fakes and front
// ends use, so a bad call fails with the same words wherever it is caught:
//   "<op>: <name>=<value> is invalid; accepted: a finite 0 <= beta1 < 1 representable in float32"
//   "<op>: <list>[<i>] <problem>; <fix>"
// Errors are std::runtime_error (RuntimeError in Python), as STD_TORCH_CHECK raises them: the stable ABI has
// no typed errors; the Python front ends raise the typed ones before a kernel is reached.
//
// check_optimizer_lists validates every tensor of an element-wise optimizer step before anything is
// written and returns the plan the kernels run: per parameter its dtype combination (an index into the
// op spec's accepted combinations) and raw pointers.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor.h"

namespace anyaccel {
namespace checks {

constexpr double kFloat32Max = 3.4028234663852886e38;

// `v` as Python's repr prints a float (the fakes' messages use repr): the shortest digits that read back as
// `v`, in fixed notation when the decimal exponent is in [-4, 16) (with ".0" for integral values), else in
// scientific notation ("1e+39"); "inf", "nan" as is.
inline std::string number_text(double v) {
  char buf[64];
  if (!std::isfinite(v)) {
    return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  }
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const int exponent = std::stoi(sci.substr(sci.find('e') + 1));
  if (exponent < -4 || exponent >= 16) return sci;
  res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  std::string fixed(buf, res.ptr);
  if (fixed.find('.') == std::string::npos) fixed += ".0";
  return fixed;
}

// A scalar range from the op spec (generated into the schema header): low/high with open or closed ends.
struct Interval {
  double low, high;
  bool low_closed, high_closed;
  const char* words;  // "0 <= beta1 < 1"
};

// Raises a failed check with `message`: std::runtime_error, as STD_TORCH_CHECK does, but without its
// "<function>, <file>:<line>, " prefix, so the kernels' messages are exactly the fakes' (the tests compare
// them) and name the user's mistake rather than our source line. Messages are built as std::string by the
// callers: no per-argument-list formatter instantiation, which keeps these headers cheap to compile.
[[noreturn]] inline void fail(const std::string& message) { throw std::runtime_error(message); }

// Raises "<op>: <name>=<value> is invalid; accepted: a finite <words>[ representable in float32]".
inline void scalar(const char* op, const char* name, double value, const Interval& iv, bool is_float) {
  const bool in_range = (iv.low_closed ? value >= iv.low : value > iv.low) &&
                        (iv.high_closed ? value <= iv.high : value < iv.high);
  const bool ok = std::isfinite(value) && in_range && (!is_float || std::fabs(value) <= kFloat32Max);
  if (!ok) {
    fail(std::string(op) + ": " + name + "=" + number_text(value) + " is invalid; accepted: a finite " + iv.words +
         (is_float ? " representable in float32" : ""));
  }
}
inline void scalar(const char* op, const char* name, int64_t value, const Interval& iv, bool /*is_float*/) {
  const double v = static_cast<double>(value);
  const bool in_range = (iv.low_closed ? v >= iv.low : v > iv.low) && (iv.high_closed ? v <= iv.high : v < iv.high);
  if (!in_range) {  // an int prints as Python prints it ("step=0"), as the fakes do
    fail(std::string(op) + ": " + name + "=" + std::to_string(value) + " is invalid; accepted: a finite " + iv.words);
  }
}

// One accepted dtype combination (param, grad, state, model copy or kUndefined).
struct Combo {
  stable::DType param, grad, state, copy;
};

inline std::string combo_text(const Combo& c) {
  return std::string("(") + stable::dtype_name(c.param) + ", " + stable::dtype_name(c.grad) + ", " +
         stable::dtype_name(c.state) + ", " + stable::dtype_name(c.copy) + ")";
}

// What a kernel runs after validation: per parameter its combination and pointers.
template <size_t kStates>
struct OptimizerPlan {
  std::vector<int> combo;                       // index into the accepted combinations
  std::vector<int64_t> numel;                   // elements per parameter
  std::vector<void*> params;                    // written
  std::vector<const void*> grads;               // read
  std::array<std::vector<void*>, kStates> states;
  std::vector<void*> copies;                    // written; empty without model copies
  int32_t device_type = 0;
  int32_t device_index = -1;
  std::string device_text;                      // params[0]'s device as torch prints it ("cpu", "cuda:0")
  int64_t total = 0;                            // elements over all parameters
  size_t size() const { return numel.size(); }
};

// Raises when a written tensor of a step (a parameter, a state, a model copy) shares memory with any other
// tensor of the step (the same tensor listed twice, a gradient that is its parameter, overlapping views): the
// kernels would race on it. Gradients may share memory with each other (they are only read). The byte ranges
// are sorted once: O(n log n) for n tensors, a few microseconds per thousand. The words are
// validation.check_no_overlap's.
template <size_t kStates>
void check_no_overlap(const char* op, const stable::TensorList& params, const stable::TensorList& grads,
                      const std::array<const stable::TensorList*, kStates>& states,
                      const std::array<const char*, kStates>& state_names, const stable::TensorList& copies) {
  struct Span {
    uintptr_t start, end;
    int list;  // 0 params, 1 grads, 2.. states, 2 + kStates model_copies
    size_t index;
  };
  std::vector<Span> spans;
  spans.reserve(params.size() * (3 + kStates));
  auto add = [&spans](const stable::TensorView& t, int list, size_t i) {
    const int64_t n = t.numel();
    if (n == 0) return;
    const auto start = reinterpret_cast<uintptr_t>(t.const_data_ptr());
    spans.push_back({start, start + static_cast<uintptr_t>(n) * t.element_size(), list, i});
  };
  for (size_t i = 0; i < params.size(); ++i) {
    add(params[i], 0, i);
    add(grads[i], 1, i);
    for (size_t k = 0; k < kStates; ++k) add((*states[k])[i], 2 + static_cast<int>(k), i);
    if (copies.size() != 0) add(copies[i], 2 + static_cast<int>(kStates), i);
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    if (a.start != b.start) return a.start < b.start;
    return a.list != b.list ? a.list < b.list : a.index < b.index;
  });
  auto name = [&](const Span& s) {
    const char* list = s.list == 0 ? "params" : s.list == 1 ? "grads"
                       : s.list < 2 + static_cast<int>(kStates) ? state_names[s.list - 2] : "model_copies";
    return std::string(list) + "[" + std::to_string(s.index) + "]";
  };
  const Span* widest_any = nullptr;      // the span reaching furthest so far
  const Span* widest_written = nullptr;  // the written span reaching furthest so far
  for (const Span& s : spans) {
    const bool written = s.list != 1;
    const Span* other = written ? widest_any : widest_written;
    if (other != nullptr && s.start < other->end) {
      fail(std::string(op) + ": " + name(s) + " and " + name(*other) + " share memory (the same tensor twice, or "
           "overlapping views of one storage); updating them in one call is a data race. Pass each tensor once, "
           "each with its own storage");
    }
    if (widest_any == nullptr || s.end > widest_any->end) widest_any = &s;
    if (written && (widest_written == nullptr || s.end > widest_written->end)) widest_written = &s;
  }
}

// Validates an element-wise optimizer step (see validation.check_optimizer_lists for the rules, which are
// the same, in the same order) and returns its plan. `device_type` is the shim's device-type code the
// kernel serves; `host` selects the CPU wording of the device message.
template <size_t kStates, size_t kCombos>
OptimizerPlan<kStates> check_optimizer_lists(const char* op, const stable::TensorList& params,
                                             const stable::TensorList& grads,
                                             const std::array<const stable::TensorList*, kStates>& states,
                                             const std::array<const char*, kStates>& state_names,
                                             const stable::TensorList& copies,
                                             const std::array<Combo, kCombos>& accepted, int32_t device_type,
                                             const char* host_alternative) {
  const size_t n = params.size();
  bool lengths_ok = grads.size() == n && (copies.size() == 0 || copies.size() == n);
  for (size_t k = 0; k < kStates; ++k) lengths_ok = lengths_ok && states[k]->size() == n;
  if (!lengths_ok) {
    std::string counts = std::to_string(n) + " params, " + std::to_string(grads.size()) + " grads";
    for (size_t k = 0; k < kStates; ++k) counts += ", " + std::to_string(states[k]->size()) + " " + state_names[k];
    fail(std::string(op) + ": got " + counts + " and " + std::to_string(copies.size()) +
         " model_copies; grads and every state list need one entry per parameter, model_copies none or one per "
         "parameter");
  }
  const bool host = device_type == aoti_torch_device_type_cpu();
  const bool has_copy = copies.size() != 0;
  OptimizerPlan<kStates> plan;
  plan.device_type = device_type;
  plan.combo.resize(n);
  plan.numel.resize(n);
  std::string first_device;
  if (n > 0) {
    plan.device_index = params[0].device_index();
    first_device = params[0].device_text();
    plan.device_text = first_device;
  }
  // The message prefix is built only when a check fails (a step validates thousands of tensors).
  auto where = [op](const char* list, size_t i) { return std::string(op) + ": " + list + "[" + std::to_string(i) + "]"; };
  auto check_one = [&](const stable::TensorView& t, const char* list, size_t i, const stable::TensorView& p,
                       int64_t p_dim, const int64_t* p_sizes) {
    const int32_t t_type = t.device_type();
    const bool device_ok = t_type == device_type && (host || t.device_index() == plan.device_index);
    if (!device_ok) {
      if (host) {
        fail(where(list, i) + " is on device " + t.device_text() + "; the CPU kernel takes CPU tensors (use " +
             host_alternative + " for accelerator tensors, or move the tensor to the CPU)");
      }
      if (t_type != device_type) {
        fail(where(list, i) + " is on device " + t.device_text() + "; this kernel takes " +
             stable::device_type_name(device_type) + " tensors");
      }
      fail(where(list, i) + " is on device " + t.device_text() + "; every tensor of one call must be on " +
           first_device + " (params[0]'s device)");
    }
    if (!t.is_strided()) {
      fail(where(list, i) + " has layout " + t.layout_text() + "; only dense (strided) tensors are accepted, sparse "
           "gradients are not supported");
    }
    if (!t.is_contiguous()) {
      fail(where(list, i) + " is not contiguous (sizes " + t.shape_text() + ", strides " + t.strides_text() +
           "); pass contiguous tensors (the kernel updates tensors in place, so a .contiguous() copy would not be "
           "updated)");
    }
    if (t.handle() != p.handle()) {
      const int64_t dim = t.dim();
      const int64_t* sizes = t.sizes();
      if (!(dim == p_dim && std::equal(sizes, sizes + dim, p_sizes))) {
        fail(where(list, i) + " has shape " + t.shape_text() + " but params[" + std::to_string(i) + "] has shape " +
             p.shape_text() + "; they must have the same shape");
      }
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const stable::TensorView p = params[i];
    const int64_t p_dim = p.dim();
    const int64_t* p_sizes = p.sizes();
    check_one(p, "params", i, p, p_dim, p_sizes);
    check_one(grads[i], "grads", i, p, p_dim, p_sizes);
    for (size_t k = 0; k < kStates; ++k) check_one((*states[k])[i], state_names[k], i, p, p_dim, p_sizes);
    if (has_copy) check_one(copies[i], "model_copies", i, p, p_dim, p_sizes);
    const stable::DType state_dtype = kStates > 0 ? (*states[0])[i].dtype() : stable::kUndefined;
    for (size_t k = 1; k < kStates; ++k) {
      if ((*states[k])[i].dtype() != state_dtype) {
        std::string detail;
        for (size_t j = 0; j < kStates; ++j) {
          detail += std::string(j ? ", " : "") + state_names[j] + "[" + std::to_string(i) + "] " +
                    stable::dtype_name((*states[j])[i].dtype());
        }
        fail(std::string(op) + ": the optimizer states of params[" + std::to_string(i) + "] have different dtypes (" +
             detail + "); every state list must share one dtype");
      }
    }
    const Combo c{p.dtype(), grads[i].dtype(), state_dtype, has_copy ? copies[i].dtype() : stable::kUndefined};
    int found = -1;
    for (size_t a = 0; a < kCombos; ++a) {
      const Combo& x = accepted[a];
      if (x.param == c.param && x.grad == c.grad && x.state == c.state && x.copy == c.copy) {
        found = static_cast<int>(a);
        break;
      }
    }
    if (found < 0) {
      std::string list;
      for (size_t a = 0; a < kCombos; ++a) list += std::string(a ? ", " : "") + combo_text(accepted[a]);
      fail(std::string(op) + ": params[" + std::to_string(i) + "] has the dtype combination (param, grad, state, "
           "model_copy) = " + combo_text(c) + ", which is not supported; accepted: " + list);
    }
    plan.combo[i] = found;
    plan.numel[i] = p.numel();
    plan.total += plan.numel[i];
  }
  // Pointers are taken after every check passed (nothing is touched for a rejected call).
  plan.params.resize(n);
  plan.grads.resize(n);
  for (auto& s : plan.states) s.resize(n);
  if (has_copy) plan.copies.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (plan.numel[i] == 0) continue;
    plan.params[i] = params[i].data_ptr();
    plan.grads[i] = grads[i].const_data_ptr();
    for (size_t k = 0; k < kStates; ++k) plan.states[k][i] = (*states[k])[i].data_ptr();
    if (has_copy) plan.copies[i] = copies[i].data_ptr();
  }
  check_no_overlap(op, params, grads, states, state_names, copies);
  return plan;
}

// Checks an output tensor of one float32 entry per parameter (LAMB's trust ratios): contiguous, float32,
// plan.size() elements, on the parameters' device. The words are anyaccel/ops/lamb/spec.py's.
template <size_t kStates>
void check_coefficients(const char* op, const char* name, const stable::TensorView& t,
                        const OptimizerPlan<kStates>& plan) {
  const int64_t n = static_cast<int64_t>(plan.size());
  const bool on_device = n == 0 || (t.device_type() == plan.device_type &&
                                    (plan.device_type == aoti_torch_device_type_cpu() ||
                                     t.device_index() == plan.device_index));
  if (!(t.dtype() == stable::dtype_of(c10::ScalarType::Float) && t.numel() == n && t.is_contiguous() && on_device)) {
    fail(std::string(op) + ": " + name + " must be a contiguous float32 tensor of " + std::to_string(n) +
         " elements on " + (n == 0 ? std::string("the parameters device") : plan.device_text) + "; got " +
         stable::dtype_name(t.dtype()) + " with " + std::to_string(t.numel()) + " elements on " + t.device_text());
  }
}

// Checks a device scalar of a capturable step (the step count or the learning rate): a float32 tensor of one
// element on `where`'s device.
inline void check_device_scalar(const char* op, const char* name, const stable::TensorView& t,
                                const stable::TensorView& where) {
  const bool ok = t.dtype() == stable::dtype_of(c10::ScalarType::Float) && t.numel() == 1 &&
                  t.device_type() == where.device_type() && t.device_index() == where.device_index();
  if (!ok) {
    fail(std::string(op) + ": " + name + " must be a float32 tensor of one element on " + where.device_text() +
         "; got " + stable::dtype_name(t.dtype()) + " with " + std::to_string(t.numel()) + " elements on " +
         t.device_text());
  }
}

}  // namespace checks
}  // namespace anyaccel
