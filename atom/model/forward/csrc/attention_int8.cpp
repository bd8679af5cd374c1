// paged_decode over an int8 cache (`--kv-cache-dtype int8`): one task per (sequence,
// kv head), for every query head of the kv head at once, so a row is read and widened
// once however many query heads share it (one task per query head did the widening and
// the scale products `group` times over; the step was 24 % slower than float16's).
//
// - Scores: the query is rounded to int16 (15 bits against its largest |value|, so
//   q ≈ q16 * qs), and each group of 16 key values is an integer multiply-add of int16
//   pairs (the key bytes sign-extended), then one float multiply-add by the group's
//   scale: score = scale * qs * Σ_g s_g Σ_{d in g} q16[d] * k[d].
// - Values: out = Σ_i p[i] * (v_i's bytes * their group scale), in float32.
//
// Where the chosen instruction set has AVX-512 (kernel_isa: avx512_vnni or amx_int8) and
// the head size is a multiple of 64, 512-bit loops; otherwise 256-bit ones (the values
// widened kChunk rows at a time into float rows, which each head then reads from L1).
#include "attention.h"
#include "ops.h"

#include <ATen/Parallel.h>

namespace {

constexpr int64_t kChunk = 64;       // rows widened at a time by the 256-bit value loop
constexpr int64_t kMaxGroups = 32;   // head sizes up to 512
constexpr int64_t kHeadBlock = 4;    // query heads the score and value loops take at once

// The query head q [D] as int16 into q16; returns its scale qs (q ≈ q16 * qs).
inline float quantize_query(const float* q, int64_t D, int16_t* q16) {
  float m = 0.f;
  for (int64_t d = 0; d < D; ++d) m = std::max(m, std::fabs(q[d]));
  const float inverse = m > 0.f ? 32767.f / m : 0.f;
  for (int64_t d = 0; d < D; ++d) q16[d] = static_cast<int16_t>(std::nearbyint(q[d] * inverse));
  return m * (1.f / 32767.f);
}

// Row `row`'s group scales, as float32 into `to`: the scales of a value at flat index x
// of the cache are at index x / kInt8Group of its scales.
inline void widen_scales(const int8_t* row, const int8_t* base, const c10::Half* scales,
                         int64_t groups, float* to) {
  const c10::Half* s = scales + (row - base) / kInt8Group;
  int64_t g = 0;
#ifdef __AVX2__
  for (; g + 4 <= groups; g += 4) {
    _mm_storeu_ps(to + g, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + g))));
  }
#endif
  for (; g < groups; ++g) to[g] = static_cast<float>(s[g]);
}

// One (sequence, kv head): its rows, the group's query heads as int16 and their scales.
struct Task {
  const std::vector<const int8_t*>& k_rows;
  const std::vector<const int8_t*>& v_rows;
  const int16_t* q16;  // [NH, D], the heads this call takes
  const float* qs;     // [NH]
  int64_t n, D;
  const int8_t *kp, *vp;  // the caches' first values: a row's scales are found from them
  const c10::Half *k_scales, *v_scales;
};

// scores[h * n + i] = (q_h · k_i) * scale for NH heads, any head size (a multiple of 16).
template <int NH>
void scores_portable(const Task& t, float scale, float* scores) {
  const int64_t groups = t.D / kInt8Group;
  float s[kMaxGroups];
  for (int64_t i = 0; i < t.n; ++i) {
    const int8_t* row = t.k_rows[i];
    widen_scales(row, t.kp, t.k_scales, groups, s);
    for (int h = 0; h < NH; ++h) {
      float acc = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        int32_t dot = 0;
        for (int64_t d = g * kInt8Group; d < (g + 1) * kInt8Group; ++d) {
          dot += int32_t{t.q16[h * t.D + d]} * int32_t{row[d]};
        }
        acc += static_cast<float>(dot) * s[g];
      }
      scores[h * t.n + i] = acc * (scale * t.qs[h]);
    }
  }
}

#ifdef __AVX2__
// The sums of 8 rows' accumulators sums[NH][8][8] (row j of head h at sums[h][j]), times
// scale * qs[h], into scores[h * n + i0 ..] (m of the 8 rows are real).
template <int NH>
void store_scores(const float (&sums)[NH][8][8], const Task& t, float scale, int64_t i0,
                  int64_t m, float* scores) {
  for (int h = 0; h < NH; ++h) {
    __m256 acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm256_load_ps(sums[h][j]);
    alignas(32) float out[8];
    _mm256_store_ps(out, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale * t.qs[h])));
    std::copy(out, out + m, scores + h * t.n + i0);
  }
}

