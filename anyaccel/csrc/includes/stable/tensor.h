// Tensors as anyaccel's kernels see them, on torch's stable C ABI only.
//
// Kernels include only torch/csrc/stable and torch/headeronly headers and are compiled with
// TORCH_TARGET_VERSION (set by the op builder), so one binary serves every torch from that version on
// (https://docs.pytorch.org/docs/stable/notes/libtorch_stable_abi.html). Every accessor below is one call
// of the stable C shim (torch/csrc/inductor/aoti_torch/c/shim.h, torch/csrc/stable/c/shim.h).
//
// Why not torch::stable::Tensor: it wraps each handle in a std::shared_ptr (one heap allocation per
// tensor), and the Tensor[] arguments of an optimizer step carry thousands of tensors. TensorList keeps
// the raw handles in one vector and deletes them once; TensorView is a non-owning handle with the
// accessors the kernels need: a 1,000-tensor list costs about a third of the host time per call this way
// that it costs with std::vector<torch::stable::Tensor>.
#pragma once

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/c/shim.h>
#include <torch/csrc/stable/stableivalue_conversions.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>
#include <torch/headeronly/util/shim_utils.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace anyaccel {
namespace stable {

// A dtype as the shim encodes it: the value of c10::ScalarType (a stable numbering).
using DType = int32_t;
constexpr DType dtype_of(c10::ScalarType t) { return static_cast<DType>(t); }
constexpr DType kUndefined = dtype_of(c10::ScalarType::Undefined);

// "float32", "bfloat16", ... as torch prints them without the "torch." prefix ("none" for Undefined).
inline const char* dtype_name(DType t) {
  switch (static_cast<c10::ScalarType>(t)) {
    case c10::ScalarType::Float: return "float32";
    case c10::ScalarType::Double: return "float64";
    case c10::ScalarType::BFloat16: return "bfloat16";
    case c10::ScalarType::Half: return "float16";
    case c10::ScalarType::Long: return "int64";
    case c10::ScalarType::Int: return "int32";
    case c10::ScalarType::Short: return "int16";
    case c10::ScalarType::Char: return "int8";
    case c10::ScalarType::Byte: return "uint8";
    case c10::ScalarType::Bool: return "bool";
    case c10::ScalarType::ComplexFloat: return "complex64";
    case c10::ScalarType::ComplexDouble: return "complex128";
    case c10::ScalarType::Undefined: return "none";
    default: return "another dtype";
  }
}

// A borrowed tensor handle and the facts a kernel reads from it.
class TensorView {
 public:
  TensorView() = default;
  explicit TensorView(AtenTensorHandle h) : h_(h) {}

  AtenTensorHandle handle() const { return h_; }

  void* data_ptr() const {
    void* p = nullptr;
    TORCH_ERROR_CODE_CHECK(torch_get_mutable_data_ptr(h_, &p));
    return p;
  }
  const void* const_data_ptr() const {
    const void* p = nullptr;
    TORCH_ERROR_CODE_CHECK(torch_get_const_data_ptr(h_, &p));
    return p;
  }
  int64_t numel() const {
    int64_t n = 0;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_numel(h_, &n));
    return n;
  }
  int64_t dim() const {
    int64_t d = 0;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_dim(h_, &d));
    return d;
  }
  const int64_t* sizes() const {
    int64_t* s = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_sizes(h_, &s));
    return s;
  }
  const int64_t* strides() const {
    int64_t* s = nullptr;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_strides(h_, &s));
    return s;
  }
  DType dtype() const {
    int32_t t = 0;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_dtype(h_, &t));
    return t;
  }
  int32_t device_type() const {
    int32_t t = 0;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(h_, &t));
    return t;
  }
  int32_t device_index() const {
    int32_t i = 0;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(h_, &i));
    return i;
  }
  int32_t layout() const {
    int32_t l = 0;
    TORCH_ERROR_CODE_CHECK(aoti_torch_get_layout(h_, &l));
    return l;
  }
  bool is_contiguous() const {
    bool c = false;
    TORCH_ERROR_CODE_CHECK(aoti_torch_is_contiguous(h_, &c));
    return c;
  }
  bool is_strided() const { return layout() == aoti_torch_layout_strided(); }
  size_t element_size() const { return aoti_torch_dtype_element_size(dtype()); }

  // "[2, 3]": the shape as torch prints a list.
  std::string shape_text() const { return list_text(sizes(), dim()); }
  std::string strides_text() const { return list_text(strides(), dim()); }
  // "cpu", "cuda:0", ...
  std::string device_text() const;
  // "torch.strided", "torch.sparse_coo", ...: the layout as torch prints it.
  std::string layout_text() const {
    const int32_t l = layout();
    if (l == aoti_torch_layout_strided()) return "torch.strided";
    if (l == aoti_torch_layout_sparse_coo()) return "torch.sparse_coo";
    if (l == aoti_torch_layout_sparse_csr()) return "torch.sparse_csr";
    if (l == aoti_torch_layout_sparse_csc()) return "torch.sparse_csc";
    if (l == aoti_torch_layout_sparse_bsr()) return "torch.sparse_bsr";
    if (l == aoti_torch_layout_sparse_bsc()) return "torch.sparse_bsc";
    if (l == aoti_torch_layout__mkldnn()) return "torch._mkldnn";
    if (l == aoti_torch_layout_jagged()) return "torch.jagged";
    return "layout " + std::to_string(l);
  }

  static std::string list_text(const int64_t* v, int64_t n) {
    std::string out = "[";
    for (int64_t i = 0; i < n; ++i) {
      if (i) out += ", ";
      out += std::to_string(v[i]);
    }
    return out + "]";
  }

 protected:
  AtenTensorHandle h_ = nullptr;
};

