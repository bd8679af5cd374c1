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
#include <type_traits>
#include <vector>

namespace {

// The cache holds float32, float16, bfloat16 or int8 (`--kv-cache-dtype`); rows are read
// as float32, eight values at a time. An int8 row has a float16 scale for each group of
// kInt8Group values (a value is int8 * its group's scale): the key's scales multiply the
// query's groups, the value's the weights.
constexpr int64_t kInt8Group = 16;  // atom/model/forward/attention.py's INT8_GROUP
inline float to_float(c10::Half v) { return static_cast<float>(v); }
inline float to_float(c10::BFloat16 v) { return static_cast<float>(v); }
inline float to_float(int8_t v) { return static_cast<float>(v); }

#ifdef __AVX2__
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const c10::BFloat16* p) {  // a bfloat16 is a float32's top 16 bits
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
#endif

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// A cache row as float32: itself, or widened into `scratch` — so the loops after it
// are the same code for every cache type, and a float16 row gives the same result as
// a float32 row holding the same values.
inline const float* widened(const float* row, int64_t, float*) { return row; }
template <typename T>
inline const float* widened(const T* row, int64_t n, float* scratch) {
  for (int64_t i = 0; i < n; ++i) scratch[i] = to_float(row[i]);
  return scratch;
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
// The cache lines of values [first, first + count) of rows [from, to), asked for ahead
// of their use. A sequence's rows are scattered over its blocks, so the CPU's own
// prefetchers miss them: without this the loops below wait on memory, reading the
// cache at a fraction of the machine's bandwidth (bench/results/history.md, 2026-12-05).
template <int Hint, typename T>
inline void prefetch_rows(const T* const* rows, int64_t from, int64_t to, int64_t first,
                          int64_t count) {
  constexpr int64_t per_line = 64 / sizeof(T);
  for (int64_t j = from; j < to; ++j) {
    for (int64_t d = first; d < first + count; d += per_line) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[j] + d), static_cast<_mm_hint>(Hint));
    }
  }
}

// How far ahead of the row in use the loops ask for rows.
constexpr int64_t kAhead = 16;

// q · k[j] for 8 key rows at once: eight independent accumulators keep the multiply-adds
// streaming (one dot product at a time waits on its own chain), then one transposing
// reduction. D is a multiple of 8.
inline __m256 reduce8(const __m256* acc) {  // the 8 sums of acc[0..7], in one vector
  const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

template <typename T>
inline __m256 dot8(const float* q, const T* const* k, int64_t D) {
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_fmadd_ps(qv, load8(k[j] + d), acc[j]);
  }
  return reduce8(acc);
}

// q · k[j] for 8 int8 key rows, each group of kInt8Group values times its row's scale
// (`scales`: row j's groups at j * groups).
inline __m256 dot8_int8(const float* q, const int8_t* const* k, const float* scales, int64_t D) {
  const int64_t groups = D / kInt8Group;
  __m256 acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    const int64_t g = d / kInt8Group;
    for (int j = 0; j < 8; ++j) {
      const __m256 scaled = _mm256_mul_ps(qv, _mm256_set1_ps(scales[j * groups + g]));
      acc[j] = _mm256_fmadd_ps(scaled, load8(k[j] + d), acc[j]);
    }
  }
  return reduce8(acc);
}
#endif

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

// scores_of for int8 rows with group scales (`ks`: row i's groups at i * groups).
inline void scores_of_int8(const float* q, const int8_t* const* k, const int8_t* const* v,
                           const float* ks, int64_t n, int64_t D, float scale, float* scores) {
  const int64_t groups = D / kInt8Group;
  int64_t i = 0;
#ifdef __AVX2__
  for (; i + 8 <= n; i += 8) {
    const int64_t from = std::min(i + kAhead, n), to = std::min(i + kAhead + 8, n);
    prefetch_rows<_MM_HINT_T0>(k, from, to, 0, D);
    prefetch_rows<_MM_HINT_T1>(v, from, to, 0, D);
    const __m256 dots = dot8_int8(q, k + i, ks + i * groups, D);
    _mm256_storeu_ps(scores + i, _mm256_mul_ps(dots, _mm256_set1_ps(scale)));
  }
#endif
  for (; i < n; ++i) {
    float acc = 0.f;
    for (int64_t d = 0; d < D; ++d) acc += q[d] * static_cast<float>(k[i][d]) * ks[i * groups + d / kInt8Group];
    scores[i] = acc * scale;
  }
}

