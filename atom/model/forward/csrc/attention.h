// What paged_decode's two files share (attention.cpp: float caches and the entry point;
// attention_int8.cpp: an int8 cache): the arguments, the row gathering, the softmax and
// the float32 vector loops. The functions are local to each file that includes them (an
// unnamed namespace), so no copy compiled beside AVX-512 code is shared with another.
#pragma once

#include <torch/types.h>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

// An int8 row has a float16 scale for each group of kInt8Group values (a value is
// int8 * its group's scale).
constexpr int64_t kInt8Group = 16;  // atom/model/forward/attention.py's INT8_GROUP

// paged_decode's arguments, checked: queries [B, H, D] (`q_stride` apart), `group`
// query heads a kv head, `row` = KV * D values a cache slot.
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

namespace {

// The rows sequence b attends (its window's, if any) of the kv head at `kv_offset`,
// block by block: one division a block, not two a position (an integer division costs
// ~15 cycles, and a step of 32 sequences of 256 tokens asks for ~2.2 million positions).
template <typename T>
void rows_of(const DecodeArgs& a, int64_t b, int64_t kv_offset, const T* kp, const T* vp,
             std::vector<const T*>& k_rows, std::vector<const T*>& v_rows) {
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, a.lens[b] - a.window) : 0;
  const int64_t len = a.lens[b] - first;  // attended positions: first .. lens[b] - 1
  const int64_t* table = a.tables + b * a.max_blocks;
  k_rows.resize(len);
  v_rows.resize(len);
  for (int64_t i = 0, pos = first; i < len;) {
    const int64_t offset = pos % a.block_size;
    const int64_t base = table[pos / a.block_size] * a.block_size + offset;
    const int64_t n = std::min(a.block_size - offset, len - i);
    for (int64_t o = 0; o < n; ++o, ++i) {
      k_rows[i] = kp + (base + o) * a.row + kv_offset;
      v_rows[i] = vp + (base + o) * a.row + kv_offset;
    }
    pos += n;
  }
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

// Scores soft-capped where the layer asks (Gemma 2), then their softmax.
inline void cap_and_softmax(const DecodeArgs& a, float* scores, int64_t len) {
  if (a.cap > 0.f) {
    for (int64_t i = 0; i < len; ++i) scores[i] = a.cap * std::tanh(scores[i] / a.cap);
  }
  softmax(scores, len);
}

inline float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

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

// The cache lines of values [first, first + count) of rows [from, to), asked for ahead
// of their use. A sequence's rows are scattered over its blocks, so the CPU's own
// prefetchers miss them: without this the loops wait on memory, reading the cache at a
// fraction of the machine's bandwidth (bench/results/history.md, 2026-12-05).
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

// The 8 sums of acc[0..7], in one vector: one transposing reduction.
inline __m256 reduce8(const __m256* acc) {
  const __m256 s0 = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 s1 = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(s0, s1, 0x20), _mm256_permute2f128_ps(s0, s1, 0x31));
}

// q · k[j] for 8 key rows at once: eight independent accumulators keep the multiply-adds
// streaming (one dot product at a time waits on its own chain). D is a multiple of 8.
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
#endif

}  // namespace

// An int8 cache (attention_int8.cpp): a.out [B, H, D] from int8 rows and their scales.
void decode_int8(const DecodeArgs& a, const int8_t* kp, const int8_t* vp);
