// The block-format loops on AMX, Intel's tile unit (int8), chosen at run time
// (blocks.cpp) only where the CPU lists it and the OS has granted this process the
// tile state: without that grant the first tile instruction traps, which is how a
// llama.cpp build died on the Intel Xeon VM (bench/results/history.md).
//
// One tile product a block of 32 inputs: up to 16 rows of x (tile A, a row of x a row
// of the tile, its 32 int8 of the block: the activations lie block-major, so the rows
// are 32 bytes apart) times the block's 16 weight rows (tile B, eight rows of 64 bytes,
// row k the four bytes each weight row meets inputs 4k..4k + 3: the tile layout the
// VNNI loops read, Q4_1's nibbles unpacked to bytes first) gives every (row of x,
// weight row) pair the block's exact integer sum. From there the float arithmetic of
// the VNNI loops (loops.inc), in the same order, so a row gets the same bits here as
// there; only the dot products moved to the tile unit (16 VNNI instructions' worth of
// multiply-adds a row of x and block, where the vector loops issue them one by one).
#include "blocks.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,avx512dq,amx-tile,amx-int8")
#pragma GCC optimize("no-tree-vectorize")  // as loops_avx512.cpp
#define LOOPS_WIDE 1
#include "loops.inc"

namespace {

constexpr int64_t kTileMax = 16;  // rows of x a tile product

// Two sets of tiles (the intrinsics take their numbers as literals), so one block's
// product runs on the tile unit while the vector units fold the block before it: x in
// 0 and 1 (16 rows of 32 bytes), the weights in 2 and 3 (8 rows of 64), the sums in 4
// and 5 (16 rows of 16 int32).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure() {
  TileConfig c;
  for (int set = 0; set < 2; ++set) {
    c.rows[set] = kTileMax, c.colsb[set] = kBlock;
    c.rows[2 + set] = 8, c.colsb[2 + set] = 64;
    c.rows[4 + set] = kTileMax, c.colsb[4 + set] = 64;
  }
  // Not _tile_loadconfig: GCC 12's tells the compiler it reads 8 bytes of the 64, so
  // the stores of the rest may be dropped (a tile instruction then traps).
  __asm__ volatile("ldtilecfg %0" : : "m"(c) : "memory");
}

// The tile instructions, written out: GCC 12's intrinsics do not tell the compiler
// which memory a tile load reads (so the stores that unpack the weights could be moved
// past it) and make every tile store clobber all memory (so the running totals were
// stored and reloaded around each). Each names its own bytes here.
#define ATOM_TILE_LOAD(tile, base, stride, bytes)                                        \
  __asm__ volatile("tileloadd (%1,%2,1), %%tmm" #tile                                   \
                   : : "m"(*reinterpret_cast<const uint8_t(*)[bytes]>(base)), "r"(base), \
                     "r"(static_cast<int64_t>(stride)))
#define ATOM_TILE_STORE(tile, base)                                                   \
  __asm__ volatile("tilestored %%tmm" #tile ", (%1,%2,1)"                             \
                   : "=m"(*reinterpret_cast<int32_t(*)[kTileMax * kLanes]>(base)) \
                   : "r"(base), "r"(static_cast<int64_t>(64)))

// Block products on tile set 0 or 1: x (16 rows from `x`) times the weights (tile B at
// `w`), into the set's sums.
template <int Set>
inline void product(const int8_t* x, const uint8_t* w) {
  if constexpr (Set == 0) {
    _tile_zero(4);
    ATOM_TILE_LOAD(0, x, kBlock, kTileMax * kBlock);
    ATOM_TILE_LOAD(2, w, 64, 512);
    _tile_dpbsud(4, 0, 2);
  } else {
    _tile_zero(5);
    ATOM_TILE_LOAD(1, x, kBlock, kTileMax * kBlock);
    ATOM_TILE_LOAD(3, w, 64, 512);
    _tile_dpbsud(5, 1, 3);
  }
}

template <int Set>
inline void sums_of(int32_t* sums) {
  if constexpr (Set == 0) {
    ATOM_TILE_STORE(4, sums);
  } else {
    ATOM_TILE_STORE(5, sums);
  }
}

// Tile B of block p: Q4_1's nibbles unpacked to bytes in `unpacked` (group k's low
// nibbles are row k, its high ones row 4 + k; Q5_1's with their fifth bits); Q8_0's
// eight groups as they lie (values + 128, unsigned).
template <bool Five>
struct AmxQ4 {
  static constexpr int64_t kTileBlockBytes = Five ? kQ5TileBlock : kQ4TileBlock;
  static const uint8_t* weights(const uint8_t* p, uint8_t* unpacked) {
    for (int k = 0; k < 4; ++k) {
      Vi low, high;
      group_values<Five ? 5 : 4>(p, k, 0, low, high);
      _mm512_store_si512(unpacked + 64 * k, low);
      _mm512_store_si512(unpacked + 64 * (4 + k), high);
    }
    return unpacked;
  }
  // Rows [first, first + R) of block b's sums (16 int32 a row) into their totals.
  template <int R>
  static void fold(const uint8_t* p, const Rows& r, int64_t b, int first, const int32_t* sums,
                   Vf* total) {
    const Vf d = hload(p + 256), mins = hload(p + 288);
    const float *scale = r.dx + r.at(first, b), *sum_x = r.sx + r.at(first, b);
#pragma GCC unroll 16  // early, so the totals become registers
    for (int i = 0; i < R; ++i) {
      const Vi sum = _mm512_load_si512(sums + i * kLanes);
      total[i] = q4_fold(total[i], sum, d, mins, scale[i], sum_x[i]);
    }
  }
};

