// paged_decode: attention of one query token per sequence, read in place from the
// paged KV cache, so no gather copy of K/V is made (the torch fallback gathers every
// sequence's K/V into a padded tensor per layer, then runs SDPA on it).
//
// One task per (sequence, query head), so a single sequence still spreads over every
// core: it reads its kv head's K rows computing the scaled scores, takes the softmax,
// then accumulates the V rows. GQA heads of one kv head read the same rows (from
// cache). Tasks run on ATen's thread pool.
#include "ops.h"

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

#ifdef __AVX2__
// q · k[j] for 8 key rows at once: eight independent accumulators keep the multiply-adds
// streaming (one dot product at a time waits on its own chain), then one transposing
// reduction. D is a multiple of 8.
inline __m256 dot8(const float* q, const float* const* k, int64_t D) {
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + d), acc[j]);
  }
  const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}
#endif

// scores[i] = q · k[i] * scale for n key rows.
inline void scores_of(const float* q, const float* const* k, int64_t n, int64_t D, float scale,
                      float* scores) {
  int64_t i = 0;
#ifdef __AVX2__
  if (D % 8 == 0) {
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(scores + i, _mm256_mul_ps(dot8(q, k + i, D), _mm256_set1_ps(scale)));
    }
  }
#endif
  for (; i < n; ++i) scores[i] = dot(q, k[i], D) * scale;
}

// out[D] = Σ_i p[i] * v[i]. Chunks of 64 dimensions keep their 8 accumulators in
// registers across all rows, instead of loading and storing `out` once per row.
inline void weighted_sum(const float* p, const float* const* v, int64_t n, int64_t D,
                         float* out) {
  int64_t d0 = 0;
#ifdef __AVX2__
  for (; d0 + 64 <= D; d0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m256 w = _mm256_set1_ps(p[i]);
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v[i] + d0 + 8 * c), acc[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
  }
#endif
  std::fill(out + d0, out + D, 0.f);
  for (int64_t i = 0; i < n; ++i) {
#pragma omp simd
    for (int64_t d = d0; d < D; ++d) out[d] += p[i] * v[i][d];
  }
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
  // Query rows may be strided (a view of the fused qkv projection); heads must be packed.
  auto q = query.stride(2) == 1 && query.stride(1) == query.size(2) ? query : query.contiguous();
  auto tables = block_tables.contiguous();
  auto lens = seq_lens.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), KV = k_cache.size(1);
  TORCH_CHECK(H % KV == 0 && k_cache.size(2) == D, "paged_decode: head shapes");
  const int64_t group = H / KV, max_blocks = tables.size(1), row = KV * D;
  auto out = torch::empty({B, H, D}, q.options());
  const int64_t q_stride = q.stride(0);
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* lp = lens.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const float fscale = static_cast<float>(scale), cap = static_cast<float>(softcap);
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    std::vector<const float*> k_rows, v_rows;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / H, h = task % H;
      const int64_t first = window > 0 ? std::max<int64_t>(0, lp[b] - window) : 0;
      const int64_t len = lp[b] - first;  // attended positions: first .. lp[b] - 1
      const int64_t* table = tp + b * max_blocks;
      const int64_t kv_offset = (h / group) * D;  // GQA: query head h reads kv head h / group
      scores.resize(len);
      k_rows.resize(len);
      v_rows.resize(len);
      for (int64_t i = 0; i < len; ++i) {
        const int64_t pos = first + i;
        const int64_t slot = table[pos / block_size] * block_size + pos % block_size;
        k_rows[i] = kp + slot * row + kv_offset;
        v_rows[i] = vp + slot * row + kv_offset;
      }
      scores_of(qp + b * q_stride + h * D, k_rows.data(), len, D, fscale, scores.data());
      if (cap > 0.f) {
        for (auto& v : scores) v = cap * std::tanh(v / cap);
      }
      softmax(scores.data(), len);
      weighted_sum(scores.data(), v_rows.data(), len, D, op + (b * H + h) * D);
    }
  });
  return out;
}
