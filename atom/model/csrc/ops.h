// ATOM's CPU kernels (float32 activations), built on first use by atom/model/kernels.py:
// decode attention over the paged cache (attention.cpp), int8/int4-weight products for
// a few rows (linear.cpp), the fused small operators of ATOM's forward (layer.cpp).
// module.cpp binds them to Python.
#pragma once

#include <torch/types.h>

torch::Tensor paged_decode(torch::Tensor query, torch::Tensor k_cache, torch::Tensor v_cache,
                           torch::Tensor block_tables, torch::Tensor seq_lens,
                           int64_t block_size, double scale, int64_t window, double softcap);

torch::Tensor int8_linear(torch::Tensor x, torch::Tensor weight, torch::Tensor scale,
                          c10::optional<torch::Tensor> bias);

torch::Tensor int4_linear(torch::Tensor x, torch::Tensor blocks,
                          c10::optional<torch::Tensor> bias);

torch::Tensor add_rms_norm(torch::Tensor x, c10::optional<torch::Tensor> delta,
                           torch::Tensor weight, double eps);

void rope_write(torch::Tensor qkv, torch::Tensor cos, torch::Tensor sin, torch::Tensor k_cache,
                torch::Tensor v_cache, torch::Tensor slots, int64_t H, int64_t KV);

torch::Tensor silu_mul(torch::Tensor gate_up);