struct AmxQ8 {
  static constexpr int64_t kTileBlockBytes = kQ8TileBlock;
  static const uint8_t* weights(const uint8_t* p, uint8_t*) { return p; }
  template <int R>
  static void fold(const uint8_t* p, const Rows& r, int64_t b, int first, const int32_t* sums,
                   Vf* total) {
    const Vf d = hload(p + 512);
    const float* scale = r.dx + r.at(first, b);
    const int32_t* offset = r.offsets + r.at(first, b);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const Vi sum = _mm512_add_epi32(q8_start(offset[i]), _mm512_load_si512(sums + i * kLanes));
      total[i] = q8_fold(total[i], sum, d, scale[i]);
    }
  }
};

// One tile of weights (its blocks from `tile`) times R rows of x from `first`, whose
// sums are rows `skip`.. of a 16-row product from row `first - skip` (a job's last rows
// are a 16-row product's too: the activations are padded for it, blocks.cpp). Their
// totals stay in registers across the blocks; block b + 1's product is under way while
// block b's sums are folded.
template <class Format, int R>
void rows_times_tile(const uint8_t* tile, const Rows& r, int64_t nb, int first, int skip,
                     const float* bias, int64_t column) {
  alignas(64) int32_t sums[2][kTileMax * kLanes];
  alignas(64) uint8_t unpacked[2][512];
  const auto x = [&](int64_t b) { return r.xq(first - skip, b); };
  const auto block = [&](int64_t b) { return tile + b * Format::kTileBlockBytes; };
  const auto weights = [&](int64_t b, uint8_t* buffer) {
    prefetch_ahead(block(b), Format::kTileBlockBytes);
    return Format::weights(block(b), buffer);
  };
  Vf total[R];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) total[i] = fzero();
  product<0>(x(0), weights(0, unpacked[0]));
  for (int64_t b = 0; b < nb; b += 2) {
    if (b + 1 < nb) product<1>(x(b + 1), weights(b + 1, unpacked[1]));
    sums_of<0>(sums[0]);
    Format::template fold<R>(block(b), r, b, first, sums[0] + skip * kLanes, total);
    if (b + 1 == nb) break;
    if (b + 2 < nb) product<0>(x(b + 2), weights(b + 2, unpacked[0]));
    sums_of<1>(sums[1]);
    Format::template fold<R>(block(b + 1), r, b + 1, first, sums[1] + skip * kLanes, total);
  }
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) store(r, first + i, column, bias, total[i]);
}

// R = rows, as a template argument (the totals are registers).
template <class Format, int R = kTileMax>
void rows_times_tile_of(int rows, const uint8_t* tile, const Rows& r, int64_t nb, int first,
                        int skip, const float* bias, int64_t column) {
  if constexpr (R > 1) {
    if (rows < R) {
      rows_times_tile_of<Format, R - 1>(rows, tile, r, nb, first, skip, bias, column);
      return;
    }
  }
  rows_times_tile<Format, R>(tile, r, nb, first, skip, bias, column);
}

// Weight tiles [begin, end) of `Format` times every row of the job, 16 rows at a time.
template <class Format>
void amx_chunk(const BlockJob& job, int64_t begin, int64_t end) {
  configure();
  const int64_t nb = job.K / kBlock;
  const Rows r = rows_of(job, 0);
  const int M = static_cast<int>(job.M);
  for (int64_t t = begin; t < end; ++t) {
    const uint8_t* tile = job.weights + t * nb * Format::kTileBlockBytes;
    for (int first = 0; first < M; first += kTileMax) {
      const int rows = M - first < kTileMax ? M - first : kTileMax;
      const int skip = rows == kTileMax || M < kTileMax ? 0 : kTileMax - rows;
      rows_times_tile_of<Format>(rows, tile, r, nb, first, skip, job.bias, t * kTileRows);
    }
  }
  _tile_release();
}

}  // namespace

void q4_chunk_amx(const BlockJob& job, int64_t begin, int64_t end) { amx_chunk<AmxQ4<false>>(job, begin, end); }
void q5_chunk_amx(const BlockJob& job, int64_t begin, int64_t end) { amx_chunk<AmxQ4<true>>(job, begin, end); }
void q8_chunk_amx(const BlockJob& job, int64_t begin, int64_t end) { amx_chunk<AmxQ8>(job, begin, end); }
#else
void q4_chunk_amx(const BlockJob& job, int64_t begin, int64_t end) { q4_chunk_avx2(job, begin, end); }
void q5_chunk_amx(const BlockJob& job, int64_t begin, int64_t end) { q5_chunk_avx2(job, begin, end); }
void q8_chunk_amx(const BlockJob& job, int64_t begin, int64_t end) { q8_chunk_avx2(job, begin, end); }
#endif
