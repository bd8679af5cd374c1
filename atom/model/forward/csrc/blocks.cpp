// Products with weights in GGUF block formats, any number of rows of x: y = x · Wᵀ + b.
//
// int4_linear: Q4_1 blocks of 32 weights along each row: a float16 scale d, a float16
// minimum m and 32 nibbles q, a weight being d * q + m (0.625 bytes a weight).
// q5_linear: Q5_1 blocks of 32, as Q4_1 with a fifth bit to each q (0.75 bytes a
// weight).
// q6_linear: Q6_K's numbers in blocks of 32: its super-block's float16 scale d, the
// two int8 scales s of the block's halves of 16 and 32 six-bit values q, a weight
// being d * s * (q - 32) (0.875 bytes a weight).
// q8_linear: Q8_0 blocks of 32: a float16 scale d and 32 int8 values q, a weight being
// d * q (1.0625 bytes a weight), each value stored plus 128 (an unsigned byte, which
// the VNNI dot product takes).
//
// All four store the weights in tiles of 16 rows (kTileRows), a tile's blocks in
// order, each block of a tile in one stretch: Q4_1 four groups of 64 bytes, then the
// 16 scales, then the 16 minimums (320 bytes); Q5_1 the same 320 bytes for the low
// four bits of each q, then eight 64-bit planes of the fifth bits, two a group (its
// low nibbles', then its high nibbles'; bit 4j + i is row j's byte i of the group),
// 384 bytes; Q6_K Q4_1's 256 bytes of nibbles, the 16 float16 d, the 16 low halves'
// scales, the 16 high halves', the fifth bits' eight planes as Q5_1's, then the sixth
// bits' eight (448 bytes); Q8_0 eight groups of 64 bytes, then the 16 scales (544
// bytes). In group k, row j's four bytes (at 4j) are, for Q4_1, Q5_1 and Q6_K, its
// bytes 4k..4k + 3 of GGUF's nibble order (weight i low, weight i + 16 high):
// weights 4k..4k + 3 in the low nibbles, 16 + 4k.. in the high ones (so a Q6_K
// half-block is the low or the high nibbles); for Q8_0 its values 4k..4k + 3. `tiled` (atom/model/forward/blocks.py)
// writes them from the GGUF-order rows of int4.py, q5.py, q6.py and q8.py.
//
// Every product, one row or thousands, quantizes each row of x per 32-block to int8
// (scale dx), as llama.cpp's Q8_1, so a block contributes d * dx * Σ q·xq (+ m * Σx
// for Q4_1 and Q5_1; Q6_K: d * dx * Σ over the halves of s * Σ (q - 32)·xq, all but
// the last product in integers). Q6_K runs on the VNNI loops where AMX is chosen: its
// two scales a block would need a tile product for each half-block. The inner loops
// exist for AVX2 and AVX-512 with VNNI (loops.inc) and for AMX (loops_amx.cpp), and
// give the same bits; which one runs is decided once, from what the CPU and the OS
// support (kernel_isa). Prefill takes the same loops: on the
// Intel Xeon VM they beat the float GEMM on the weights expanded to float32 at every
// size measured (bench/results/history.md), and a row's result never depends on the rows beside it.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "blocks.h"
#include "ops.h"

namespace {

constexpr int64_t kBlock = 32;
// Rows of x per pass over the weights: a Q4_1 tile (15 KB at K = 1536) stays in L1
// while they pass, and 128 rows of x (≤ 200 KB) stay in L2.
constexpr int64_t kRowBlock = 128;
constexpr int64_t kPadding = 16 * kBlock;  // bytes past the activations any loop may read

struct Format {
  const char* name;
  int64_t block_bytes;   // a row's bytes for one block of 32 weights
  bool minimums;         // Q4_1, Q5_1: each block's activation sum is needed
  int32_t zero;          // Q8_0, Q6_K: the value stored for 0 (offsets -zero · Σ xq)
  bool halves;           // Q6_K: an offset a half-block of 16, not a block
  BlockChunk chunks[3];  // by instruction set (kIsas)
  int64_t offsets_a_block() const { return halves ? 2 : 1; }
};

constexpr Format kQ4_1{"Q4_1", 20, true, 0, false, {q4_chunk_avx2, q4_chunk_avx512, q4_chunk_amx}};
constexpr Format kQ5_1{"Q5_1", 24, true, 0, false, {q5_chunk_avx2, q5_chunk_avx512, q5_chunk_amx}};
constexpr Format kQ6_K{"Q6_K", 28, false, 32, true,
                       {q6_chunk_avx2, q6_chunk_avx512, q6_chunk_avx512}};
constexpr Format kQ8_0{"Q8_0", 34, false, 128, false,
                       {q8_chunk_avx2, q8_chunk_avx512, q8_chunk_amx}};

struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<float> sum;        // Q4_1, Q5_1: each block's float sum (the minimums' part)
  std::vector<int32_t> offsets;  // Q8_0, Q6_K: -zero · Σ xq of each block (Q6_K: half)
};

