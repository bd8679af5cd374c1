#include "ops.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

// The small per-layer operators of ATOM's own forward (atom/model/forward/llama_forward.py), fused so a
// decode layer is a handful of calls instead of ~60: torch runs each as several
// operators of a few microseconds each, which at batch 1 cost as much as the weights.
namespace {

// One row: x += delta (when given), out = x * rsqrt(mean(x²) + eps) * weight.
inline void add_rms_norm_row(float* x, const float* delta, const float* w, float* out,
                             int64_t n, float eps) {
  float sq = 0.f;
#pragma omp simd reduction(+ : sq)
  for (int64_t i = 0; i < n; ++i) {
    const float v = delta ? x[i] + delta[i] : x[i];
    x[i] = v;
    sq += v * v;
  }
  const float inv = 1.f / std::sqrt(sq / static_cast<float>(n) + eps);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

// transformers' rotate_half convention: the first half pairs with the second.
inline void rotate(float* x, const float* cos, const float* sin, int64_t dim) {
  const int64_t half = dim / 2;
#pragma omp simd
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i + half] + a * sin[i + half];
  }
}

constexpr int64_t kRowsPerTask = 16;  // below this many rows a task is not worth a thread

}  // namespace

// x [T, N] float32, updated in place to x + delta; returns rms_norm(x) * weight [T, N].
torch::Tensor add_rms_norm(torch::Tensor x, c10::optional<torch::Tensor> delta,
                           torch::Tensor weight, double eps) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.dim() == 2 && x.is_contiguous(),
              "add_rms_norm: contiguous float32 [tokens, hidden]");
  const int64_t T = x.size(0), N = x.size(1);
  const torch::Tensor d = delta.has_value() ? delta->contiguous() : torch::Tensor();
  TORCH_CHECK(!d.defined() || d.sizes() == x.sizes(), "add_rms_norm: delta shape");
  auto w = weight.contiguous();
  auto out = torch::empty_like(x);
  float* xp = x.data_ptr<float>();
  const float* dp = d.defined() ? d.data_ptr<float>() : nullptr;
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const float feps = static_cast<float>(eps);
  at::parallel_for(0, T, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      add_rms_norm_row(xp + t * N, dp ? dp + t * N : nullptr, wp, op + t * N, N, feps);
    }
  });
  return out;
}

// Copies n float32 values into a cache row of element type T (rounded to nearest).
template <typename T>
void store_row(const float* from, int64_t n, T* to) {
  for (int64_t i = 0; i < n; ++i) to[i] = static_cast<T>(from[i]);
}

constexpr int64_t kInt8Group = 16;  // values a scale covers (csrc/attention.cpp)

// `n` float32 values into an int8 cache row: each group of kInt8Group values gets a
// float16 scale, max |x| * (1 / 127) rounded to float16 (into `scales`), and its values
// x * (1 / scale) rounded to nearest even, clamped to ±127: exactly what
// atom/model/forward/attention.py's write_rows computes (written as products:
// -ffast-math would turn a division into one anyway).
void store_row_int8(const float* from, int64_t n, int8_t* to, c10::Half* scales) {
  constexpr float kInv127 = 1.f / 127.f;
  for (int64_t g = 0; g < n / kInt8Group; ++g) {
    const float* x = from + g * kInt8Group;
    float amax = 0.f;
    for (int64_t i = 0; i < kInt8Group; ++i) amax = std::max(amax, std::fabs(x[i]));
    const c10::Half scale = static_cast<c10::Half>(amax * kInv127);
    const float wide = static_cast<float>(scale);
    const float inv = wide > 0.f ? 1.f / wide : 0.f;
    for (int64_t i = 0; i < kInt8Group; ++i) {
      const float q = std::nearbyint(x[i] * inv);
      to[g * kInt8Group + i] = static_cast<int8_t>(std::min(127.f, std::max(-127.f, q)));
    }
    scales[g] = scale;
  }
}

