// A standalone driver for one CPU optimizer kernel unit (csrc/<family>/cpu_<family>_kernel.cpp), with no
// torch library: it includes the kernel unit itself, runs its segment functions on raw buffers filled from
// a fixed pseudo-random sequence, and prints the results, so the same source compiled for several ISA
// levels (and run under qemu-aarch64 for the aarch64 ones) can be compared output for output. Used by
// tests/csrc/test_arm_kernels.py, which compiles it with -DDRIVER_FAMILY_<FAMILY> and the generated
// anyaccel_dtypes.h of that family on the include path.
//
// Output, one line per result: "<case> <array> <value>", where <case> names the family, variant, dtype
// combination index (the op spec's order), size and split; <value> is the array's bytes in hex when it has
// at most kHexElements elements, else "fnv1a64:<hash>" of its bytes; LAMB's norms are printed as
// "%a" (exact) doubles. The first line is "isa <level> width <fp32 lanes of one vector>".
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#if defined(DRIVER_FAMILY_ADAM)
#include "adam/cpu_adam_kernel.cpp"
#elif defined(DRIVER_FAMILY_LION)
#include "lion/cpu_lion_kernel.cpp"
#elif defined(DRIVER_FAMILY_ADAGRAD)
#include "adagrad/cpu_adagrad_kernel.cpp"
#elif defined(DRIVER_FAMILY_LAMB)
#include "lamb/cpu_lamb_kernel.cpp"
#else
#error "define one DRIVER_FAMILY_<ADAM|LION|ADAGRAD|LAMB>"
#endif

