// The 4-bit block product for AVX2 (the build's baseline): q4_kernel.inc.
#define Q4_WIDE 0
#define Q4_CHUNK q4_chunk_avx2
#include "q4_kernel.inc"
