// The 4-bit block product for AVX-512 with VNNI, chosen at run time (int4.cpp) when
// the CPU and the OS support it: q4_kernel.inc with a 512-bit main loop.
#include "q4.h"

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq")
#define Q4_WIDE 1
#define Q4_CHUNK q4_chunk_avx512
#include "q4_kernel.inc"
#else
void q4_chunk_avx512(const Q4Job& job, int64_t begin, int64_t end) {
  q4_chunk_avx2(job, begin, end);
}
#endif
