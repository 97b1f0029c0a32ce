// SIMD vocabulary shared by anyaccel's CPU kernels.
//
// Exactly one ISA level is compiled in, chosen by the builder through one macro (docs/architecture.md,
// "CPU ISA levels"): ANYACCEL_ISA_AVX512, ANYACCEL_ISA_AVX2, ANYACCEL_ISA_NEON, ANYACCEL_ISA_SVE, or none
// (portable).
//
// The kernels are written against `anyaccel::simd::Ops`: static functions over a vector `Ops::T` of fp32
// lanes, loads/stores that convert from/to fp32, bf16 and fp16 storage, and a loop protocol
// (`Ops::next`/`Ops::width`/`Ops::done`). Two shapes implement it:
//   * fixed width (AVX-512, AVX2, NEON, portable): `VecF`, a class of `VecF::kWidth` lanes, wrapped by
//     `FixedOps<VecF>`. The loop visits whole vectors only; kernels run the last n < kWidth elements
//     through vector-width stack buffers (host_kernels.h, TailBuffer).
//   * SVE (vector-length agnostic): `SveOps` over svfloat32_t, whose length is svcntw() lanes at run time
//     (128 to 2048 bits; nothing assumes one). SVE vectors are sizeless types: they cannot be class members,
//     so the vocabulary is free functions rather than a class with operators. The loop is predicated
//     (svwhilelt): the last vector's inactive lanes are loaded as zero and never stored, so there is no tail.
//
// Conversions:
//   * bf16 -> fp32 is exact (the bf16 bits are the high half of the fp32 bits).
//   * fp32 -> bf16 rounds to nearest, ties to even, and maps NaN to the quiet NaN 0x7FC0; this is the rule
//     of c10::BFloat16 (torch/headeronly/util/BFloat16.h, round_to_nearest_even), so vector lanes and scalar tails agree.
//   * fp16 uses the F16C instructions on x86 (vcvtph2ps / vcvtps2ph with _MM_FROUND_TO_NEAREST_INT), the
//     FCVT family on aarch64, NEON and SVE (round to nearest even under the default FPCR), and c10::Half in
//     scalar code; all round to nearest even.
//
// sign(x) follows torch.sign (https://pytorch.org/docs/stable/generated/torch.sign.html): +1 for x > 0,
// -1 for x < 0, and x itself for +-0 and NaN (so sign(0) = 0 and NaN propagates). Every level uses the same
// rule: an ordered "x != 0" mask selects copysign(1, x), otherwise x passes through.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include <torch/headeronly/util/BFloat16.h>
#include <torch/headeronly/util/Half.h>

#if defined(ANYACCEL_ISA_AVX512) || defined(ANYACCEL_ISA_AVX2)
#include <immintrin.h>
#elif defined(ANYACCEL_ISA_NEON)
#if !defined(__aarch64__)
#error "ANYACCEL_ISA_NEON is only supported on aarch64"
#endif
#include <arm_neon.h>
#elif defined(ANYACCEL_ISA_SVE)
#if !defined(__aarch64__) || !defined(__ARM_FEATURE_SVE)
#error "ANYACCEL_ISA_SVE needs aarch64 and SVE code generation (-march=armv8.2-a+sve)"
#endif
#include <arm_sve.h>
#endif

