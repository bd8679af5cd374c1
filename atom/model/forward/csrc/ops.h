// ATOM's CPU kernels (float32 activations), built on first use by atom/model/forward/kernels.py:
// decode attention over the paged cache (attention.cpp), int8/int4-weight products for
// a few rows (linear.cpp, blocks.cpp), the fused small operators of ATOM's forward (layer.cpp).
// module.cpp binds them to Python.
#pragma once

#include <torch/types.h>

#include <string>

// An int8 cache comes with its scales [num_slots, KV, head_dim / 16] (float16): each
// group of 16 values is int8 * its scale.
torch::Tensor paged_decode(torch::Tensor query, torch::Tensor k_cache, torch::Tensor v_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens,
                           int64_t block_size, double scale, int64_t window, double softcap,
                           c10::optional<torch::Tensor> k_scales,
                           c10::optional<torch::Tensor> v_scales);

torch::Tensor int8_linear(torch::Tensor x, torch::Tensor weight, torch::Tensor scale,
                          c10::optional<torch::Tensor> bias);

torch::Tensor int4_linear(torch::Tensor x, torch::Tensor blocks,
                          c10::optional<torch::Tensor> bias);

torch::Tensor q5_linear(torch::Tensor x, torch::Tensor blocks,
                        c10::optional<torch::Tensor> bias);

torch::Tensor q6_linear(torch::Tensor x, torch::Tensor blocks,
                        c10::optional<torch::Tensor> bias);

torch::Tensor q8_linear(torch::Tensor x, torch::Tensor blocks, c10::optional<torch::Tensor> bias);

// The instruction set the block products' loops use ("avx2", "avx512_vnni" or
// "amx_int8"), chosen from
// what the CPU and the OS support; set_kernel_isa overrides it (tests, benchmarks)
// and returns the one before.
std::string kernel_isa();
std::string set_kernel_isa(const std::string& name);
// Whether the chosen set has 512-bit registers (avx512_vnni, amx_int8): the int8-cache
// attention loops (attention_int8.cpp) follow the same choice.
bool wide_vectors();

torch::Tensor add_rms_norm(torch::Tensor x, c10::optional<torch::Tensor> delta,
                           torch::Tensor weight, double eps);

void rope_write(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor k_cache,
                torch::Tensor v_cache, torch::Tensor slots, int64_t H, int64_t KV,
                c10::optional<torch::Tensor> k_scales, c10::optional<torch::Tensor> v_scales);

torch::Tensor silu_mul(torch::Tensor gate_up);

// out[r] += B_s (A_s x[r]) for each row r's LoRA slot s (row_slots[r], -1: none); a is
// [slots * room, in], b_t [slots * room, out], cols [slots * room, 2] the columns where
// each row of b_t can be non-zero (csrc/lora.cpp).
void lora_add(torch::Tensor out, torch::Tensor x, torch::Tensor a, torch::Tensor b_t,
              torch::Tensor cols, torch::Tensor row_slots, int64_t room);

// One weight matrix of a decoder layer, in one of the formats the kernels take.
struct Projection {
  enum Kind : int64_t { kFloat = 0, kInt8 = 1, kInt4 = 2, kQ8 = 3, kQ5 = 4, kQ6 = 5 };
  int64_t kind;
  torch::Tensor weight;  // float [N, K], int8 [N, K] (with `scale` [N]), Q4_1/Q5_1/Q6_K/Q8_0 blocks
  c10::optional<torch::Tensor> scale;
  c10::optional<torch::Tensor> bias;
  torch::Tensor operator()(const torch::Tensor& x) const;
};

// One projection's LoRA slots (atom/model/lora/mixing.py SlotStack): see lora_add.
struct LoraSlotStack {
  torch::Tensor a, b_t, cols;
  int64_t room;
};

// Every decoder layer of ATOM's Llama-family forward (atom/model/forward/llama_forward.py) for a
// decode step, run in one call: the same kernels, in the same order, as the Python
// layer, without ~40 Python-level calls a layer.
class DecodeStack {
 public:
  void add_layer(Projection qkv, Projection o, Projection gate_up, Projection down,
                 torch::Tensor input_norm, torch::Tensor post_norm, double eps, int64_t heads,
                 int64_t kv_heads, double scale);
  // The LoRA slots of every layer, four a layer (qkv, o, gate_up, down), that a run
  // given row slots adds the deltas of (as LlamaLayer._project does).
  void set_lora(std::vector<LoraSlotStack> stacks);
  // x [T, hidden] is the residual stream, updated in place up to the last layer's
  // input; returns the last layer's delta (its MLP output), as the Python layers do.
  // `lora_slots`: each row's LoRA slot (-1: none), with set_lora's stacks. `k_scales`,
  // `v_scales`: an int8 cache's scales, one a layer (empty for other caches).
  torch::Tensor run(torch::Tensor x, torch::Tensor cos, torch::Tensor sin,
                    const std::vector<torch::Tensor>& k_caches,
                    const std::vector<torch::Tensor>& v_caches,
                    const std::vector<torch::Tensor>& k_scales,
                    const std::vector<torch::Tensor>& v_scales, torch::Tensor slots,
                    torch::Tensor block_tables, torch::Tensor seq_lens, int64_t block_size,
                    c10::optional<torch::Tensor> lora_slots) const;
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }

 private:
  struct Layer {
    Projection qkv, o, gate_up, down;
    torch::Tensor input_norm, post_norm;
    double eps;
    int64_t heads, kv_heads;
    double scale;
  };
  std::vector<Layer> layers_;
  std::vector<LoraSlotStack> lora_;  // 4 a layer, or none
};