inline const char* device_type_name(int32_t t) {
  if (t == aoti_torch_device_type_cpu()) return "cpu";
  if (t == aoti_torch_device_type_cuda()) return "cuda";
  if (t == aoti_torch_device_type_xpu()) return "xpu";
  if (t == aoti_torch_device_type_meta()) return "meta";
  if (t == aoti_torch_device_type_mps()) return "mps";
  if (t == aoti_torch_device_type_privateuse1()) return "privateuseone";
  return "another device";
}

inline std::string TensorView::device_text() const {
  const int32_t t = device_type();
  std::string out = device_type_name(t);
  if (t != aoti_torch_device_type_cpu()) out += ":" + std::to_string(device_index());
  return out;
}

// An owned tensor handle (a single Tensor argument or a result); deleted with the object.
class Tensor : public TensorView {
 public:
  Tensor() = default;
  explicit Tensor(AtenTensorHandle h) : TensorView(h) {}
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&& o) noexcept : TensorView(o.h_) { o.h_ = nullptr; }
  Tensor& operator=(Tensor&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Tensor() {
    if (h_ != nullptr) aoti_torch_delete_tensor_object(h_);
  }
  // Gives up ownership (for returning the handle to torch).
  AtenTensorHandle release() {
    AtenTensorHandle h = h_;
    h_ = nullptr;
    return h;
  }
};

// An owned Tensor[] argument: the handles torch passed, deleted together with the list.
class TensorList {
 public:
  TensorList() = default;
  // Takes ownership of the list and of every element (the stable ABI's convention for boxed arguments).
  explicit TensorList(StableListHandle list) {
    size_t n = 0;
    AOTITorchError err = torch_list_size(list, &n);
    if (err == AOTI_TORCH_SUCCESS) {
      handles_.reserve(n);
      for (size_t i = 0; i < n && err == AOTI_TORCH_SUCCESS; ++i) {
        StableIValue item = 0;
        err = torch_list_get_item(list, i, &item);
        if (err == AOTI_TORCH_SUCCESS) handles_.push_back(torch::stable::detail::to<AtenTensorHandle>(item));
      }
    }
    torch_delete_list(list);
    if (err != AOTI_TORCH_SUCCESS) {
      release_all();
      STD_TORCH_CHECK(false, "anyaccel: reading a Tensor[] argument failed");
    }
  }
  TensorList(const TensorList&) = delete;
  TensorList& operator=(const TensorList&) = delete;
  TensorList(TensorList&& o) noexcept : handles_(std::move(o.handles_)) {}
  ~TensorList() { release_all(); }

  size_t size() const { return handles_.size(); }
  bool empty() const { return handles_.empty(); }
  TensorView operator[](size_t i) const { return TensorView(handles_[i]); }

 private:
  void release_all() {
    for (AtenTensorHandle h : handles_) aoti_torch_delete_tensor_object(h);
    handles_.clear();
  }
  std::vector<AtenTensorHandle> handles_;
};

}  // namespace stable
}  // namespace anyaccel