namespace anyaccel {
namespace simd {

// ---------------------------------------------------------------------------------------------------------
// Scalar conversions (used by the portable level and by the scalar tails of every level).
// ---------------------------------------------------------------------------------------------------------

inline float load_scalar(const float* p) { return *p; }

inline float load_scalar(const c10::BFloat16* p) {
  uint32_t bits = static_cast<uint32_t>(p->x) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

inline float load_scalar(const c10::Half* p) { return static_cast<float>(*p); }

inline void store_scalar(float* p, float x) { *p = x; }

inline void store_scalar(c10::BFloat16* p, float x) {
  // Round to nearest even; NaN becomes the canonical quiet NaN (c10::BFloat16's rule).
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  uint16_t out;
  if (std::isnan(x)) {
    out = 0x7FC0;
  } else {
    const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
    out = static_cast<uint16_t>((bits + rounding_bias) >> 16);
  }
  p->x = out;
}

inline void store_scalar(c10::Half* p, float x) { *p = c10::Half(x); }

// torch.sign on one float: +-1 where x is ordered and non-zero, else x (+-0, NaN).
inline float sign_scalar(float x) { return (x > 0.0f || x < 0.0f) ? std::copysign(1.0f, x) : x; }

// ---------------------------------------------------------------------------------------------------------
// AVX-512: 16 fp32 lanes.
// ---------------------------------------------------------------------------------------------------------
#if defined(ANYACCEL_ISA_AVX512)

inline constexpr const char* kIsaName = "avx512";

struct VecF {
  static constexpr int64_t kWidth = 16;
  __m512 v;

  static VecF set1(float x) { return {_mm512_set1_ps(x)}; }
  static VecF load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static VecF load(const c10::BFloat16* p) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
  }
  static VecF load(const c10::Half* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  void store(c10::BFloat16* p) const {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i bias = _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, bias), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7FC0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(rounded));
  }
  void store(c10::Half* p) const {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  friend VecF operator+(VecF a, VecF b) { return {_mm512_add_ps(a.v, b.v)}; }
  friend VecF operator-(VecF a, VecF b) { return {_mm512_sub_ps(a.v, b.v)}; }
  friend VecF operator*(VecF a, VecF b) { return {_mm512_mul_ps(a.v, b.v)}; }
  friend VecF operator/(VecF a, VecF b) { return {_mm512_div_ps(a.v, b.v)}; }
  // a * b + c, one rounding.
  static VecF fma(VecF a, VecF b, VecF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  // c - a * b, one rounding.
  static VecF fnma(VecF a, VecF b, VecF c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
  static VecF sqrt(VecF a) { return {_mm512_sqrt_ps(a.v)}; }
  // torch.sign: +-1 where a is ordered and non-zero, else a (+-0, NaN).
  static VecF sign(VecF a) {
    const __m512 one = _mm512_or_ps(_mm512_and_ps(a.v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(a.v, _mm512_setzero_ps(), _CMP_NEQ_OQ);
    return {_mm512_mask_mov_ps(a.v, nonzero, one)};
  }
  // 0 where a < 0, else a (NaN and -0 stay): clamps a rounding error below zero of a non-negative value.
  static VecF clamp_negative(VecF a) {
    return {_mm512_mask_mov_ps(a.v, _mm512_cmp_ps_mask(a.v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps())};
  }
  // a where a is finite, else 0 (inf and NaN become 0).
  static VecF finite_or_zero(VecF a) {
    return {_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(_mm512_sub_ps(a.v, a.v), _mm512_setzero_ps(), _CMP_EQ_OQ), a.v)};
  }
};

// ---------------------------------------------------------------------------------------------------------
// AVX2 + FMA + F16C: 8 fp32 lanes.
// ---------------------------------------------------------------------------------------------------------
#elif defined(ANYACCEL_ISA_AVX2)

inline constexpr const char* kIsaName = "avx2";

struct VecF {
  static constexpr int64_t kWidth = 8;
  __m256 v;

  static VecF set1(float x) { return {_mm256_set1_ps(x)}; }
  static VecF load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static VecF load(const c10::BFloat16* p) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))};
  }
  static VecF load(const c10::Half* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
  }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  void store(c10::BFloat16* p) const {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, bias), 16);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    rounded = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
    // Every lane is <= 0xFFFF, so the unsigned saturating pack is exact.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(rounded), _mm256_extracti128_si256(rounded, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
  }
  void store(c10::Half* p) const {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  friend VecF operator+(VecF a, VecF b) { return {_mm256_add_ps(a.v, b.v)}; }
  friend VecF operator-(VecF a, VecF b) { return {_mm256_sub_ps(a.v, b.v)}; }
  friend VecF operator*(VecF a, VecF b) { return {_mm256_mul_ps(a.v, b.v)}; }
  friend VecF operator/(VecF a, VecF b) { return {_mm256_div_ps(a.v, b.v)}; }
  static VecF fma(VecF a, VecF b, VecF c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static VecF fnma(VecF a, VecF b, VecF c) { return {_mm256_fnmadd_ps(a.v, b.v, c.v)}; }
  static VecF sqrt(VecF a) { return {_mm256_sqrt_ps(a.v)}; }
  // torch.sign: +-1 where a is ordered and non-zero, else a (+-0, NaN).
  static VecF sign(VecF a) {
    const __m256 one = _mm256_or_ps(_mm256_and_ps(a.v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(1.0f));
    const __m256 nonzero = _mm256_cmp_ps(a.v, _mm256_setzero_ps(), _CMP_NEQ_OQ);
    return {_mm256_blendv_ps(a.v, one, nonzero)};
  }
  // 0 where a < 0, else a (NaN and -0 stay): clamps a rounding error below zero of a non-negative value.
  static VecF clamp_negative(VecF a) {
    const __m256 negative = _mm256_cmp_ps(a.v, _mm256_setzero_ps(), _CMP_LT_OQ);
    return {_mm256_andnot_ps(negative, a.v)};
  }
  // a where a is finite, else 0 (inf and NaN become 0).
  static VecF finite_or_zero(VecF a) {
    return {_mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a.v, a.v), _mm256_setzero_ps(), _CMP_EQ_OQ), a.v)};
  }
};

