// The block-format products' inner loops, shared by blocks.cpp (which quantizes the
// activations, splits the work and picks the instruction set) and the loops compiled
// once per instruction set (loops_avx2.cpp, loops_avx512.cpp, both loops.inc).
// Plain C types only: the files built for AVX-512 must not
// instantiate a template or inline function another file also uses, whose one kept
// copy could then carry AVX-512 instructions to a CPU without them.
#pragma once

#include <cstdint>

// One call's worth of rows of x times weight rows [begin, end) of one format.
struct BlockJob {
  const uint8_t* weights;  // [N, row bytes] in the format's layout (blocks.cpp)
  const int8_t* xq;        // [M, K] activations quantized per 32-block, in the format's order
  const float* dx;         // [M, K / 32] each block's activation scale
  const float* dx_lanes;   // the same, 4 (Q4_1) or 8 (Q8_0) times each: [M, K / 32 * lanes]
  const float* sums;       // Q4_1: [M, K / 32] each block's activation sum
  const int32_t* offsets;  // Q8_0: [M, K / 32 * 8] -128 · Σ xq of each block, in its first lane
  const float* bias;       // [N] or null
  float* out;              // [M, N]
  int64_t M, N, K;
};

using BlockChunk = void (*)(const BlockJob&, int64_t, int64_t);

void q4_chunk_avx2(const BlockJob& job, int64_t begin, int64_t end);
void q4_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end);
void q8_chunk_avx2(const BlockJob& job, int64_t begin, int64_t end);
void q8_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end);

// Where weight i (0..31) of block b of a row goes in its Q4_1-ordered activations: the
// blocks in groups of four (then one pair, then one block alone), a group holding the
// first 16 weights of each of its blocks, then the last 16 of each: the order of the
// low, then the high nibbles of the group's bytes. (Q8_0 keeps the plain order.)
static inline int64_t q4_x_index(int64_t b, int64_t i, int64_t nb) {
  const int64_t full = nb / 4 * 4;
  int64_t first = b / 4 * 4, size = 4;
  if (b >= full) {
    if (nb - full < 2 || b >= full + 2) return b * 32 + i;
    first = full;
    size = 2;
  }
  return first * 32 + (i / 16) * 16 * size + (b - first) * 16 + i % 16;
}
