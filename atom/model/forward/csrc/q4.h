// The 4-bit block product's inner loops, shared by int4.cpp (which quantizes the
// activations and splits the work) and q4_kernel.inc (compiled once per instruction
// set: q4_avx2.cpp, q4_avx512.cpp). Plain C types only: the files built for AVX-512
// must not instantiate a template or inline function another file also uses, whose
// one kept copy could then carry AVX-512 instructions to a CPU without them.
#pragma once

#include <cstdint>

// One call's worth of rows of x times weight rows [begin, end) (see int4.cpp).
struct Q4Job {
  const uint8_t* weights;  // [N, K / 32 * 20]: a row's scales, minimums, then nibbles
  const int8_t* xq;        // [M, K] activations quantized per block, in q4_x_index order
  const float* dx;         // [M, K / 32] each block's activation scale
  const float* dx_lanes;   // [M, K / 32 * 4] the same, four times each
  const float* sx;         // [M, K / 32] each block's activation sum
  const float* bias;       // [N] or null
  float* out;              // [M, N]
  int64_t M, N, K;
};

void q4_chunk_avx2(const Q4Job& job, int64_t begin, int64_t end);
void q4_chunk_avx512(const Q4Job& job, int64_t begin, int64_t end);

// Where weight i (0..31) of block b of a row goes in its quantized activations: the
// blocks in groups of four (then one pair, then one block alone), a group holding the
// first 16 weights of each of its blocks, then the last 16 of each: the order of the
// low, then the high nibbles of the group's bytes.
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