// ---------------------------------------------------------------------------------------------------------
// NEON (aarch64): 4 fp32 lanes.
// ---------------------------------------------------------------------------------------------------------
#elif defined(ANYACCEL_ISA_NEON)

inline constexpr const char* kIsaName = "neon";

struct VecF {
  static constexpr int64_t kWidth = 4;
  float32x4_t v;

  static VecF set1(float x) { return {vdupq_n_f32(x)}; }
  static VecF load(const float* p) { return {vld1q_f32(p)}; }
  static VecF load(const c10::BFloat16* p) {
    const uint16x4_t h = vld1_u16(reinterpret_cast<const uint16_t*>(p));
    return {vreinterpretq_f32_u32(vshlq_n_u32(vmovl_u16(h), 16))};
  }
  static VecF load(const c10::Half* p) {
    return {vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))))};
  }
  void store(float* p) const { vst1q_f32(p, v); }
  void store(c10::BFloat16* p) const {
    const uint32x4_t bits = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(bits, 16), vdupq_n_u32(1));
    const uint32x4_t bias = vaddq_u32(lsb, vdupq_n_u32(0x7FFF));
    uint32x4_t rounded = vshrq_n_u32(vaddq_u32(bits, bias), 16);
    const uint32x4_t is_num = vceqq_f32(v, v);  // all ones where not NaN
    rounded = vbslq_u32(is_num, rounded, vdupq_n_u32(0x7FC0));
    vst1_u16(reinterpret_cast<uint16_t*>(p), vmovn_u32(rounded));
  }
  void store(c10::Half* p) const {
    vst1_u16(reinterpret_cast<uint16_t*>(p), vreinterpret_u16_f16(vcvt_f16_f32(v)));
  }
  friend VecF operator+(VecF a, VecF b) { return {vaddq_f32(a.v, b.v)}; }
  friend VecF operator-(VecF a, VecF b) { return {vsubq_f32(a.v, b.v)}; }
  friend VecF operator*(VecF a, VecF b) { return {vmulq_f32(a.v, b.v)}; }
  friend VecF operator/(VecF a, VecF b) { return {vdivq_f32(a.v, b.v)}; }
  static VecF fma(VecF a, VecF b, VecF c) { return {vfmaq_f32(c.v, a.v, b.v)}; }
  static VecF fnma(VecF a, VecF b, VecF c) { return {vfmsq_f32(c.v, a.v, b.v)}; }
  static VecF sqrt(VecF a) { return {vsqrtq_f32(a.v)}; }
  // torch.sign: +-1 where a is ordered and non-zero, else a (+-0, NaN).
  static VecF sign(VecF a) {
    const uint32x4_t sign_bit = vdupq_n_u32(0x80000000u);
    const float32x4_t one = vbslq_f32(sign_bit, a.v, vdupq_n_f32(1.0f));  // copysign(1, a)
    const float32x4_t zero = vdupq_n_f32(0.0f);
    const uint32x4_t nonzero = vorrq_u32(vcgtq_f32(a.v, zero), vcltq_f32(a.v, zero));  // false for NaN
    return {vbslq_f32(nonzero, one, a.v)};
  }
  // 0 where a < 0, else a (NaN and -0 stay): clamps a rounding error below zero of a non-negative value.
  static VecF clamp_negative(VecF a) {
    const float32x4_t zero = vdupq_n_f32(0.0f);
    return {vbslq_f32(vcltq_f32(a.v, zero), zero, a.v)};
  }
  // a where a is finite, else 0 (inf and NaN become 0).
  static VecF finite_or_zero(VecF a) {
    const float32x4_t zero = vdupq_n_f32(0.0f);
    return {vbslq_f32(vceqq_f32(vsubq_f32(a.v, a.v), zero), a.v, zero)};
  }
};