namespace {

using anyaccel::host::DType_BFloat16;
using anyaccel::host::DType_Float;
using anyaccel::host::DType_Half;
using anyaccel::host::DType_Undefined;
using anyaccel::host::SegmentPtrs;

constexpr size_t kHexElements = 64;
// Bytes of a known pattern after each array: a kernel that writes past its n elements (a store of a whole
// vector where the predicate or the tail buffer should have stopped it) changes them.
constexpr size_t kGuardBytes = 256;
constexpr unsigned char kGuard = 0xA5;

// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014).
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // A float in [-1, 1) with 24 significant bits, scaled by 2^e for e in [-6, 1]: exact on every machine.
  float uniform() {
    const uint64_t r = next();
    const float u = static_cast<float>(static_cast<int64_t>(r >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
    return std::ldexp(u, static_cast<int>((r >> 8) & 7) - 6);
  }
};

// One array of storage type S (void: absent).
struct Buffer {
  std::vector<unsigned char> bytes;
  size_t elem = 0;
  size_t n = 0;
  void* data() { return bytes.empty() ? nullptr : bytes.data(); }
};

template <typename S>
Buffer make(size_t n, Rng& rng, float scale, bool non_negative, int zero_every) {
  Buffer b;
  if constexpr (!std::is_void_v<S>) {
    b.elem = sizeof(S);
    b.n = n;
    b.bytes.assign(n * sizeof(S) + kGuardBytes, kGuard);
    S* p = reinterpret_cast<S*>(b.bytes.data());
    for (size_t i = 0; i < n; ++i) {
      float x = rng.uniform() * scale;
      if (non_negative) x = std::fabs(x);
      if (zero_every > 0 && i % static_cast<size_t>(zero_every) == 3) x = 0.0f;
      anyaccel::simd::store_scalar(p + i, x);  // round to nearest even: the same on every machine
    }
  }
  return b;
}

void print(const std::string& key, const char* name, const Buffer& b) {
  if (b.bytes.empty()) return;
  const size_t size = b.n * b.elem;
  for (size_t k = size; k < b.bytes.size(); ++k) {
    if (b.bytes[k] != kGuard) {
      std::printf("%s %s GUARD-OVERWRITTEN at byte %zu past the end\n", key.c_str(), name, k - size);
      break;
    }
  }
  std::printf("%s %s ", key.c_str(), name);
  if (b.n <= kHexElements) {
    for (size_t k = 0; k < size; ++k) std::printf("%02x", b.bytes[k]);
  } else {
    uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, 64 bits
    for (size_t k = 0; k < size; ++k) h = (h ^ b.bytes[k]) * 0x100000001B3ull;
    std::printf("fnv1a64:%016" PRIx64, h);
  }
  std::printf("\n");
}

// Runs `seg(ptrs, begin, count)` over [0, n) in two pieces split at `split` (as the threaded step does: a
// piece may start anywhere in a tensor).
template <typename Seg>
void pieces(int64_t n, int64_t split, const Seg& seg) {
  if (split > 0 && split < n) {
    seg(0, split);
    seg(split, n - split);
  } else {
    seg(0, n);
  }
}

struct Arrays {
  Buffer p, g, s0, s1, copy;
  SegmentPtrs ptrs() { return {p.data(), g.data(), s0.data(), s1.data(), copy.data()}; }
  void print_all(const std::string& key) {
    print(key, "param", p);
    print(key, "state0", s0);
    print(key, "state1", s1);
    print(key, "copy", copy);
  }
};

template <typename P, typename G, typename S, typename C>
Arrays inputs(size_t n, uint64_t seed, bool two_states) {
  Rng rng{seed};
  Arrays a;
  a.p = make<P>(n, rng, 1.0f, false, 0);
  a.g = make<G>(n, rng, 1.0f, false, 11);
  a.s0 = make<S>(n, rng, 0.1f, false, 13);
  if (two_states) a.s1 = make<S>(n, rng, 0.01f, true, 0);
  a.copy = make<C>(n, rng, 1.0f, false, 0);
  return a;
}

// beta^step by repeated multiplication (no libm pow, whose last bit may differ between C libraries).
double power(double beta, int step) {
  double r = 1.0;
  for (int k = 0; k < step; ++k) r *= beta;
  return r;
}

#if defined(DRIVER_FAMILY_ADAM)
using anyaccel::adam::AdamConsts;
using anyaccel::adam::RollbackConsts;

AdamConsts adam_consts(bool adamw, double beta1) {
  const double lr = 1e-3, beta2 = 0.999, eps = 1e-8, wd = 0.01;
  const int step = 3;
  const double bc1 = 1.0 - power(beta1, step), bc2 = 1.0 - power(beta2, step);
  const double w = 1.0 - beta1;
  AdamConsts c{};
  c.lerp_from_grad = w >= 0.5;
  c.beta1 = static_cast<float>(beta1);
  c.beta1_complement = static_cast<float>(w);
  c.beta2 = static_cast<float>(beta2);
  c.beta2_complement = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  c.weight_decay = static_cast<float>(wd);
  c.decay = adamw ? static_cast<float>(1.0 - lr * wd) : 1.0f;
  c.l2 = !adamw;
  return c;
}

template <typename P, typename G, typename S, typename C>
void run_combo(int combo, int64_t n, int64_t split) {
  const struct { const char* name; bool adamw; double beta1; } variants[] = {{"adamw", true, 0.9}, {"l2_lerp", false, 0.3}};
  for (const auto& var : variants) {
    const std::string key = std::string("adam/") + var.name + " combo=" + std::to_string(combo) + " n=" +
                            std::to_string(n) + " split=" + std::to_string(split);
    Arrays a = inputs<P, G, S, C>(static_cast<size_t>(n), 1000 * combo + n, true);
    const AdamConsts c = adam_consts(var.adamw, var.beta1);
    const auto& table = anyaccel::adam::segments();
    pieces(n, split, [&](int64_t b, int64_t k) { table[combo](a.ptrs(), b, k, c); });
    a.print_all(key + " step");
    RollbackConsts r{c.beta1, c.beta1_complement, c.beta2, c.beta2_complement, c.eps, c.step_size,
                     c.inv_bc2_sqrt, c.weight_decay, c.decay, c.l2};
    const auto& rollback = anyaccel::adam::rollback_segments();
    pieces(n, split, [&](int64_t b, int64_t k) { rollback[combo](a.ptrs(), b, k, r); });
    a.print_all(key + " rollback");
  }
}
#elif defined(DRIVER_FAMILY_LION)
template <typename P, typename G, typename S, typename C>
void run_combo(int combo, int64_t n, int64_t split) {
  const std::string key = "lion/step combo=" + std::to_string(combo) + " n=" + std::to_string(n) +
                          " split=" + std::to_string(split);
  Arrays a = inputs<P, G, S, C>(static_cast<size_t>(n), 2000 * combo + n, false);
  const double lr = 1e-4, wd = 0.1;
  const anyaccel::lion::LionConsts c{0.9f, static_cast<float>(1.0 - 0.9), 0.99f, static_cast<float>(1.0 - 0.99),
                                     static_cast<float>(-lr), static_cast<float>(1.0 - lr * wd)};
  const auto& table = anyaccel::lion::segments();
  pieces(n, split, [&](int64_t b, int64_t k) { table[combo](a.ptrs(), b, k, c); });
  a.print_all(key);
}
#elif defined(DRIVER_FAMILY_ADAGRAD)
template <typename P, typename G, typename S, typename C>
void run_combo(int combo, int64_t n, int64_t split) {
  const std::string key = "adagrad/step combo=" + std::to_string(combo) + " n=" + std::to_string(n) +
                          " split=" + std::to_string(split);
  Arrays a = inputs<P, G, S, C>(static_cast<size_t>(n), 3000 * combo + n, false);
  // Adagrad's state is a sum of squares: non-negative.
  Rng rng{7u + static_cast<uint64_t>(n)};
  a.s0 = make<S>(static_cast<size_t>(n), rng, 0.01f, true, 0);
  const anyaccel::adagrad::AdagradConsts c{1e-2f, 1e-10f, 0.01f, true};
  const auto& table = anyaccel::adagrad::segments();
  pieces(n, split, [&](int64_t b, int64_t k) { table[combo](a.ptrs(), b, k, c); });
  a.print_all(key);
}
#elif defined(DRIVER_FAMILY_LAMB)
template <typename P, typename G, typename S, typename C>
void run_combo(int combo, int64_t n, int64_t split) {
  for (bool inside : {false, true}) {
    const std::string key = std::string("lamb/") + (inside ? "eps_inside" : "eps_outside") + " combo=" +
                            std::to_string(combo) + " n=" + std::to_string(n) + " split=" + std::to_string(split);
    Arrays a = inputs<P, G, S, C>(static_cast<size_t>(n), 4000 * combo + n, true);
    const double beta2 = 0.999, bc1 = 1.0 - power(0.9, 3), bc2 = 1.0 - power(beta2, 3);
    const anyaccel::lamb::LambConsts c{0.9f, static_cast<float>(1.0 - 0.9), static_cast<float>(beta2),
                                       static_cast<float>(1.0 - beta2), 1e-6f, 0.5f, 0.01f,
                                       static_cast<float>(1e-3 * std::sqrt(bc2) / bc1), inside};
    double w2 = 0, u2 = 0;
    const auto& p1 = anyaccel::lamb::pass1();
    pieces(n, split, [&](int64_t b, int64_t k) { p1[combo](a.ptrs(), b, k, c, &w2, &u2); });
    std::printf("%s norm w2 %a\n%s norm u2 %a\n", key.c_str(), w2, key.c_str(), u2);
    // A fixed trust ratio, so pass 2 is compared on its own (the norms depend on the summation order).
    const auto& p2 = anyaccel::lamb::pass2();
    pieces(n, split, [&](int64_t b, int64_t k) { p2[combo](a.ptrs(), b, k, c, 0.75f); });
    a.print_all(key);
  }
}
#endif

#define DRIVER_RUN_(P, G, S, C)                                                                          \
  if (combo == index) {                                                                                 \
    run_combo<typename DType_##P::type, typename DType_##G::type, typename DType_##S::type,             \
              typename DType_##C::type>(combo, n, split);                                               \
  }                                                                                                     \
  ++index;

void run_all(int64_t n, int64_t split) {
  for (int combo = 0; combo < static_cast<int>(anyaccel::op::kNumCombos); ++combo) {
    int index = 0;
    ANYACCEL_DTYPE_COMBOS(DRIVER_RUN_)
  }
}

}  // namespace

// Usage: kernel_driver SIZE[:SPLIT]...  (each size runs every dtype combination of the family)
int main(int argc, char** argv) {
  std::printf("isa %s width %lld\n", anyaccel::simd::kIsaName,
              static_cast<long long>(anyaccel::simd::Ops::width()));
  for (int k = 1; k < argc; ++k) {
    char* end = nullptr;
    const long long n = std::strtoll(argv[k], &end, 10);
    const long long split = (end != nullptr && *end == ':') ? std::strtoll(end + 1, nullptr, 10) : 0;
    run_all(n, split);
  }
  return 0;
}
