// ATOM's CPU kernels (float32), built on first use by atom/model/kernels.py.
//
// paged_decode: attention of one query token per sequence, read in place from the
// paged KV cache, so no gather copy of K/V is made (the torch fallback gathers every
// sequence's K/V into a padded tensor per layer, then runs SDPA on it).
//
// One task per sequence: it streams the sequence's K rows (every head of a position is
// contiguous) computing every query head's scaled score (GQA heads share a row), takes
// the softmax, then streams the V rows into the weighted sums. Tasks run on ATen's thread pool; the GIL is released meanwhile.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

inline void softmax(float* s, int64_t n) {
  const float m = *std::max_element(s, s + n);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - m);
    sum += s[i];
  }
  const float inv = 1.f / sum;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) s[i] *= inv;
}

}  // namespace

// query [B, H, D]; k_cache, v_cache [num_slots, KV, D] (one layer, contiguous);
// block_tables [B, max_blocks] int64; seq_lens [B] int64 (each >= 1). `window` > 0 keeps
// the last `window` positions only (sliding-window layers); `softcap` > 0 caps the
// scores as softcap * tanh(score / softcap) (Gemma 2). Returns [B, H, D].
torch::Tensor paged_decode(torch::Tensor query, torch::Tensor k_cache, torch::Tensor v_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens,
                           int64_t block_size, double scale, int64_t window, double softcap) {
  TORCH_CHECK(query.scalar_type() == torch::kFloat32 && k_cache.scalar_type() == torch::kFloat32,
              "paged_decode: float32 only");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "paged_decode: cache layout");
  TORCH_CHECK(block_tables.scalar_type() == torch::kInt64 && seq_lens.scalar_type() == torch::kInt64,
              "paged_decode: int64 block tables and lengths");
  auto q = query.contiguous();
  auto tables = block_tables.contiguous();
  auto lens = seq_lens.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), KV = k_cache.size(1);
  TORCH_CHECK(H % KV == 0 && k_cache.size(2) == D, "paged_decode: head shapes");
  const int64_t group = H / KV, max_blocks = tables.size(1), row = KV * D;
  auto out = torch::empty_like(q);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float fscale = static_cast<float>(scale), cap = static_cast<float>(softcap);
  pybind11::gil_scoped_release no_gil;
  at::parallel_for(0, B, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t b = begin; b < end; ++b) {
      const int64_t first = window > 0 ? std::max<int64_t>(0, lp[b] - window) : 0;
      const int64_t len = lp[b] - first;  // attended positions: first .. lp[b] - 1
      const int64_t* table = tp + b * max_blocks;
      const float* qb = qp + b * H * D;  // [H, D]; head h reads kv head h / group
      float* ob = op + b * H * D;
      scores.resize(H * len);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = first + i;
        const float* k = kp + (table[pos / block_size] * block_size + pos % block_size) * row;
        for (int64_t h = 0; h < H; ++h) {
          scores[h * len + i] = dot(qb + h * D, k + (h / group) * D, D) * fscale;
        }
      }
      if (cap > 0.f) {
        for (auto& s : scores) s = cap * std::tanh(s / cap);
      }
      for (int64_t h = 0; h < H; ++h) softmax(scores.data() + h * len, len);
      std::fill(ob, ob + H * D, 0.f);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = first + i;
        const float* v = vp + (table[pos / block_size] * block_size + pos % block_size) * row;
        for (int64_t h = 0; h < H; ++h) axpy(scores[h * len + i], v + (h / group) * D, ob + h * D, D);
      }
    }
  });
  return out;
}

// int8_linear: y = x · (w * scale)ᵀ + bias for a few rows of x (decode at batch 1-4),
// with w int8 [N, K] and one float scale per output row. The activations stay float32
// (no activation quantization); each weight row is read once for every row of x, so
// the cost is streaming the int8 weights, which is what batch-1 decode is bound by.
namespace {

constexpr int64_t kMaxRows = 4;

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
template <int R>
inline void row_dots(const int8_t* w, const float* x, int64_t K, float* out) {
  int64_t k = 0;
#ifdef __AVX2__
  __m256 acc[R][4];
  for (int m = 0; m < R; ++m) {
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm256_setzero_ps();
  }
  for (; k + 32 <= K; k += 32) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    const __m128i lo = _mm256_castsi256_si128(bytes), hi = _mm256_extracti128_si256(bytes, 1);
    const __m256 wv[4] = {widen(lo), widen(_mm_srli_si128(lo, 8)), widen(hi),
                          widen(_mm_srli_si128(hi, 8))};
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

template <int R>
void int8_rows(const int8_t* wp, const float* xp, const float* sp, const float* bp,
               float* op, int64_t N, int64_t K) {
  at::parallel_for(0, N, 16, [&](int64_t begin, int64_t end) {
    float dots[R];
    for (int64_t n = begin; n < end; ++n) {
      row_dots<R>(wp + n * K, xp, K, dots);
      for (int m = 0; m < R; ++m) op[m * N + n] = dots[m] * sp[n] + (bp ? bp[n] : 0.f);
    }
  });
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
  TORCH_CHECK(M <= kMaxRows, "int8_linear: at most ", kMaxRows, " rows");
  TORCH_CHECK(weight.is_contiguous() && scale.is_contiguous(), "int8_linear: layout");
  auto out = torch::empty({M, N}, flat.options());
  const float* xp = flat.data_ptr<float>();
  const int8_t* wp = weight.data_ptr<int8_t>();
  const float* sp = scale.data_ptr<float>();
  const torch::Tensor b = bias.has_value() ? bias->contiguous() : torch::Tensor();
  const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  pybind11::gil_scoped_release no_gil;
  switch (M) {
    case 1: int8_rows<1>(wp, xp, sp, bp, op, N, K); break;
    case 2: int8_rows<2>(wp, xp, sp, bp, op, N, K); break;
    case 3: int8_rows<3>(wp, xp, sp, bp, op, N, K); break;
    case 4: int8_rows<4>(wp, xp, sp, bp, op, N, K); break;
    default: break;  // M == 0: nothing to compute
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return out.view(sizes);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention (CPU, float32)");
  m.def("int8_linear", &int8_linear, "int8-weight linear for up to 4 rows (CPU)");
}