// ---------------------------------------------------------------------------------------------------------
// SVE (aarch64): svcntw() fp32 lanes, known at run time only. See SveOps below.
// ---------------------------------------------------------------------------------------------------------
#elif defined(ANYACCEL_ISA_SVE)

inline constexpr const char* kIsaName = "sve";

// ---------------------------------------------------------------------------------------------------------
// Portable: one lane; the compiler may auto-vectorise the loops built on it.
// ---------------------------------------------------------------------------------------------------------
#else

inline constexpr const char* kIsaName = "portable";

struct VecF {
  static constexpr int64_t kWidth = 1;
  float v;

  static VecF set1(float x) { return {x}; }
  template <typename T>
  static VecF load(const T* p) { return {load_scalar(p)}; }
  template <typename T>
  void store(T* p) const { store_scalar(p, v); }
  friend VecF operator+(VecF a, VecF b) { return {a.v + b.v}; }
  friend VecF operator-(VecF a, VecF b) { return {a.v - b.v}; }
  friend VecF operator*(VecF a, VecF b) { return {a.v * b.v}; }
  friend VecF operator/(VecF a, VecF b) { return {a.v / b.v}; }
  static VecF fma(VecF a, VecF b, VecF c) { return {std::fma(a.v, b.v, c.v)}; }
  static VecF fnma(VecF a, VecF b, VecF c) { return {std::fma(-a.v, b.v, c.v)}; }
  static VecF sqrt(VecF a) { return {std::sqrt(a.v)}; }
  static VecF sign(VecF a) { return {sign_scalar(a.v)}; }
  static VecF clamp_negative(VecF a) { return {a.v < 0.0f ? 0.0f : a.v}; }
  static VecF finite_or_zero(VecF a) { return {std::isfinite(a.v) ? a.v : 0.0f}; }
};

#endif

// One fp32 lane with the same operations, for the scalar tails of the vector levels.
struct ScalarF {
  static constexpr int64_t kWidth = 1;
  float v;

  static ScalarF set1(float x) { return {x}; }
  template <typename T>
  static ScalarF load(const T* p) { return {load_scalar(p)}; }
  template <typename T>
  void store(T* p) const { store_scalar(p, v); }
  friend ScalarF operator+(ScalarF a, ScalarF b) { return {a.v + b.v}; }
  friend ScalarF operator-(ScalarF a, ScalarF b) { return {a.v - b.v}; }
  friend ScalarF operator*(ScalarF a, ScalarF b) { return {a.v * b.v}; }
  friend ScalarF operator/(ScalarF a, ScalarF b) { return {a.v / b.v}; }
  static ScalarF fma(ScalarF a, ScalarF b, ScalarF c) { return {std::fma(a.v, b.v, c.v)}; }
  static ScalarF fnma(ScalarF a, ScalarF b, ScalarF c) { return {std::fma(-a.v, b.v, c.v)}; }
  static ScalarF sqrt(ScalarF a) { return {std::sqrt(a.v)}; }
  static ScalarF sign(ScalarF a) { return {sign_scalar(a.v)}; }
  static ScalarF clamp_negative(ScalarF a) { return {a.v < 0.0f ? 0.0f : a.v}; }
  static ScalarF finite_or_zero(ScalarF a) { return {std::isfinite(a.v) ? a.v : 0.0f}; }
};

