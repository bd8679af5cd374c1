// DecodeStack (ops.h): a decode step's decoder layers in one call.
#include "ops.h"

torch::Tensor Projection::operator()(const torch::Tensor& x) const {
  switch (kind) {
    case kInt4: return int4_linear(x, weight, bias);
    case kQ8: return q8_linear(x, weight, bias);
    case kQ5: return q5_linear(x, weight, bias);
    case kQ6: return q6_linear(x, weight, bias);
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

void DecodeStack::set_lora(std::vector<LoraSlotStack> stacks) {
  TORCH_CHECK(stacks.size() == 4 * layers_.size(), "DecodeStack: 4 LoRA stacks a layer");
  lora_ = std::move(stacks);
}

torch::Tensor DecodeStack::run(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                               const std::vector<torch::Tensor>& k_caches,
                               const std::vector<torch::Tensor>& v_caches,
                               const std::vector<torch::Tensor>& k_scales,
                               const std::vector<torch::Tensor>& v_scales, torch::Tensor slots,
                               torch::Tensor block_tables, torch::Tensor seq_lens,
                               int64_t block_size, c10::optional<torch::Tensor> lora_slots) const {
  TORCH_CHECK(!layers_.empty() && k_caches.size() == layers_.size() &&
                  v_caches.size() == layers_.size(),
              "DecodeStack: one K and one V cache per layer");
  TORCH_CHECK(k_scales.size() == v_scales.size() &&
                  (k_scales.empty() || k_scales.size() == layers_.size()),
              "DecodeStack: no scales, or one K and one V scale tensor per layer");
  TORCH_CHECK(!lora_slots.has_value() || !lora_.empty(), "DecodeStack: no LoRA stacks set");
  const int64_t tokens = x.size(0);
  // The projection `which` (0 qkv, 1 o, 2 gate_up, 3 down) of layer i, with its LoRA.
  auto project = [&](size_t i, int which, const Projection& p, const torch::Tensor& in) {
    auto out = p(in);
    if (lora_slots.has_value()) {
      const LoraSlotStack& l = lora_[4 * i + which];
      lora_add(out, in, l.a, l.b_t, l.cols, *lora_slots, l.room);
    }
    return out;
  };
  c10::optional<torch::Tensor> delta;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    const auto& k_cache = k_caches[i];
    const auto& v_cache = v_caches[i];
    const int64_t head_dim = k_cache.size(2);
    c10::optional<torch::Tensor> k_scale, v_scale;  // an int8 cache's
    if (!k_scales.empty()) {
      k_scale = k_scales[i];
      v_scale = v_scales[i];
    }
    auto qkv = project(i, 0, layer.qkv, add_rms_norm(x, delta, layer.input_norm, layer.eps));
    rope_write(qkv, cos, sin, k_cache, v_cache, slots, layer.heads, layer.kv_heads, k_scale,
               v_scale);
    auto q = qkv.view({tokens, -1, head_dim}).narrow(1, 0, layer.heads);
    auto attended = paged_decode(q, k_cache, v_cache, block_tables, seq_lens, block_size,
                                 layer.scale, 0, 0.0, k_scale, v_scale)
                        .view({tokens, -1});
    auto h = add_rms_norm(x, project(i, 1, layer.o, attended), layer.post_norm, layer.eps);
    auto gate_up = project(i, 2, layer.gate_up, h);
    delta = project(i, 3, layer.down, silu_mul(gate_up));
  }
  return *delta;
}
