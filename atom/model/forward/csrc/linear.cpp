#include "ops.h"

#include <ATen/Parallel.h>

#if defined(__AVX2__) || defined(__F16C__)
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

// int4_linear: y = x · Wᵀ + bias for any number of rows of x (tiled as int8_linear's), with W in 4-bit blocks of 32
// weights along each row, GGUF's Q4_1 blocks: a float16 scale d, a float16 minimum m
// and 32 nibbles q, a weight being d * q + m. A row of K weights is stored as its
// K / 32 scales, then its K / 32 minimums, then the nibbles, 16 bytes a block (byte j:
// weight j low, weight j + 16 high): 0.625 bytes a weight, one stream per row.
// The rows of x are quantized per 32-block to int8 (scale dx) and summed in float
// (sx), so a block contributes d * dx * Σ q·xq + m * sx.
//
// The inner loop takes two blocks at a time: one 32-byte load holds both blocks'
// nibbles, a mask and a shift give their low and high halves, and x is quantized in
// the matching order (block pair p: x of block 2p [0, 16), of 2p + 1 [0, 16), then
// [16, 32) of each), so two integer dot products cover 64 weights. The per-block
// factors d * dx are computed 8 blocks at a time beforehand, four copies each, to
// line up with the dot products' lanes (lanes 0-3: block 2p, 4-7: block 2p + 1).
namespace {

constexpr int64_t kQ4Block = 32;
constexpr int64_t kQ4Bytes = 20;

struct QuantizedRows {
  std::vector<int8_t> q;    // [M, K], block pairs interleaved as described above
  std::vector<float> scale;  // [M, K / 32]
  std::vector<float> sum;    // [M, K / 32]
};

// Rows first.. of a QuantizedRows.
struct RowsView {
  const int8_t* q;
  const float* scale;
  const float* sum;
};

inline RowsView rows_from(const QuantizedRows& xq, int64_t first, int64_t K) {
  const int64_t nb = K / 32;
  return {xq.q.data() + first * K, xq.scale.data() + first * nb, xq.sum.data() + first * nb};
}

// Where element i of block b of a row goes in its quantized copy.
inline int64_t quantized_index(int64_t b, int64_t i, int64_t nb) {
  if (b / 2 * 2 + 1 >= nb) return b * kQ4Block + i;  // an unpaired last block: in order
  return b / 2 * 64 + (i / 16) * 32 + (b % 2) * 16 + i % 16;
}

QuantizedRows quantize_rows(const float* x, int64_t M, int64_t K) {
  const int64_t nb = K / kQ4Block;
  QuantizedRows out{std::vector<int8_t>(M * K), std::vector<float>(M * nb),
                    std::vector<float>(M * nb)};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + m * K + b * kQ4Block;
      float amax = 0.f, sum = 0.f;
      for (int64_t i = 0; i < kQ4Block; ++i) {
        amax = std::max(amax, std::fabs(xb[i]));
        sum += xb[i];
      }
      const float d = amax / 127.f, inv = d > 0.f ? 1.f / d : 0.f;
      int8_t* q = out.q.data() + m * K;
      for (int64_t i = 0; i < kQ4Block; ++i) {
        q[quantized_index(b, i, nb)] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
      }
      out.scale[m * nb + b] = d;
      out.sum[m * nb + b] = sum;
    }
  }
  return out;
}

inline float half_to_float(uint16_t bits) {
#ifdef __F16C__
  return _cvtsh_ss(bits);
#else
  return static_cast<float>(c10::Half(bits, c10::Half::from_bits()));
#endif
}

// factors[(m * nb + b) * 4 + j] = d_b * dx[m, b] for j < 4; min_terms[m] = Σ_b m_b sx[m, b].
template <int R>
inline void block_factors(const uint16_t* scales, const uint16_t* minimums,
                          const RowsView& xq, int64_t nb, float* factors, float* min_terms) {
  for (int m = 0; m < R; ++m) {
    const float* dx = xq.scale + m * nb;
    const float* sx = xq.sum + m * nb;
    float* out = factors + m * nb * 4;
    float total = 0.f;
    int64_t b = 0;
#if defined(__AVX2__) && defined(__F16C__)
    __m256 acc = _mm256_setzero_ps();
    for (; b + 8 <= nb; b += 8) {
      const __m256 d =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + b)));
      const __m256 mn =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(minimums + b)));
      const __m256 f = _mm256_mul_ps(d, _mm256_loadu_ps(dx + b));
      for (int pair = 0; pair < 4; ++pair) {
        const __m256i lanes = _mm256_setr_epi32(2 * pair, 2 * pair, 2 * pair, 2 * pair,
                                                2 * pair + 1, 2 * pair + 1, 2 * pair + 1,
                                                2 * pair + 1);
        _mm256_storeu_ps(out + (b + 2 * pair) * 4, _mm256_permutevar8x32_ps(f, lanes));
      }
      acc = _mm256_fmadd_ps(mn, _mm256_loadu_ps(sx + b), acc);
    }
    total = hsum(acc);
