// Boxed kernels from plain C++ functions, on the stable ABI.
//
// torch calls a stable-ABI kernel as `void(StableIValue* stack, uint64_t num_args, uint64_t num_outputs)`
// (torch/csrc/stable/library.h, StableLibrary::impl). Boxed<R(Args...)>::call<&fn> unpacks the stack into
// `fn`'s parameters (TensorList for Tensor[], Tensor for Tensor, int64_t, double, bool, std::string),
// calls it and packs the result. The parameter types are exactly those the op spec's schema maps to
// (anyaccel/spec/schema.py, CXX_TYPES): the generated schema header (anyaccel_op.h) static_asserts that each
// registered kernel has the signature of its schema, so a kernel and its schema cannot drift apart.
#pragma once

#include <torch/csrc/stable/library.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tensor.h"

namespace anyaccel {
namespace stable {

template <typename T>
struct Unbox;

template <>
struct Unbox<TensorList> {
  static TensorList from(StableIValue v) { return TensorList(torch::stable::detail::to<StableListHandle>(v)); }
};
template <>
struct Unbox<Tensor> {
  static Tensor from(StableIValue v) { return Tensor(torch::stable::detail::to<AtenTensorHandle>(v)); }
};
template <>
struct Unbox<int64_t> {
  static int64_t from(StableIValue v) { return torch::stable::detail::to<int64_t>(v); }
};
template <>
struct Unbox<double> {
  static double from(StableIValue v) { return torch::stable::detail::to<double>(v); }
};
template <>
struct Unbox<bool> {
  static bool from(StableIValue v) { return torch::stable::detail::to<bool>(v); }
};
template <>
struct Unbox<std::string> {
  static std::string from(StableIValue v) { return torch::stable::detail::to<std::string>(v); }
};

template <typename R>
struct Box {
  static StableIValue from(R v) { return torch::stable::detail::from(std::move(v)); }
};
template <>
struct Box<Tensor> {
  static StableIValue from(Tensor v) { return torch::stable::detail::from(v.release()); }
};

template <typename Sig>
struct Boxed;

template <typename R, typename... Args>
struct Boxed<R(Args...)> {
  template <R (*Fn)(Args...)>
  static void call(StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
    STD_TORCH_CHECK(num_args == sizeof...(Args), "anyaccel: the registered schema has ", num_args,
                    " arguments but the kernel takes ", sizeof...(Args));
    STD_TORCH_CHECK(num_outputs == (std::is_void_v<R> ? 0 : 1), "anyaccel: the registered schema has ",
                    num_outputs, " outputs but the kernel returns ", (std::is_void_v<R> ? 0 : 1));
    invoke<Fn>(stack, std::index_sequence_for<Args...>{});
  }

 private:
  template <R (*Fn)(Args...), size_t... I>
  static void invoke(StableIValue* stack, std::index_sequence<I...>) {
    // Every argument is unboxed (taking ownership of its handles) before the call, so an exception
    // thrown by the kernel still releases them.
    std::tuple<std::decay_t<Args>...> args{Unbox<std::decay_t<Args>>::from(stack[I])...};
    if constexpr (std::is_void_v<R>) {
      Fn(std::get<I>(args)...);
    } else {
      stack[0] = Box<R>::from(Fn(std::get<I>(args)...));
    }
  }
};

}  // namespace stable
}  // namespace anyaccel

// STABLE_TORCH_LIBRARY pastes and stringifies its namespace argument, which would not expand a macro;
// one level of indirection makes the preprocessor expand ANYACCEL_OP_NAMESPACE (set by the builder) first.
#define ANYACCEL_LIBRARY_NS_(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define ANYACCEL_LIBRARY(m) ANYACCEL_LIBRARY_NS_(ANYACCEL_OP_NAMESPACE, m)
#define ANYACCEL_LIBRARY_IMPL_NS_(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)
#define ANYACCEL_LIBRARY_IMPL(key, m) ANYACCEL_LIBRARY_IMPL_NS_(ANYACCEL_OP_NAMESPACE, key, m)
