// The block-format loops for AVX-512 with VNNI, chosen at run time (blocks.cpp) when
// the CPU and the OS support it: 512-bit main loops.
#include "blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")
// No auto-vectorization here: the loops are written in intrinsics, and GCC 12's
// vectorizer turns the plain 32-byte dot products of the one-block tails into wrong
// VNNI code (Σ (v - 128) · x of one block came out 5984 for 30560, with -O2 or -O3).
#pragma GCC optimize("no-tree-vectorize")
#define LOOPS_WIDE 1
#define Q4_CHUNK q4_chunk_avx512
#define Q5_CHUNK q5_chunk_avx512
#define Q6_CHUNK q6_chunk_avx512
#define Q8_CHUNK q8_chunk_avx512
#include "loops.inc"
#else
void q4_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end) {
  q4_chunk_avx2(job, begin, end);
}
void q5_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end) {
  q5_chunk_avx2(job, begin, end);
}
void q6_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end) {
  q6_chunk_avx2(job, begin, end);
}
void q8_chunk_avx512(const BlockJob& job, int64_t begin, int64_t end) {
  q8_chunk_avx2(job, begin, end);
}
#endif