// Where block b of row m goes: rows are quantized in jobs of kRowBlock, each job's
// blocks in block-major order (b · rows + row), as the loops read them (loops.inc).
inline int64_t slot(int64_t m, int64_t b, int64_t M, int64_t nb) {
  const int64_t job = m - m % kRowBlock, rows = std::min(kRowBlock, M - job);
  return job * nb + b * rows + (m - job);
}

// A block of 32 activations quantized to int8 (scale d = amax / 127) into q: d, the
// block's float sum and the int sums of its halves' values. Written from a local copy,
// so the int8 stores (which may alias anything) leave the sums in registers.
struct QuantizedBlock {
  float d, sum;
  int32_t low, high;
};

inline QuantizedBlock quantize_block(const float* xb, int8_t* q) {
  float amax = 0.f, sum = 0.f;
  for (int64_t i = 0; i < kBlock; ++i) {
    amax = std::max(amax, std::fabs(xb[i]));
    sum += xb[i];
  }
  const float d = amax / 127.f, inv = d > 0.f ? 1.f / d : 0.f;
  int8_t values[kBlock];
  for (int64_t i = 0; i < kBlock; ++i) values[i] = static_cast<int8_t>(std::nearbyint(xb[i] * inv));
  int32_t low = 0, high = 0;
  for (int64_t i = 0; i < kBlock / 2; ++i) low += values[i], high += values[kBlock / 2 + i];
  std::memcpy(q, values, kBlock);
  return {d, sum, low, high};
}

QuantizedRows quantize_rows(const float* x, int64_t M, int64_t K, const Format& format) {
  const int64_t nb = K / kBlock;
  const bool q4 = format.minimums, halves = format.halves;
  const int32_t zero = format.zero;
  // kPadding: the AMX loops read a job's last block as 16 rows (loops_amx.cpp).
  QuantizedRows out{std::vector<int8_t>(M * K + kPadding), std::vector<float>(M * nb),
                    std::vector<float>(q4 ? M * nb : 0),
                    std::vector<int32_t>(q4 ? 0 : M * nb * format.offsets_a_block())};
  int8_t* q = out.q.data();
  float *scale = out.scale.data(), *sum = out.sum.data();
  int32_t* offsets = out.offsets.data();
  at::parallel_for(0, M, 16, [&](int64_t begin, int64_t end) {  // prompts: thousands of rows
    for (int64_t m = begin; m < end; ++m) {
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t at = slot(m, b, M, nb);
        const QuantizedBlock block = quantize_block(x + m * K + b * kBlock, q + at * kBlock);
        scale[at] = block.d;
        if (q4) {
          sum[at] = block.sum;
        } else if (halves) {
          offsets[2 * at] = -zero * block.low, offsets[2 * at + 1] = -zero * block.high;
        } else {
          offsets[at] = -zero * (block.low + block.high);
        }
      }
    }
  });
  return out;
}

bool has_avx512_vnni() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // also checks that the OS saves the AVX-512 registers
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

