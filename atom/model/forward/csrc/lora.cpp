#include "ops.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

// LoRA deltas (atom/model/lora/mixing.py): each row's adapter slot gives h = A_s x (its
// rank room of dot products), then out += B_s h. Rows of one slot go in tiles that
// share each load of the weights, but every row's arithmetic is its own and in one
// order: a row's result depends on its values and slot only, the same bits alone or
// among any rows, with any mix of adapters.
namespace {

// h[r][k] = x_r . a_k for a block of R rows and K rows of A: every pair sums in 8 lanes
// (lane l takes the inputs i = l mod 8, in order), then the lanes pairwise, then the
// tail; the same arithmetic for a pair whatever block it is in. Loads of x and A are
// shared by the block (the products are load-bound otherwise).
inline float reduce8(const float* lanes) {
  const float a = (lanes[0] + lanes[4]) + (lanes[2] + lanes[6]);
  const float b = (lanes[1] + lanes[5]) + (lanes[3] + lanes[7]);
  return a + b;
}

#if defined(__AVX2__) && defined(__FMA__)
template <int R, int K>
inline void dot_block(const float* const* xs, const float* a, int64_t n, float* h,
                      int64_t room) {
  __m256 acc[R][K];
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k) acc[r][k] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 av[K];
    for (int k = 0; k < K; ++k) av[k] = _mm256_loadu_ps(a + k * n + i);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(xs[r] + i);
      for (int k = 0; k < K; ++k) acc[r][k] = _mm256_fmadd_ps(xv, av[k], acc[r][k]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[r][k]);
      float tail = 0.f;
      for (int64_t j = i; j < n; ++j) tail += xs[r][j] * a[k * n + j];
      h[r * room + k] = reduce8(lanes) + tail;
    }
  }
}
#else
template <int R, int K>
inline void dot_block(const float* const* xs, const float* a, int64_t n, float* h,
                      int64_t room) {
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) {
      float lanes[8] = {};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) lanes[l] += xs[r][i + l] * a[k * n + i + l];
      float tail = 0.f;
      for (; i < n; ++i) tail += xs[r][i] * a[k * n + i];
      h[r * room + k] = reduce8(lanes) + tail;
    }
  }
}
#endif

// h [rows][room] of a tile's rows (pointers into x), blocks of 2 rows x 4 rows of A.
inline void tile_dots(const float* const* xs, int64_t rows, const float* a, int64_t n,
                      int64_t room, float* h) {
  int64_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    int64_t k = 0;
    for (; k + 4 <= room; k += 4) dot_block<2, 4>(xs + r, a + k * n, n, h + r * room + k, room);
    for (; k < room; ++k) dot_block<2, 1>(xs + r, a + k * n, n, h + r * room + k, room);
  }
  for (; r < rows; ++r) {
    int64_t k = 0;
    for (; k + 4 <= room; k += 4) dot_block<1, 4>(xs + r, a + k * n, n, h + r * room + k, room);
    for (; k < room; ++k) dot_block<1, 1>(xs + r, a + k * n, n, h + r * room + k, room);
  }
}

// Columns [j, j1) one at a time (the same sum per column as the blocks below).
template <int R>
inline void add_tail(float* const* outs, const float* const* hs, const float* b,
                     const int64_t* cols, int64_t room, int64_t n_out, int64_t j, int64_t j1) {
  for (int r = 0; r < R; ++r) {
    for (int64_t jj = j; jj < j1; ++jj) {
      float acc = outs[r][jj];
      for (int64_t k = 0; k < room; ++k) {
        if (jj >= cols[2 * k] && jj < cols[2 * k + 1])
          acc = std::fma(hs[r][k], b[k * n_out + jj], acc);
      }
      outs[r][jj] = acc;
    }
  }
}