// ---------------------------------------------------------------------------------------------------------
// The kernels' vocabulary over a fixed-width vector class W (VecF of a fixed-width level, or ScalarF).
// ---------------------------------------------------------------------------------------------------------
template <typename W>
struct FixedOps {
  using T = W;
  struct Pred {};  // whole vectors only: no lane predicate
  static constexpr bool kPredicated = false;
  // Lanes of the stack buffers the kernels run their last n < kTailWidth elements through.
  static constexpr int64_t kTailWidth = W::kWidth;

  // Loop protocol: for (i = 0; next(i, n, pg); i += width()) {...}; done(i, n) elements were updated.
  static bool next(int64_t i, int64_t n, Pred&) { return i + W::kWidth <= n; }
  static constexpr int64_t width() { return W::kWidth; }
  static int64_t done(int64_t i, int64_t) { return i; }

  static T set1(float x) { return W::set1(x); }
  template <typename S>
  static T load(Pred, const S* p) { return W::load(p); }
  template <typename S>
  static void store(Pred, S* p, T x) { x.store(p); }
  static T add(T a, T b) { return a + b; }
  static T sub(T a, T b) { return a - b; }
  static T mul(T a, T b) { return a * b; }
  static T div(T a, T b) { return a / b; }
  static T fma(T a, T b, T c) { return W::fma(a, b, c); }    // a * b + c, one rounding
  static T fnma(T a, T b, T c) { return W::fnma(a, b, c); }  // c - a * b, one rounding
  static T sqrt(T a) { return W::sqrt(a); }
  static T sign(T a) { return W::sign(a); }
  static T clamp_negative(T a) { return W::clamp_negative(a); }
  static T finite_or_zero(T a) { return W::finite_or_zero(a); }
  // Sum of the lanes in double, in lane order.
  static double lane_sum(T x) {
    alignas(64) float f[W::kWidth];
    x.store(f);
    double s = 0;
    for (int64_t k = 0; k < W::kWidth; ++k) s += f[k];
    return s;
  }
};

#if defined(ANYACCEL_ISA_SVE)
// ---------------------------------------------------------------------------------------------------------
// The kernels' vocabulary on SVE. Arithmetic runs on every lane (an all-true predicate): the inactive lanes
// of the last vector hold the zeros their predicated loads gave them, and no store writes them back.
// Every operation is the IEEE operation of the other levels (FMLA/FMLS fuse, FDIV and FSQRT round
// correctly), so results match them lane for lane.
// ---------------------------------------------------------------------------------------------------------
struct SveOps {
  using T = svfloat32_t;
  using Pred = svbool_t;
  static constexpr bool kPredicated = true;
  static constexpr int64_t kTailWidth = 1;  // no tail: the loop's predicate covers it
  // Most fp32 lanes of any SVE vector (2048 bits).
  static constexpr int64_t kMaxWidth = 64;

  static bool next(int64_t i, int64_t n, Pred& pg) {
    pg = svwhilelt_b32(i, n);
    return i < n;
  }
  static int64_t width() { return static_cast<int64_t>(svcntw()); }
  static int64_t done(int64_t, int64_t n) { return n; }