// scores_portable with 256-bit vectors: a group of 16 values is one multiply-add of
// int16 pairs (the row's bytes sign-extended once for every head), then one float
// multiply-add by the group's scale; 8 rows end in one transposing reduction a head.
template <int NH>
void scores_avx2(const Task& t, float scale, float* scores) {
  alignas(32) float sums[NH][8][8];
  float s[kMaxGroups];
  for (int64_t i0 = 0; i0 < t.n; i0 += 8) {
    const int64_t m = std::min<int64_t>(8, t.n - i0);
    for (int64_t j = 0; j < 8; ++j) {
      __m256 acc[NH];
      for (int h = 0; h < NH; ++h) acc[h] = _mm256_setzero_ps();
      if (j < m) {
        const int8_t* row = t.k_rows[i0 + j];
        if (i0 + j + kAhead < t.n) {
          prefetch_rows<_MM_HINT_T0>(t.k_rows.data(), i0 + j + kAhead, i0 + j + kAhead + 1, 0, t.D);
        }
        widen_scales(row, t.kp, t.k_scales, t.D / kInt8Group, s);
        for (int64_t g = 0; g < t.D / kInt8Group; ++g) {
          const __m256i k = _mm256_cvtepi8_epi16(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * kInt8Group)));
          const __m256 sc = _mm256_set1_ps(s[g]);
          for (int h = 0; h < NH; ++h) {
            const __m256i q = _mm256_loadu_si256(
                reinterpret_cast<const __m256i*>(t.q16 + h * t.D + g * kInt8Group));
            acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(k, q)), sc, acc[h]);
          }
        }
      }
      for (int h = 0; h < NH; ++h) _mm256_store_ps(sums[h][j], acc[h]);
    }
    store_scores<NH>(sums, t, scale, i0, m, scores);
  }
}

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// scores_avx2 with 512-bit vectors: two groups a multiply-add (D % 64 == 0).
template <int NH>
AVX512 void scores_avx512(const Task& t, float scale, float* scores) {
  alignas(32) float sums[NH][8][8];
  float s[kMaxGroups];
  for (int64_t i0 = 0; i0 < t.n; i0 += 8) {
    const int64_t m = std::min<int64_t>(8, t.n - i0);
    for (int64_t j = 0; j < 8; ++j) {
      __m512 acc[NH];
      for (int h = 0; h < NH; ++h) acc[h] = _mm512_setzero_ps();
      if (j < m) {
        const int8_t* row = t.k_rows[i0 + j];
        if (i0 + j + kAhead < t.n) {
          prefetch_rows<_MM_HINT_T0>(t.k_rows.data(), i0 + j + kAhead, i0 + j + kAhead + 1, 0, t.D);
        }
        widen_scales(row, t.kp, t.k_scales, t.D / kInt8Group, s);
        for (int64_t c = 0; c < t.D / 32; ++c) {  // groups 2c and 2c + 1
          const __m512i k = _mm512_cvtepi8_epi16(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c * 32)));
          const __m512 sc = _mm512_castpd_ps(_mm512_insertf64x4(
              _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(s[2 * c]))),
              _mm256_castps_pd(_mm256_set1_ps(s[2 * c + 1])), 1));
          for (int h = 0; h < NH; ++h) {
            const __m512i q = _mm512_loadu_si512(t.q16 + h * t.D + c * 32);
            acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(k, q)), sc, acc[h]);
          }
        }
      }
      for (int h = 0; h < NH; ++h) {
        const __m256 low = _mm512_castps512_ps256(acc[h]);
        const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[h]), 1));
        _mm256_store_ps(sums[h][j], _mm256_add_ps(low, high));
      }
    }
    store_scores<NH>(sums, t, scale, i0, m, scores);
  }
}

// out[h * D ..] = Σ_i p[h * n + i] * v_i for NH heads, 64 dimensions at a time in
// registers (D % 64 == 0): a row's bytes are widened and scaled once for every head.
template <int NH>
AVX512 void values_avx512(const Task& t, const float* p, float* out) {
  for (int64_t d0 = 0; d0 < t.D; d0 += 64) {
    __m512 acc[NH][4];
    for (int h = 0; h < NH; ++h) {
      for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_setzero_ps();
    }
    float s[4];
    for (int64_t i = 0; i < t.n; ++i) {
      const int8_t* row = t.v_rows[i] + d0;
      if (i + kAhead < t.n) prefetch_rows<_MM_HINT_T0>(t.v_rows.data(), i + kAhead, i + kAhead + 1, d0, 64);
      widen_scales(row, t.vp, t.v_scales, 4, s);
      __m512 v[4];
      for (int c = 0; c < 4; ++c) {
        const __m512i bytes = _mm512_cvtepi8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
        v[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(bytes), _mm512_set1_ps(s[c]));
      }
      for (int h = 0; h < NH; ++h) {
        const __m512 w = _mm512_set1_ps(p[h * t.n + i]);
        for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_fmadd_ps(w, v[c], acc[h][c]);
      }
    }
    for (int h = 0; h < NH; ++h) {
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(out + h * t.D + d0 + 16 * c, acc[h][c]);
    }
  }
}
#endif

