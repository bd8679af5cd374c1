// The block-format loops for AVX2 (the build's baseline).
#define LOOPS_WIDE 0
#define Q4_CHUNK q4_chunk_avx2
#define Q5_CHUNK q5_chunk_avx2
#define Q6_CHUNK q6_chunk_avx2
#define Q8_CHUNK q8_chunk_avx2
#include "loops.inc"