  static svbool_t all() { return svptrue_b32(); }
  static T set1(float x) { return svdup_n_f32(x); }
  static T load(Pred pg, const float* p) { return svld1_f32(pg, p); }
  static T load(Pred pg, const c10::BFloat16* p) {
    const svuint32_t h = svld1uh_u32(pg, reinterpret_cast<const uint16_t*>(p));  // zero-extended halves
    return svreinterpret_f32_u32(svlsl_n_u32_x(all(), h, 16));
  }
  static T load(Pred pg, const c10::Half* p) {
    // Each fp16 sits in the low half of a 32-bit container, where FCVT (.S from .H) reads it.
    const svuint32_t h = svld1uh_u32(pg, reinterpret_cast<const uint16_t*>(p));
    return svcvt_f32_f16_x(all(), svreinterpret_f16_u32(h));
  }
  static void store(Pred pg, float* p, T x) { svst1_f32(pg, p, x); }
  static void store(Pred pg, c10::BFloat16* p, T x) {
    const svuint32_t bits = svreinterpret_u32_f32(x);
    const svuint32_t lsb = svand_n_u32_x(all(), svlsr_n_u32_x(all(), bits, 16), 1);
    const svuint32_t bias = svadd_n_u32_x(all(), lsb, 0x7FFF);
    svuint32_t rounded = svlsr_n_u32_x(all(), svadd_u32_x(all(), bits, bias), 16);
    rounded = svsel_u32(svcmpuo_f32(all(), x, x), svdup_n_u32(0x7FC0), rounded);
    svst1h_u32(pg, reinterpret_cast<uint16_t*>(p), rounded);  // the low half of each lane
  }
  static void store(Pred pg, c10::Half* p, T x) {
    // FCVT (.H from .S) writes each result to the low half of its 32-bit container; ST1H stores that half.
    const svfloat16_t h = svcvt_f16_f32_x(all(), x);
    svst1h_u32(pg, reinterpret_cast<uint16_t*>(p), svreinterpret_u32_f16(h));
  }
  static T add(T a, T b) { return svadd_f32_x(all(), a, b); }
  static T sub(T a, T b) { return svsub_f32_x(all(), a, b); }
  static T mul(T a, T b) { return svmul_f32_x(all(), a, b); }
  static T div(T a, T b) { return svdiv_f32_x(all(), a, b); }
  static T fma(T a, T b, T c) { return svmla_f32_x(all(), c, a, b); }   // c + a * b, one rounding
  static T fnma(T a, T b, T c) { return svmls_f32_x(all(), c, a, b); }  // c - a * b, one rounding
  static T sqrt(T a) { return svsqrt_f32_x(all(), a); }
  // torch.sign: +-1 where a is ordered and non-zero, else a (+-0, NaN).
  static T sign(T a) {
    const svuint32_t sign_bit = svand_n_u32_x(all(), svreinterpret_u32_f32(a), 0x80000000u);
    const T one = svreinterpret_f32_u32(svorr_n_u32_x(all(), sign_bit, 0x3F800000u));  // copysign(1, a)
    const svbool_t nonzero = svorr_b_z(all(), svcmpgt_n_f32(all(), a, 0.0f), svcmplt_n_f32(all(), a, 0.0f));
    return svsel_f32(nonzero, one, a);
  }
  // 0 where a < 0, else a (NaN and -0 stay).
  static T clamp_negative(T a) { return svsel_f32(svcmplt_n_f32(all(), a, 0.0f), svdup_n_f32(0.0f), a); }
  // a where a is finite, else 0 (inf and NaN become 0).
  static T finite_or_zero(T a) {
    return svsel_f32(svcmpeq_n_f32(all(), svsub_f32_x(all(), a, a), 0.0f), a, svdup_n_f32(0.0f));
  }
  // Sum of the lanes in double, in lane order (as FixedOps::lane_sum).
  static double lane_sum(T x) {
    alignas(64) float f[kMaxWidth];
    svst1_f32(all(), f, x);
    double s = 0;
    for (int64_t k = 0; k < width(); ++k) s += f[k];
    return s;
  }
};

using Ops = SveOps;
#else
using Ops = FixedOps<VecF>;
#endif

}  // namespace simd
}  // namespace anyaccel
