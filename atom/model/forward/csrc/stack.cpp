// DecodeStack (ops.h): a decode step's decoder layers in one call.
#include "ops.h"

torch::Tensor Projection::operator()(const torch::Tensor& x) const {
  switch (kind) {
    case kInt4: return int4_linear(x, weight, bias);
    case kQ8: return q8_linear(x, weight, bias);
    case kInt8: return int8_linear(x, weight, *scale, bias);
    default: return at::linear(x, weight, bias);
  }
}

void DecodeStack::add_layer(Projection qkv, Projection o, Projection gate_up, Projection down,
                            torch::Tensor input_norm, torch::Tensor post_norm, double eps,
                            int64_t heads, int64_t kv_heads, double scale) {
  for (const Projection* p : {&qkv, &o, &gate_up, &down}) {
    TORCH_CHECK(p->kind != Projection::kInt8 || p->scale.has_value(),
                "DecodeStack: an int8 projection needs its scales");
  }
  layers_.push_back(Layer{std::move(qkv), std::move(o), std::move(gate_up), std::move(down),
                          input_norm.contiguous(), post_norm.contiguous(), eps, heads,
                          kv_heads, scale});
}

torch::Tensor DecodeStack::run(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                               const std::vector<torch::Tensor>& k_caches,
                               const std::vector<torch::Tensor>& v_caches, torch::Tensor slots,
                               torch::Tensor block_tables, torch::Tensor seq_lens,
                               int64_t block_size) const {
  TORCH_CHECK(!layers_.empty() && k_caches.size() == layers_.size() &&
                  v_caches.size() == layers_.size(),
              "DecodeStack: one K and one V cache per layer");
  const int64_t tokens = x.size(0);
  c10::optional<torch::Tensor> delta;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    const auto& k_cache = k_caches[i];
    const auto& v_cache = v_caches[i];
    const int64_t head_dim = k_cache.size(2);
    auto qkv = layer.qkv(add_rms_norm(x, delta, layer.input_norm, layer.eps));
    rope_write(qkv, cos, sin, k_cache, v_cache, slots, layer.heads, layer.kv_heads);
    auto q = qkv.view({tokens, -1, head_dim}).narrow(1, 0, layer.heads);
    auto attended = paged_decode(q, k_cache, v_cache, block_tables, seq_lens, block_size,
                                 layer.scale, 0, 0.0);
    auto h = add_rms_norm(x, layer.o(attended.view({tokens, -1})), layer.post_norm, layer.eps);
    delta = layer.down(silu_mul(layer.gate_up(h)));
  }
  return *delta;
}
