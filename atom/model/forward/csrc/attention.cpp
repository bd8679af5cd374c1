// paged_decode: attention of one query token per sequence, read in place from the
// paged KV cache, so no gather copy of K/V is made (the torch fallback gathers every
// sequence's K/V into a padded tensor per layer, then runs SDPA on it).
//
// A float32, float16 or bfloat16 cache: one task per (sequence, query head), so a single
// sequence still spreads over every core: it reads its kv head's K rows computing the
// scaled scores, takes the softmax, then accumulates the V rows. GQA heads of one kv
// head read the same rows (from cache). An int8 cache: attention_int8.cpp. Tasks run on
// ATen's thread pool.
#include "attention.h"
#include "ops.h"

#include <ATen/Parallel.h>

namespace {

// Rows are read as float32, eight values at a time.
inline float to_float(c10::Half v) { return static_cast<float>(v); }
inline float to_float(c10::BFloat16 v) { return static_cast<float>(v); }

// A cache row as float32: itself, or widened into `scratch` — so the loops after it
// are the same code for every cache type, and a float16 row gives the same result as
// a float32 row holding the same values.
inline const float* widened(const float* row, int64_t, float*) { return row; }
template <typename T>
inline const float* widened(const T* row, int64_t n, float* scratch) {
  for (int64_t i = 0; i < n; ++i) scratch[i] = to_float(row[i]);
  return scratch;
}

// scores[i] = q · k[i] * scale for n key rows; the V rows the weighted sum reads next
// are asked for into the L2 cache on the way.
template <typename T>
inline void scores_of(const float* q, const T* const* k, const T* const* v, int64_t n, int64_t D,
                      float scale, float* scores, float* scratch) {
  int64_t i = 0;
#ifdef __AVX2__
  if (D % 8 == 0) {
    for (; i + 8 <= n; i += 8) {
      const int64_t from = std::min(i + kAhead, n), to = std::min(i + kAhead + 8, n);
      prefetch_rows<_MM_HINT_T0>(k, from, to, 0, D);
      prefetch_rows<_MM_HINT_T1>(v, from, to, 0, D);
      _mm256_storeu_ps(scores + i, _mm256_mul_ps(dot8(q, k + i, D), _mm256_set1_ps(scale)));
    }
  }
#endif
  for (; i < n; ++i) scores[i] = dot(q, widened(k[i], D, scratch), D) * scale;
}

// out[D] = Σ_i p[i] * v[i]. Chunks of 64 dimensions keep their 8 accumulators in
// registers across all rows, instead of loading and storing `out` once per row.
template <typename T>
inline void weighted_sum(const float* p, const T* const* v, int64_t n, int64_t D, float* out,
                         float* scratch) {
  int64_t d0 = 0;
#ifdef __AVX2__
  for (; d0 + 64 <= D; d0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) prefetch_rows<_MM_HINT_T0>(v, i + kAhead, i + kAhead + 1, d0, 64);
      const __m256 w = _mm256_set1_ps(p[i]);
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(w, load8(v[i] + d0 + 8 * c), acc[c]);
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
  }
#endif
  std::fill(out + d0, out + D, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = widened(v[i] + d0, D - d0, scratch);  // dimensions d0..D - 1
#pragma omp simd
    for (int64_t d = d0; d < D; ++d) out[d] += p[i] * row[d - d0];
  }
}

// One task per (sequence, query head) over cache rows of element type T.
template <typename T>
void decode_tasks(const DecodeArgs& a, const T* kp, const T* vp) {
  at::parallel_for(0, a.B * a.H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, scratch(a.D);
    std::vector<const T*> k_rows, v_rows;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / a.H, h = task % a.H;
      rows_of(a, b, (h / a.group) * a.D, kp, vp, k_rows, v_rows);  // GQA: kv head h / group
      const int64_t len = static_cast<int64_t>(k_rows.size());
      scores.resize(len);
      const float* q = a.q + b * a.q_stride + h * a.D;
      scores_of(q, k_rows.data(), v_rows.data(), len, a.D, a.scale, scores.data(), scratch.data());
      cap_and_softmax(a, scores.data(), len);
      weighted_sum(scores.data(), v_rows.data(), len, a.D, a.out + (b * a.H + h) * a.D,
                   scratch.data());
    }
  });
}

}  // namespace