// qkv [T, (H + 2 KV) * D]: rotates the H query and KV key heads in place by cos/sin
// [T, D], then copies each token's (rotated) K and V heads into row slots[t] of
// k_cache/v_cache [num_slots, KV, D] (float32, float16 or bfloat16; or int8, with its
// groups' scales into k_scales/v_scales [num_slots, KV, D / 16]). The query heads stay.
template <typename T>
void rope_write_rows(const torch::Tensor& qkv, const float* cp, const float* sp, const int64_t* slp,
                     T* kp, T* vp, c10::Half* ksp, c10::Half* vsp, int64_t H, int64_t KV,
                     int64_t D) {
  const int64_t T_ = qkv.size(0), width = qkv.size(1), row = KV * D;
  float* qp = qkv.data_ptr<float>();
  at::parallel_for(0, T_, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* x = qp + t * width;
      for (int64_t h = 0; h < H + KV; ++h) rotate(x + h * D, cp + t * D, sp + t * D, D);
      if constexpr (std::is_same_v<T, int8_t>) {
        const int64_t groups = row / kInt8Group;  // a token's scales, every head's groups
        store_row_int8(x + H * D, row, kp + slp[t] * row, ksp + slp[t] * groups);
        store_row_int8(x + (H + KV) * D, row, vp + slp[t] * row, vsp + slp[t] * groups);
      } else {
        store_row(x + H * D, row, kp + slp[t] * row);
        store_row(x + (H + KV) * D, row, vp + slp[t] * row);
      }
    }
  });
}

void rope_write(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor k_cache,
                torch::Tensor v_cache, torch::Tensor slots, int64_t H, int64_t KV,
                c10::optional<torch::Tensor> k_scales, c10::optional<torch::Tensor> v_scales) {
  TORCH_CHECK(qkv.scalar_type() == torch::kFloat32 && qkv.is_contiguous() && qkv.dim() == 2,
              "rope_write: contiguous float32 qkv [tokens, width]");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous() &&
                  k_cache.scalar_type() == v_cache.scalar_type(),
              "rope_write: cache layout");
  TORCH_CHECK(slots.scalar_type() == torch::kInt64, "rope_write: int64 slots");
  const int64_t T = qkv.size(0), D = k_cache.size(2), width = qkv.size(1);
  TORCH_CHECK(width == (H + 2 * KV) * D && k_cache.size(1) == KV, "rope_write: head shapes");
  auto c = cos.contiguous(), s = sin.contiguous(), sl = slots.contiguous();
  TORCH_CHECK(c.numel() == T * D && s.numel() == T * D && sl.numel() == T, "rope_write: sizes");
  const bool scaled = k_cache.scalar_type() == torch::kChar;
  TORCH_CHECK(scaled == (k_scales.has_value() && v_scales.has_value()),
              "rope_write: an int8 cache, and only it, comes with its scales");
  TORCH_CHECK(!scaled || (k_scales->scalar_type() == torch::kHalf && k_scales->is_contiguous() &&
                          v_scales->scalar_type() == torch::kHalf && v_scales->is_contiguous() &&
                          D % kInt8Group == 0),
              "rope_write: contiguous float16 scales, a head size of groups of 16");
  const float* cp = c.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
  const int64_t* slp = sl.data_ptr<int64_t>();
  switch (k_cache.scalar_type()) {
    case torch::kFloat32:
      return rope_write_rows(qkv, cp, sp, slp, k_cache.data_ptr<float>(), v_cache.data_ptr<float>(),
                             nullptr, nullptr, H, KV, D);
    case torch::kHalf:
      return rope_write_rows(qkv, cp, sp, slp, k_cache.data_ptr<c10::Half>(),
                             v_cache.data_ptr<c10::Half>(), nullptr, nullptr, H, KV, D);
    case torch::kBFloat16:
      return rope_write_rows(qkv, cp, sp, slp, k_cache.data_ptr<c10::BFloat16>(),
                             v_cache.data_ptr<c10::BFloat16>(), nullptr, nullptr, H, KV, D);
    case torch::kChar:
      return rope_write_rows(qkv, cp, sp, slp, k_cache.data_ptr<int8_t>(),
                             v_cache.data_ptr<int8_t>(), k_scales->data_ptr<c10::Half>(),
                             v_scales->data_ptr<c10::Half>(), H, KV, D);
    default:
      TORCH_CHECK(false, "rope_write: a float32, float16, bfloat16 or int8 cache");
  }
}

// gate_up [T, 2 I] → silu(gate) * up [T, I].
torch::Tensor silu_mul(torch::Tensor gate_up) {
  TORCH_CHECK(gate_up.scalar_type() == torch::kFloat32 && gate_up.dim() == 2 &&
                  gate_up.is_contiguous(),
              "silu_mul: contiguous float32 [tokens, 2 * intermediate]");
  const int64_t T = gate_up.size(0), I = gate_up.size(1) / 2;
  auto out = torch::empty({T, I}, gate_up.options());
  const float* gp = gate_up.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, T, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* g = gp + t * 2 * I;
      float* o = op + t * I;
#pragma omp simd
      for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (1.f + std::exp(-g[i])) * g[I + i];
    }
  });
  return out;
}
