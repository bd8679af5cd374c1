#include "ops.h"

#include <ATen/Parallel.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

// int8_linear: y = x · (w * scale)ᵀ + bias, with w int8 [N, K] and one float scale per
// output row. The activations stay float32 (no activation quantization); each weight
// row is read once for every block of rows of x, so at decode sizes the cost is
// streaming the int8 weights, which is what small-batch decode is bound by.
//
// Any number of rows: x is taken kRowBlock rows at a time (a block stays in L2 while
// every weight row passes by), and each weight row is multiplied with up to kMaxRows
// rows at once (kept in L1, the accumulators in registers).
namespace {

constexpr int64_t kMaxRows = 4;
constexpr int64_t kRowBlock = 32;

// Calls rows(std::integral_constant<int, M>{}) for M in 1..kMaxRows (M == 0: nothing), so
// the row loops get M as a template parameter and keep their accumulators in registers.
template <typename Rows>
void for_rows(int64_t M, Rows&& rows) {
  switch (M) {
    case 1: rows(std::integral_constant<int, 1>{}); break;
    case 2: rows(std::integral_constant<int, 2>{}); break;
    case 3: rows(std::integral_constant<int, 3>{}); break;
    case 4: rows(std::integral_constant<int, 4>{}); break;
    default: break;
  }
}

// Calls group(first_row, rows) for the rows of a block of x in groups of at most
// kMaxRows, rows being a std::integral_constant (see for_rows).
template <typename Group>
void for_row_groups(int64_t first, int64_t count, Group&& group) {
  for (int64_t g = first; g < first + count; g += kMaxRows) {
    for_rows(std::min(kMaxRows, first + count - g), [&](auto rows) { group(g, rows); });
  }
}

// out [M, N] viewed as x's shape with its last size N.
torch::Tensor shaped_like(const torch::Tensor& out, const torch::Tensor& x, int64_t N) {
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return out.view(sizes);
}

#ifdef __AVX2__
inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_hadd_ps(lo, lo);
  lo = _mm_hadd_ps(lo, lo);
  return _mm_cvtss_f32(lo);
}

inline __m256 widen(__m128i eight_bytes) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight_bytes));
}
#endif

// Dot products of one int8 weight row with R float rows of x (stride K). R is a
// template parameter so the accumulators stay in registers; four independent
// accumulators per row keep the FMA units busy instead of waiting on each other.
// Each group of 8 weights is widened straight from memory (a load folded into the
// widening instruction): shuffling a 32-byte load apart first cost ~10 % of the speed,
// and a 512-bit version was slower still on this CPU (Zen 4 splits 512-bit operations).
template <int R>
inline void row_dots(const int8_t* w, const float* x, int64_t K, float* out) {
  int64_t k = 0;
#if defined(__AVX2__)
  __m256 acc[R][4];
  for (int m = 0; m < R; ++m) {
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm256_setzero_ps();
  }
  for (; k + 32 <= K; k += 32) {
    __m256 wv[4];
    for (int j = 0; j < 4; ++j) {
      wv[j] = widen(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + k + 8 * j)));
    }
    for (int m = 0; m < R; ++m) {
      const float* xm = x + m * K + k;
      for (int j = 0; j < 4; ++j) {
        acc[m][j] = _mm256_fmadd_ps(wv[j], _mm256_loadu_ps(xm + 8 * j), acc[m][j]);
      }
    }
  }
  for (int m = 0; m < R; ++m) {
    out[m] = hsum(_mm256_add_ps(_mm256_add_ps(acc[m][0], acc[m][1]),
                                _mm256_add_ps(acc[m][2], acc[m][3])));
  }
#else
  for (int m = 0; m < R; ++m) out[m] = 0.f;
#endif
  for (; k < K; ++k) {
    for (int m = 0; m < R; ++m) out[m] += static_cast<float>(w[k]) * x[m * K + k];
  }
}

void int8_rows(const int8_t* wp, const float* xp, const float* sp, const float* bp,
               float* op, int64_t M, int64_t N, int64_t K) {
  for (int64_t m0 = 0; m0 < M; m0 += kRowBlock) {
    const int64_t rows_in_block = std::min(kRowBlock, M - m0);
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        for_row_groups(m0, rows_in_block, [&](int64_t g, auto rows) {
          constexpr int R = decltype(rows)::value;
          float dots[R];
          row_dots<R>(wp + n * K, xp + g * K, K, dots);
          for (int m = 0; m < R; ++m) op[(g + m) * N + n] = dots[m] * sp[n] + (bp ? bp[n] : 0.f);
        });
      }
    });
  }
}

}  // namespace

torch::Tensor int8_linear(torch::Tensor x, torch::Tensor weight, torch::Tensor scale,
                          c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kInt8 &&
                  scale.scalar_type() == torch::kFloat32,
              "int8_linear: float32 x, int8 weight, float32 scale");
  const int64_t K = weight.size(1), N = weight.size(0);
  auto flat = x.reshape({-1, K}).contiguous();
  const int64_t M = flat.size(0);
  TORCH_CHECK(weight.is_contiguous() && scale.is_contiguous(), "int8_linear: layout");
  auto out = torch::empty({M, N}, flat.options());
  const float* xp = flat.data_ptr<float>();
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  const torch::Tensor b = bias.has_value() ? bias->contiguous() : torch::Tensor();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  int8_rows(wp, xp, sp, bp, op, M, N, K);
  return shaped_like(out, x, N);
}
