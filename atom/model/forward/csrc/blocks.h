// The block-format products' inner loops, shared by blocks.cpp (which quantizes the
// activations, splits the work and picks the instruction set) and the loops compiled
// once per instruction set (loops_avx2.cpp, loops_avx512.cpp, both loops.inc, and
// loops_amx.cpp).
// Plain C types only: the files built for AVX-512 must not
// instantiate a template or inline function another file also uses, whose one kept
// copy could then carry AVX-512 instructions to a CPU without them.
#pragma once

#include <cstdint>

// Weight rows a tile: the weights are stored in tiles of 16 rows (blocks.cpp has the
// layouts), one row to each 32-bit lane of a 512-bit register (of two 256-bit ones).
constexpr int64_t kTileRows = 16;

// One call's worth of rows of x times weight tiles [begin, end) of one format.
struct BlockJob {
  const uint8_t* weights;  // [N / 16 tiles] in the format's tile layout (blocks.cpp)
  const int8_t* xq;        // [K / 32, M, 32] activations quantized per 32-block
  const float* dx;         // [K / 32, M] each block's activation scale
  const float* sums;       // Q4_1, Q5_1: [K / 32, M] each block's activation sum
  const int32_t* offsets;  // Q8_0: [K / 32, M] -128 · Σ xq of each block; Q6_K:
                           // [K / 32, M, 2] -32 · Σ xq of each half-block of 16
  bool halves;             // offsets: two a block (Q6_K), else one
  const float* bias;       // [N] or null
  float* out;              // [M, N]
  int64_t M, N, K;
};

using BlockChunk = void (*)(const BlockJob&, int64_t, int64_t);

void q4_chunk_avx2(const BlockJob& job, int64_t begin, int64_t end);
void q4_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end);
void q5_chunk_avx2(const BlockJob& job, int64_t begin, int64_t end);
void q5_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end);
void q5_chunk_amx(const BlockJob& job, int64_t begin, int64_t end);
void q6_chunk_avx2(const BlockJob& job, int64_t begin, int64_t end);
void q6_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end);
void q8_chunk_avx2(const BlockJob& job, int64_t begin, int64_t end);
void q8_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end);
void q4_chunk_amx(const BlockJob& job, int64_t begin, int64_t end);
void q8_chunk_amx(const BlockJob& job, int64_t begin, int64_t end);
