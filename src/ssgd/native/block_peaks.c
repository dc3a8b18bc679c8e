/* Block peaks and float64 statistics of a float32 vector in one read.
 *
 * Gaussian-k (Shi, Chu, Cheung, See, "Understanding Top-k Sparsification in Distributed Deep
 * Learning", arXiv:1911.08772; released code hclhkbu/GaussianK-SGD) needs the mean and standard
 * deviation of u, then counts the entries above thresholds; the lab's exact Top-k needs the largest
 * |u_j| of every block of consecutive entries (ssgd/compress/sparse.py, `BlockPeaks`). As torch
 * operations that is four reads of u and a float64 copy of every chunk; this loop reads u once, at
 * the memory's speed (timings with their command: docs/hot-path.md).
 *
 * Semantics (the torch fallback in ssgd/compress/sparse.py; tests/unit/test_block_peaks.py):
 *   - peak[b] = max |u_j| over block b (entries b*block .. b*block+block-1), for b < n / block,
 *     ranked by the bits of |u_j| (bits & 0x7fffffff): the largest magnitude, +0.0 for a block of
 *     zeros, and a NaN when the block holds one (NaN ranks above infinity), as torch's
 *     maximum(amax, -amin) propagates it; the last n mod block entries belong to no block;
 *   - sums[0], sums[1] = the float64 sum of u_j and of u_j * u_j over all n entries, in a fixed
 *     order that does not depend on block: per chunk of CHUNK consecutive entries (the last one may
 *     be shorter), LANES float64 lanes, lane l taking the entries at offsets = l mod LANES of the
 *     chunk's first floor(len / LANES) * LANES entries in order, the lanes added in order, then the
 *     chunk's last len mod LANES entries in order; the chunks' totals added in order. The bits do not
 *     depend on the SIMD width the compiler picks (no reassociation: no -ffast-math), so every host
 *     gets the same statistics. The torch fallback sums in another order: the two agree to ~1e-14
 *     relative, not bit for bit.
 * block must be a power of two from LANES to CHUNK (so blocks tile chunks); the Python side checks it,
 * and allocates every array.
 */
#include <stdint.h>
#include <string.h>

#define LANES 8
#define CHUNK 65536

static uint32_t magnitude_bits(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits & 0x7fffffffu;
}

static float float_of(uint32_t bits)
{
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Adds the LANES lanes s, q in order to *total / *squares (after `tail` more entries, in order, at p). */
static inline void add_lanes(const double *s, const double *q, const float *p, int64_t tail, double *total,
                             double *squares)
{
    double cs = 0.0, cq = 0.0;
    for (int l = 0; l < LANES; l++) {
        cs += s[l];
        cq += q[l];
    }
    for (int64_t j = 0; j < tail; j++) {
        double v = p[j];
        cs += v;
        cq += v * v;
    }
    *total += cs;
    *squares += cq;
}

/* The sums of the len entries at p (one chunk, or its part past the last whole block: see above). */
static inline void chunk_sums(const float *p, int64_t len, double *total, double *squares)
{
    double s[LANES] = {0}, q[LANES] = {0};
    int64_t whole = len / LANES * LANES;
    for (int64_t j = 0; j < whole; j += LANES)
        for (int l = 0; l < LANES; l++) {
            double v = p[j + l];
            s[l] += v;
            q[l] += v * v;
        }
    add_lanes(s, q, p + whole, len - whole, total, squares);
}

/* Blocks [first, end) of one chunk (whole blocks of a whole chunk when with_sums): their peaks, and
 * with_sums the chunk's sums added to *total / *squares, in chunk_sums' order. */
static inline void chunk_peaks(const float *u, int64_t first, int64_t end, int64_t block, float *peak,
                               int with_sums, double *total, double *squares)
{
    double s[LANES] = {0}, q[LANES] = {0};
    for (int64_t b = first; b < end; b++) {
        const float *p = u + b * block;
        uint32_t m[LANES] = {0};
        for (int64_t j = 0; j < block; j += LANES)
            for (int l = 0; l < LANES; l++) {
                float x = p[j + l];
                uint32_t key = magnitude_bits(x);
                m[l] = key > m[l] ? key : m[l];
                if (with_sums) {
                    double v = x;
                    s[l] += v;
                    q[l] += v * v;
                }
            }
        uint32_t top = 0;
        for (int l = 0; l < LANES; l++)
            top = m[l] > top ? m[l] : top;
        peak[b] = float_of(top);
    }
    if (with_sums)
        add_lanes(s, q, u, 0, total, squares);
}

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define SIMD_CLONES __attribute__((target_clones("avx2", "default")))   /* picked at load time; same bits */
#else
#define SIMD_CLONES
#endif

/* peak[0 .. n / block) and, when sums is not NULL, sums[0..1] (see the top of this file). */
SIMD_CLONES
void ssgd_block_peaks(const float *u, int64_t n, int64_t block, float *peak, double *sums)
{
    int64_t chunks = n / CHUNK, per_chunk = CHUNK / block, blocks = n / block;
    double total = 0.0, squares = 0.0;
    for (int64_t c = 0; c < chunks; c++) {
        if (sums)
            chunk_peaks(u, c * per_chunk, (c + 1) * per_chunk, block, peak, 1, &total, &squares);
        else
            chunk_peaks(u, c * per_chunk, (c + 1) * per_chunk, block, peak, 0, &total, &squares);
    }
    chunk_peaks(u, chunks * per_chunk, blocks, block, peak, 0, &total, &squares);   /* the last, short chunk */
    if (sums) {
        chunk_sums(u + chunks * CHUNK, n - chunks * CHUNK, &total, &squares);
        sums[0] = total;
        sums[1] = squares;
    }
}

/* sums[0..1] alone, the same bits as ssgd_block_peaks' with any block. */
SIMD_CLONES
void ssgd_float64_sums(const float *u, int64_t n, double *sums)
{
    double total = 0.0, squares = 0.0;
    for (int64_t c = 0; c < n; c += CHUNK)
        chunk_sums(u + c, n - c < CHUNK ? n - c : CHUNK, &total, &squares);
    sums[0] = total;
    sums[1] = squares;
}