#endif
    for (; b < nb; ++b) {
      const float f = half_to_float(scales[b]) * dx[b];
      for (int j = 0; j < 4; ++j) out[b * 4 + j] = f;
      total += half_to_float(minimums[b]) * sx[b];
    }
    min_terms[m] = total;
  }
}

#ifdef __AVX2__
// acc + Σ of 4-byte groups of q (unsigned, ≤ 15) · x (int8), per int32 lane.
inline __m256i dot_add(__m256i acc, __m256i q, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpbusd_epi32(acc, q, x);
#else  // q ≤ 15, so the pairwise int16 sums cannot saturate
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1)));
#endif
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
#endif

template <int R>
inline void q4_row_dots(const uint8_t* w, const RowsView& xq, int64_t K, float* factors,
                        float* out) {
  const int64_t nb = K / kQ4Block;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(w);
  const uint8_t* nibbles = w + 4 * nb;
  float min_terms[R];
  block_factors<R>(scales, scales + nb, xq, nb, factors, min_terms);
  int64_t b = 0;
#ifdef __AVX2__
  __m256 acc[R];
  for (int m = 0; m < R; ++m) acc[m] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F);
  for (; b + 2 <= nb; b += 2) {
    const __m256i packed = load256(nibbles + 16 * b);
    const __m256i q_low = _mm256_and_si256(packed, low);
    const __m256i q_high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
    for (int m = 0; m < R; ++m) {
      const int8_t* x = xq.q + m * K + b * kQ4Block;
      __m256i dots = dot_add(_mm256_setzero_si256(), q_low, load256(x));
      dots = dot_add(dots, q_high, load256(x + 32));
      const __m256 f = _mm256_loadu_ps(factors + (m * nb + b) * 4);
      acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), f, acc[m]);
    }
  }
  for (int m = 0; m < R; ++m) min_terms[m] += hsum(acc[m]);
#endif
  for (; b < nb; ++b) {  // the unpaired last block (every block without AVX2): in order
    const uint8_t* p = nibbles + 16 * b;
    for (int m = 0; m < R; ++m) {
      const int8_t* x = xq.q + m * K;
      int32_t dot = 0;
      for (int64_t i = 0; i < 16; ++i) {
        dot += (p[i] & 0x0F) * x[quantized_index(b, i, nb)] +
               (p[i] >> 4) * x[quantized_index(b, i + 16, nb)];
      }
      min_terms[m] += factors[(m * nb + b) * 4] * static_cast<float>(dot);
    }
  }
  for (int m = 0; m < R; ++m) out[m] = min_terms[m];
}

void int4_rows(const uint8_t* wp, const QuantizedRows& xq, const float* bp, float* op,
               int64_t M, int64_t N, int64_t K) {
  const int64_t row_bytes = K / kQ4Block * kQ4Bytes;
  for (int64_t m0 = 0; m0 < M; m0 += kRowBlock) {
    const int64_t rows_in_block = std::min(kRowBlock, M - m0);
    at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> factors(kMaxRows * (K / kQ4Block) * 4);
      for (int64_t n = begin; n < end; ++n) {
        for_row_groups(m0, rows_in_block, [&](int64_t g, auto rows) {
          constexpr int R = decltype(rows)::value;
          float dots[R];
          q4_row_dots<R>(wp + n * row_bytes, rows_from(xq, g, K), K, factors.data(), dots);
          for (int m = 0; m < R; ++m) op[(g + m) * N + n] = dots[m] + (bp ? bp[n] : 0.f);
        });
      }
    });
  }
}

}  // namespace

// blocks: uint8 [N, K / 32 * 20] (see above); x float32 [..., K].
torch::Tensor int4_linear(torch::Tensor x, torch::Tensor blocks,
                          c10::optional<torch::Tensor> bias) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && blocks.scalar_type() == torch::kUInt8 &&
                  blocks.is_contiguous(),
              "int4_linear: float32 x, contiguous uint8 blocks");
  const int64_t K = x.size(-1), N = blocks.size(0);
  TORCH_CHECK(K % kQ4Block == 0 && blocks.size(1) == K / kQ4Block * kQ4Bytes,
              "int4_linear: blocks of 32 weights along the input");
  auto flat = x.reshape({-1, K}).contiguous();
  const int64_t M = flat.size(0);
  const QuantizedRows xq = quantize_rows(flat.data_ptr<float>(), M, K);
  auto out = torch::empty({M, N}, flat.options());
  const torch::Tensor b = bias.has_value() ? bias->contiguous() : torch::Tensor();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  const uint8_t* wp = blocks.data_ptr<uint8_t>();
  float* op = out.data_ptr<float>();
  int4_rows(wp, xq, bp, op, M, N, K);
  return shaped_like(out, x, N);
}
