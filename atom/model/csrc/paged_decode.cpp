// Paged decode attention for CPU float32: one query token per sequence, read in place
// from the paged KV cache, so no gather copy of K/V is made (the torch fallback gathers
// every sequence's K/V into a padded tensor per layer, then runs SDPA on it).
//
// One task per sequence: it streams the sequence's K rows (every head of a position is
// contiguous) computing every query head's scaled score (GQA heads share a row), takes
// the softmax, then streams the V rows into the weighted sums. Tasks run on ATen's thread pool; the GIL is released meanwhile.
#include <torch/extension.h>
#include <ATen/Parallel.h>

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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_decode", &paged_decode, "paged decode attention (CPU, float32)");
}