// Rows [from, from + n) of `rows` as float32 into dst [n, D], each value times its
// group's scale.
void widen_rows(const Task& t, const std::vector<const int8_t*>& rows, const int8_t* base,
                const c10::Half* scales, int64_t from, int64_t n, float* dst) {
  float s[kMaxGroups];
  for (int64_t i = from; i < from + n; ++i, dst += t.D) {
    const int8_t* row = rows[i];
    widen_scales(row, base, scales, t.D / kInt8Group, s);
    int64_t d = 0;
#ifdef __AVX2__
    if (i + kAhead < static_cast<int64_t>(rows.size())) {
      prefetch_rows<_MM_HINT_T0>(rows.data(), i + kAhead, i + kAhead + 1, 0, t.D);
    }
    for (; d < t.D; d += 8) {
      _mm256_storeu_ps(dst + d, _mm256_mul_ps(load8(row + d), _mm256_set1_ps(s[d / kInt8Group])));
    }
#endif
    for (; d < t.D; ++d) dst[d] = static_cast<float>(row[d]) * s[d / kInt8Group];
  }
}

// out[D] += Σ_i p[i] * rows[i] over float rows [n, D]; 64 dimensions at a time stay in
// registers across the rows.
void accumulate(const float* p, const float* rows, int64_t n, int64_t D, float* out) {
  int64_t d0 = 0;
#ifdef __AVX2__
  for (; d0 + 64 <= D; d0 += 64) {
    __m256 acc[8];
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_loadu_ps(out + d0 + 8 * c);
    for (int64_t i = 0; i < n; ++i) {
      const __m256 w = _mm256_set1_ps(p[i]);
      for (int c = 0; c < 8; ++c) {
        acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(rows + i * D + d0 + 8 * c), acc[c]);
      }
    }
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + d0 + 8 * c, acc[c]);
  }
#endif
  for (int64_t i = 0; i < n; ++i) {
#pragma omp simd
    for (int64_t d = d0; d < D; ++d) out[d] += p[i] * rows[i * D + d];
  }
}

// values_avx512 for any head size: kChunk rows widened into float rows, which every head
// then accumulates (from L1).
void values_portable(const Task& t, int64_t heads, const float* p, float* wide, float* out) {
  std::fill(out, out + heads * t.D, 0.f);
  for (int64_t c = 0; c < t.n; c += kChunk) {
    const int64_t n = std::min(kChunk, t.n - c);
    widen_rows(t, t.v_rows, t.vp, t.v_scales, c, n, wide);
    for (int64_t h = 0; h < heads; ++h) accumulate(p + h * t.n + c, wide, n, t.D, out + h * t.D);
  }
}

template <int NH>
void block_of_heads(const Task& t, bool wide, float scale, float* scores, float* widened,
                    float* out, const DecodeArgs& a) {
#ifdef __AVX2__
  if (wide) {
    scores_avx512<NH>(t, scale, scores);
  } else {
    scores_avx2<NH>(t, scale, scores);
  }
#else
  scores_portable<NH>(t, scale, scores);
#endif
  for (int h = 0; h < NH; ++h) cap_and_softmax(a, scores + h * t.n, t.n);
#ifdef __AVX2__
  if (wide) {
    values_avx512<NH>(t, scores, out);
    return;
  }
#endif
  values_portable(t, NH, scores, widened, out);
}

}  // namespace

void decode_int8(const DecodeArgs& a, const int8_t* kp, const int8_t* vp) {
  const int64_t KV = a.H / a.group, G = a.group, D = a.D;
  const bool wide = wide_vectors() && D % 64 == 0;
  at::parallel_for(0, a.B * KV, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores, widened(kChunk * D), qs(G);
    std::vector<int16_t> q16(G * D);
    std::vector<const int8_t*> k_rows, v_rows;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / KV, kvh = task % KV;
      rows_of(a, b, kvh * D, kp, vp, k_rows, v_rows);
      const int64_t n = static_cast<int64_t>(k_rows.size());
      scores.resize(kHeadBlock * n);
      const float* q = a.q + b * a.q_stride + kvh * G * D;  // the group's heads, in order
      for (int64_t h = 0; h < G; ++h) qs[h] = quantize_query(q + h * D, D, q16.data() + h * D);
      for (int64_t h = 0; h < G; h += kHeadBlock) {
        const Task t{k_rows, v_rows, q16.data() + h * D, qs.data() + h, n, D,
                     kp, vp, a.k_scales, a.v_scales};
        float* out = a.out + (b * a.H + kvh * G + h) * D;
        switch (std::min(kHeadBlock, G - h)) {
          case 4: block_of_heads<4>(t, wide, a.scale, scores.data(), widened.data(), out, a); break;
          case 3: block_of_heads<3>(t, wide, a.scale, scores.data(), widened.data(), out, a); break;
          case 2: block_of_heads<2>(t, wide, a.scale, scores.data(), widened.data(), out, a); break;
          default: block_of_heads<1>(t, wide, a.scale, scores.data(), widened.data(), out, a);
        }
      }
    }
  });
}