// query [B, H, D] float32; k_cache, v_cache [num_slots, KV, D] (one layer, contiguous;
// float32, float16, bfloat16, or int8 with k_scales, v_scales [num_slots, KV, D / 16]
// float16);
// block_tables [B, max_blocks] int64; seq_lens [B] int64 (each >= 1). `window` > 0 keeps
// the last `window` positions only (sliding-window layers); `softcap` > 0 caps the
// scores as softcap * tanh(score / softcap) (Gemma 2). Returns [B, H, D].
torch::Tensor paged_decode(torch::Tensor query, torch::Tensor k_cache, torch::Tensor v_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens,
                           int64_t block_size, double scale, int64_t window, double softcap,
                           c10::optional<torch::Tensor> k_scales,
                           c10::optional<torch::Tensor> v_scales) {
  const auto kind = k_cache.scalar_type();
  TORCH_CHECK(query.scalar_type() == torch::kFloat32 && v_cache.scalar_type() == kind &&
                  (kind == torch::kFloat32 || kind == torch::kHalf ||
                   kind == torch::kBFloat16 || kind == torch::kChar),
              "paged_decode: float32 queries, a float32, float16, bfloat16 or int8 cache");
  const bool scaled = kind == torch::kChar;
  TORCH_CHECK(scaled == (k_scales.has_value() && v_scales.has_value()),
              "paged_decode: an int8 cache, and only it, comes with its scales");
  TORCH_CHECK(!scaled || (k_scales->scalar_type() == torch::kHalf && k_scales->is_contiguous() &&
                          v_scales->scalar_type() == torch::kHalf && v_scales->is_contiguous() &&
                          k_cache.size(2) % kInt8Group == 0),
              "paged_decode: contiguous float16 scales, a head size of groups of 16");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "paged_decode: cache layout");
  TORCH_CHECK(block_tables.scalar_type() == torch::kInt64 && seq_lens.scalar_type() == torch::kInt64,
              "paged_decode: int64 block tables and lengths");
  // Query rows may be strided (a view of the fused qkv projection); heads must be packed.
  auto q = query.stride(2) == 1 && query.stride(1) == query.size(2) ? query : query.contiguous();
  auto tables = block_tables.contiguous();
  auto lens = seq_lens.contiguous();
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2), KV = k_cache.size(1);
  TORCH_CHECK(H % KV == 0 && k_cache.size(2) == D, "paged_decode: head shapes");
  auto out = torch::empty({B, H, D}, q.options());
  const DecodeArgs args{q.data_ptr<float>(), q.stride(0), B, H, D, H / KV, KV * D,
                        tables.size(1), block_size, window, tables.data_ptr<int64_t>(),
                        lens.data_ptr<int64_t>(), static_cast<float>(scale),
                        static_cast<float>(softcap), out.data_ptr<float>(),
                        scaled ? k_scales->data_ptr<c10::Half>() : nullptr,
                        scaled ? v_scales->data_ptr<c10::Half>() : nullptr};
  if (kind == torch::kChar) {
    decode_int8(args, k_cache.data_ptr<int8_t>(), v_cache.data_ptr<int8_t>());
  } else if (kind == torch::kHalf) {
    decode_tasks(args, k_cache.data_ptr<c10::Half>(), v_cache.data_ptr<c10::Half>());
  } else if (kind == torch::kBFloat16) {
    decode_tasks(args, k_cache.data_ptr<c10::BFloat16>(), v_cache.data_ptr<c10::BFloat16>());
  } else {
    decode_tasks(args, k_cache.data_ptr<float>(), v_cache.data_ptr<float>());
  }
  return out;
}