// AMX: the CPU lists the tile unit with int8, the OS saves the tile registers (XCR0
// bits 17 and 18), and it grants this process their state when asked (Linux's
// ARCH_REQ_XCOMP_PERM, once for all threads). Asked at most once.
bool has_amx_int8() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool granted = [] {
    unsigned a, b, c, d;
    // AVX-512 first: its check covers the OS's XSAVE support, which xgetbv needs.
    if (!has_avx512_vnni() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return false;  // AMX-TILE, AMX-INT8
    uint32_t low, high;
    __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
    if (((low >> 17) & 3) != 3) return false;
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

constexpr const char* kIsas[] = {"avx2", "avx512_vnni", "amx_int8"};
constexpr int kAvx512 = 1, kAmx = 2;
// Fewer rows of x than this take the VNNI loops even where AMX runs: a few rows stream
// the weights at the memory's pace either way, and from 8 rows the tiles are ahead
// (bench.kernels --isa avx512_vnni amx_int8; bench/results/history.md).
constexpr int64_t kAmxMinRows = 8;
std::atomic<int> chosen{-1};  // -1: not decided yet; else an index of kIsas

bool isa_available(int i) {
  return i == 0 || (i == kAvx512 && has_avx512_vnni()) || (i == kAmx && has_amx_int8());
}

int isa_index() {
  int i = chosen.load();
  if (i < 0) {
    i = has_amx_int8() ? kAmx : has_avx512_vnni() ? kAvx512 : 0;
    chosen.store(i);
  }
  return i;
}

// The loops for a job of M rows: the chosen set's, but VNNI's below kAmxMinRows rows
// (the same bits: loops_amx.cpp).
BlockChunk chunk_for(const Format& format, int64_t M) {
  const int i = isa_index();
  return format.chunks[i == kAmx && M < kAmxMinRows ? kAvx512 : i];
}

torch::Tensor block_linear(const torch::Tensor& x, const torch::Tensor& blocks,
                           const c10::optional<torch::Tensor>& bias, const Format& format) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32 && blocks.scalar_type() == torch::kUInt8 &&
                  blocks.is_contiguous(),
              format.name, " linear: float32 x, contiguous uint8 blocks");
  const int64_t K = x.size(-1), N = blocks.size(0);
  TORCH_CHECK(K % kBlock == 0 && blocks.size(1) == K / kBlock * format.block_bytes,
              format.name, " linear: blocks of 32 weights along the input");
  TORCH_CHECK(N % kTileRows == 0, format.name, " linear: weights in tiles of 16 rows, not ", N);
  auto flat = x.reshape({-1, K}).contiguous();
  const int64_t M = flat.size(0), nb = K / kBlock;
  const QuantizedRows xq = quantize_rows(flat.data_ptr<float>(), M, K, format);
  auto out = torch::empty({M, N}, flat.options());
  const torch::Tensor b = bias.has_value() ? bias->contiguous() : torch::Tensor();
  for (int64_t m0 = 0; m0 < M; m0 += kRowBlock) {
    const BlockJob job{blocks.data_ptr<uint8_t>(),
                       xq.q.data() + m0 * K,
                       xq.scale.data() + m0 * nb,
                       xq.sum.empty() ? nullptr : xq.sum.data() + m0 * nb,
                       xq.offsets.empty() ? nullptr
                                          : xq.offsets.data() + m0 * nb * format.offsets_a_block(),
                       format.halves,
                       b.defined() ? b.data_ptr<float>() : nullptr,
                       out.data_ptr<float>() + m0 * N,
                       std::min(kRowBlock, M - m0),
                       N,
                       K};
    const BlockChunk chunk = chunk_for(format, job.M);
    at::parallel_for(0, N / kTileRows, 1, [&](int64_t begin, int64_t end) { chunk(job, begin, end); });
  }
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  return out.view(sizes);
}

}  // namespace

std::string kernel_isa() { return kIsas[isa_index()]; }

bool wide_vectors() { return isa_index() != 0; }

std::string set_kernel_isa(const std::string& name) {
  const std::string before = kernel_isa();
  for (int i = 0; i < 3; ++i) {
    if (name == kIsas[i]) {
      TORCH_CHECK(isa_available(i), "set_kernel_isa: this CPU (or its OS) has no ", name);
      chosen.store(i);
      return before;
    }
  }
  TORCH_CHECK(false, "set_kernel_isa: one of avx2, avx512_vnni, amx_int8, not ", name);
}

// blocks: uint8 [N, K / 32 * 20], Q4_1 tiles (see above); x float32 [..., K].
torch::Tensor int4_linear(torch::Tensor x, torch::Tensor blocks,
                          c10::optional<torch::Tensor> bias) {
  return block_linear(x, blocks, bias, kQ4_1);
}

// blocks: uint8 [N, K / 32 * 24], Q5_1 tiles (see above); x float32 [..., K].
torch::Tensor q5_linear(torch::Tensor x, torch::Tensor blocks,
                        c10::optional<torch::Tensor> bias) {
  return block_linear(x, blocks, bias, kQ5_1);
}

// blocks: uint8 [N, K / 32 * 28], Q6_K tiles (see above); x float32 [..., K].
torch::Tensor q6_linear(torch::Tensor x, torch::Tensor blocks,
                        c10::optional<torch::Tensor> bias) {
  return block_linear(x, blocks, bias, kQ6_K);
}

// blocks: uint8 [N, K / 32 * 34], Q8_0 tiles (see above); x float32 [..., K].
torch::Tensor q8_linear(torch::Tensor x, torch::Tensor blocks, c10::optional<torch::Tensor> bias) {
  return block_linear(x, blocks, bias, kQ8_0);
}