// out_r[j0:j1] += B h_r for R rows, 32 columns at a time held in registers across
// every k (one load and store of out a block, and each load of B shared by the R
// rows); every column sums in k order, the same for any R. `cols` [room][2]: the
// columns where each row of B can be non-zero (a fused projection's B is block-
// diagonal, and rows past an adapter's rank are zero); the rest is skipped.
#if defined(__AVX2__) && defined(__FMA__)
template <int R>
inline void add_products(float* const* outs, const float* const* hs, const float* b,
                         const int64_t* cols, int64_t room, int64_t n_out, int64_t j0,
                         int64_t j1) {
  int64_t j = j0;
  for (; j + 32 <= j1; j += 32) {
    __m256 acc[R][4];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_loadu_ps(outs[r] + j + 8 * v);
    for (int64_t k = 0; k < room; ++k) {
      if (j + 32 <= cols[2 * k] || j >= cols[2 * k + 1]) continue;  // B's zeros there
      const float* bk = b + k * n_out + j;
      __m256 bv[4];
      for (int v = 0; v < 4; ++v) bv[v] = _mm256_loadu_ps(bk + 8 * v);
      for (int r = 0; r < R; ++r) {
        const __m256 hk = _mm256_set1_ps(hs[r][k]);
        for (int v = 0; v < 4; ++v) acc[r][v] = _mm256_fmadd_ps(hk, bv[v], acc[r][v]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < 4; ++v) _mm256_storeu_ps(outs[r] + j + 8 * v, acc[r][v]);
  }
  add_tail<R>(outs, hs, b, cols, room, n_out, j, j1);
}
#else
template <int R>
inline void add_products(float* const* outs, const float* const* hs, const float* b,
                         const int64_t* cols, int64_t room, int64_t n_out, int64_t j0,
                         int64_t j1) {
  add_tail<R>(outs, hs, b, cols, room, n_out, j0, j1);
}
#endif

constexpr int64_t kTile = 8;    // rows of one slot that share each load of A and B
constexpr int64_t kCols = 512;  // output columns a task of the B product covers (32s)

}  // namespace

void lora_add(torch::Tensor out, torch::Tensor x, torch::Tensor a, torch::Tensor b_t,
              torch::Tensor cols, torch::Tensor row_slots, int64_t room) {
  TORCH_CHECK(x.dim() == 2 && out.dim() == 2 && x.size(0) == out.size(0),
              "lora_add: x [rows, in] and out [rows, out]");
  TORCH_CHECK(x.scalar_type() == torch::kFloat && out.scalar_type() == torch::kFloat &&
                  a.scalar_type() == torch::kFloat && b_t.scalar_type() == torch::kFloat,
              "lora_add: float32 only");
  TORCH_CHECK(out.stride(1) == 1 && a.is_contiguous() && b_t.is_contiguous() &&
                  a.size(1) == x.size(1) && b_t.size(1) == out.size(1) &&
                  a.size(0) == b_t.size(0) && room > 0 && a.size(0) % room == 0,
              "lora_add: a [slots * room, in] and b_t [slots * room, out], contiguous");
  TORCH_CHECK(cols.scalar_type() == torch::kLong && cols.is_contiguous() &&
                  cols.numel() == 2 * a.size(0),
              "lora_add: cols [slots * room, 2] int64");
  TORCH_CHECK(row_slots.scalar_type() == torch::kLong && row_slots.numel() == x.size(0),
              "lora_add: one int64 slot a row (-1: none)");
  const auto xc = x.contiguous();
  const auto slots = row_slots.contiguous();
  const int64_t rows = x.size(0), n_in = x.size(1), n_out = out.size(1);
  const int64_t num_slots = a.size(0) / room, out_stride = out.stride(0);
  const float* xp = xc.data_ptr<float>();
  const float* ap = a.data_ptr<float>();
  const float* bp = b_t.data_ptr<float>();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t* cp = cols.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  // Tiles: up to kTile rows of one slot, so a row of A or B is read once from memory
  // for all of them (it stays in L1 while each row of the tile uses it).
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t s = 0; s < num_slots; ++s) {
    std::vector<int64_t> tile;
    for (int64_t r = 0; r < rows; ++r) {
      if (sp[r] != s) continue;
      tile.push_back(r);
      if (static_cast<int64_t>(tile.size()) == kTile) tiles.push_back(std::move(tile)), tile = {};
    }
    if (!tile.empty()) tiles.push_back(std::move(tile));
  }
  for (int64_t r = 0; r < rows; ++r) TORCH_CHECK(sp[r] < num_slots, "lora_add: a slot past the stack");
  // h = A_s x for every row of every tile.
  std::vector<float> h(tiles.size() * kTile * room);
  at::parallel_for(0, static_cast<int64_t>(tiles.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const auto& tile = tiles[t];
      const float* xs[kTile];
      for (size_t i = 0; i < tile.size(); ++i) xs[i] = xp + tile[i] * n_in;
      const float* as = ap + sp[tile[0]] * room * n_in;
      tile_dots(xs, static_cast<int64_t>(tile.size()), as, n_in, room, h.data() + t * kTile * room);
    }
  });
  // out += B_s h, split by tiles and by column blocks (one row alone uses every thread).
  const int64_t col_blocks = (n_out + kCols - 1) / kCols;
  const int64_t tasks = static_cast<int64_t>(tiles.size()) * col_blocks;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t t = task / col_blocks, j0 = (task % col_blocks) * kCols;
      const int64_t width = std::min(kCols, n_out - j0);
      const auto& tile = tiles[t];
      const float* bs = bp + sp[tile[0]] * room * n_out;
      const int64_t n = static_cast<int64_t>(tile.size());
      float* outs[kTile];
      const float* hs[kTile];
      for (int64_t i = 0; i < n; ++i) {
        outs[i] = op + tile[i] * out_stride;
        hs[i] = h.data() + (t * kTile + i) * room;
      }
      int64_t i = 0;
      const int64_t* cs = cp + sp[tile[0]] * room * 2;
      for (; i + 2 <= n; i += 2)
        add_products<2>(outs + i, hs + i, bs, cs, room, n_out, j0, j0 + width);
      if (i < n) add_products<1>(outs + i, hs + i, bs, cs, room, n_out, j0, j0 + width);
    }
  });
}