// weighted_sum for int8 rows: out[D] = Σ_i p[i] * v[i] * its group scale (`vs` as `ks`).
inline void weighted_sum_int8(const float* p, const int8_t* const* v, const float* vs, int64_t n,
                              int64_t D, float* out) {
  const int64_t groups = D / kInt8Group;
  int64_t d0 = 0;
#ifdef __AVX2__
  for (; d0 + 64 <= D; d0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) prefetch_rows<_MM_HINT_T0>(v, i + kAhead, i + kAhead + 1, d0, 64);
      for (int c = 0; c < 8; ++c) {
        const __m256 w = _mm256_set1_ps(p[i] * vs[i * groups + (d0 + 8 * c) / kInt8Group]);
        acc[c] = _mm256_fmadd_ps(w, load8(v[i] + d0 + 8 * c), acc[c]);
      }
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
  }
#endif
  std::fill(out + d0, out + D, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = d0; d < D; ++d) {
      out[d] += p[i] * vs[i * groups + d / kInt8Group] * static_cast<float>(v[i][d]);
    }
  }
}

struct DecodeArgs {
  const float* q;
  int64_t q_stride, B, H, D, group, row, max_blocks, block_size, window;
  const int64_t* tables;
  const int64_t* lens;
  float scale, cap;
  float* out;
  const c10::Half* k_scales;  // int8 rows: [num_slots, KV, D / kInt8Group] (else null)
  const c10::Half* v_scales;
};

// One task per (sequence, query head) over cache rows of element type T.
template <typename T>
void decode_tasks(const DecodeArgs& a, const T* kp, const T* vp) {
  at::parallel_for(0, a.B * a.H, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, scratch(a.D), k_scale, v_scale;
    std::vector<const T*> k_rows, v_rows;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / a.H, h = task % a.H;
      const int64_t first = a.window > 0 ? std::max<int64_t>(0, a.lens[b] - a.window) : 0;
      const int64_t len = a.lens[b] - first;  // attended positions: first .. lens[b] - 1
      const int64_t* table = a.tables + b * a.max_blocks;
      const int64_t kv_offset = (h / a.group) * a.D;  // GQA: query head h reads kv head h / group
      scores.resize(len);
      k_rows.resize(len);
      v_rows.resize(len);
      const int64_t groups = a.D / kInt8Group;
      if (a.k_scales != nullptr) {
        k_scale.resize(len * groups);
        v_scale.resize(len * groups);
      }
      // the rows block by block: one division a block, not two a position (an integer
      // division costs ~15 cycles, and a step of 32 sequences of 256 tokens asks for
      // ~2.2 million positions)
      for (int64_t i = 0, pos = first; i < len;) {
        const int64_t offset = pos % a.block_size;
        const int64_t base = table[pos / a.block_size] * a.block_size + offset;
        const int64_t n = std::min(a.block_size - offset, len - i);
        for (int64_t o = 0; o < n; ++o, ++i) {
          k_rows[i] = kp + (base + o) * a.row + kv_offset;
          v_rows[i] = vp + (base + o) * a.row + kv_offset;
          if (a.k_scales != nullptr) {  // this row's group scales, widened
            const int64_t at = ((base + o) * (a.row / a.D) + kv_offset / a.D) * groups;
            for (int64_t g = 0; g < groups; ++g) {
              k_scale[i * groups + g] = static_cast<float>(a.k_scales[at + g]);
              v_scale[i * groups + g] = static_cast<float>(a.v_scales[at + g]);
            }
          }
        }
        pos += n;
      }
      const float* q = a.q + b * a.q_stride + h * a.D;
      if constexpr (std::is_same_v<T, int8_t>) {
        scores_of_int8(q, k_rows.data(), v_rows.data(), k_scale.data(), len, a.D, a.scale,
                       scores.data());
      } else {
        scores_of(q, k_rows.data(), v_rows.data(), len, a.D, a.scale, scores.data(),
                  scratch.data());
      }
      if (a.cap > 0.f) {
        for (auto& v : scores) v = a.cap * std::tanh(v / a.cap);
      }
      softmax(scores.data(), len);
      float* out = a.out + (b * a.H + h) * a.D;
      if constexpr (std::is_same_v<T, int8_t>) {
        weighted_sum_int8(scores.data(), v_rows.data(), v_scale.data(), len, a.D, out);
      } else {
        weighted_sum(scores.data(), v_rows.data(), len, a.D, out, scratch.data());
      }
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
    decode_tasks(args, k_cache.data_ptr<int8_t>(), v_cache.data_ptr<int8_t>());
  } else if (kind == torch::kHalf) {
    decode_tasks(args, k_cache.data_ptr<c10::Half>(), v_cache.data_ptr<c10::Half>());
  } else if (kind == torch::kBFloat16) {
    decode_tasks(args, k_cache.data_ptr<c10::BFloat16>(), v_cache.data_ptr<c10::BFloat16>());
  } else {
    decode_tasks(args, k_cache.data_ptr<float>(), v_cache.data_ptr<float>());
  }
  return out;
}
