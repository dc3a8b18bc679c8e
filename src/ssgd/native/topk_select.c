/* Exact Top-k by magnitude in time O(d / block + k): the radix selection of the k-th largest
 * magnitude key (shared with the gTop-k merge, gtopk_merge.c), and the block-peak Top-k of a float32
 * vector that ssgd/compress/sparse.py `select_topk` calls (docs/hot-path.md).
 *
 * Top-k S-SGD (Shi et al., ICDCS 2019, arXiv:1901.04359; Shi, Chu, Cheung, See, arXiv:1911.08772)
 * selects the k entries of u of largest magnitude. With the largest magnitude of every block of
 * `block` consecutive entries known (block_peaks.c), t = the k-th largest block peak is a lower
 * bound of the k-th largest |u_j| (the k blocks whose peak is >= t each hold an entry >= t), so only
 * the blocks whose peak is >= t, and the last n mod block entries, can hold a Top-k entry. This file
 * gathers their entries >= t (about 1.0-1.2 k of them), selects the k-th largest magnitude T among
 * them, and writes the positions of the entries above T and of those equal to it, in increasing
 * order, when that is exactly k positions: then the Top-k set is unique, so it is the set torch.topk
 * returns. When more entries equal T than the k largest take (a tie at the boundary), it writes
 * nothing and says so, and the caller breaks the tie as torch.topk does.
 *
 * Magnitudes are ranked by the bits of |v| (bits(v) & 0x7fffffff), the order of |v| for numbers;
 * the caller passes NaN-free u (a NaN peak sends it to torch.topk). The Python side
 * (ssgd/native/__init__.py) allocates every array with torch and checks dtypes and lengths.
 */
#include <stdint.h>
#include <string.h>

static uint32_t magnitude_key(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits & 0x7fffffffu;
}

/* From the top down, the bucket of hist[buckets] where the need-th largest lies; *need becomes its
 * rank inside that bucket. */
static int64_t bucket_of(const int64_t *hist, int64_t buckets, int64_t *need)
{
    int64_t above = 0, b;
    for (b = buckets - 1; b > 0 && above + hist[b] < *need; b--)
        above += hist[b];
    *need -= above;
    return b;
}

/* The k-th largest of keys[n] (1 <= k <= n) by radix selection on their top 12 bits, then 10 + 10
 * bits among the keys of the chosen bucket (gathered into cand[n]); *take is set to how many keys
 * equal to it belong to the k largest (the others that large are above it). */
uint32_t ssgd_kth_largest(const uint32_t *keys, int64_t n, int64_t k, uint32_t *cand, int64_t *take)
{
    int64_t hist12[4096], hist[1024], need = k, c = 0, b, w;
    uint32_t top, prefix;
    memset(hist12, 0, sizeof hist12);
    for (int64_t p = 0; p < n; p++)
        hist12[keys[p] >> 20]++;
    top = (uint32_t)bucket_of(hist12, 4096, &need);
    for (int64_t p = 0; p < n; p++) {                 /* branch-free gather of the bucket's keys */
        cand[c] = keys[p];
        c += (keys[p] >> 20) == top;
    }
    memset(hist, 0, sizeof hist);
    for (int64_t p = 0; p < c; p++)
        hist[(cand[p] >> 10) & 1023u]++;
    b = bucket_of(hist, 1024, &need);
    prefix = top << 20 | (uint32_t)b << 10;
    memset(hist, 0, sizeof hist);
    for (w = 0; w < c; w++)
        if ((cand[w] >> 10) == prefix >> 10) hist[cand[w] & 1023u]++;
    b = bucket_of(hist, 1024, &need);
    *take = need;
    return prefix | (uint32_t)b;
}

/* t = the k-th largest of the blocks' peaks (peak[blocks], NaN-free magnitudes: their bits are their
 * keys; 1 <= k <= blocks) into *thr, using work[blocks]; returns how many peaks are >= t. */
int64_t ssgd_topk_threshold(const float *peak, int64_t blocks, int64_t k, uint32_t *work, uint32_t *thr)
{
    int64_t take, count = 0;
    const uint32_t *keys = (const uint32_t *)(const void *)peak;
    uint32_t t = ssgd_kth_largest(keys, blocks, k, work, &take);
    for (int64_t b = 0; b < blocks; b++)
        count += keys[b] >= t;
    *thr = t;
    return count;
}

/* The positions and keys of the entries >= thr of the blocks whose peak key is >= thr, in increasing
 * position, into pos[] and keys[] (cap slots, block of them free for every block visited); returns how
 * many, or -1 when cap runs out. */
static int64_t gather_scalar(const float *u, int64_t blocks, int64_t block, const uint32_t *peak_keys,
                             uint32_t thr, int64_t *pos, uint32_t *keys, int64_t cap)
{
    int64_t m = 0;
    for (int64_t b = 0; b < blocks; b++) {
        if (peak_keys[b] < thr) continue;
        if (m + block > cap) return -1;
        const float *p = u + b * block;
        for (int64_t i = 0; i < block; i++) {     /* branch-free compaction: writes land at m */
            uint32_t key = magnitude_key(p[i]);
            pos[m] = b * block + i;
            keys[m] = key;
            m += key >= thr;
        }
    }
    return m;
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

/* gather_scalar for a block that is a multiple of 8, with AVX2 and no branch on the data: eight keys
 * are compared at once, and those that pass are packed to the front (a permutation looked up by their
 * mask bits, `pack_lut`) and stored with their positions, eight slots written and popcount(mask) of them kept.
 * The same entries in the same order as gather_scalar; positions are formed as int32 (n < 2^31). */
__attribute__((target("avx2,popcnt")))
static int64_t gather_avx2(const float *u, int64_t blocks, int64_t block, const uint32_t *peak_keys,
                           uint32_t thr, int64_t *pos, uint32_t *keys, int64_t cap, const int32_t (*lut)[8])
{
    const __m256i magnitude = _mm256_set1_epi32(0x7fffffff);
    const __m256i below = _mm256_set1_epi32((int32_t)thr - 1);      /* keys are >= 0: key >= thr iff key > thr - 1 */
    int64_t m = 0;
    for (int64_t b = 0; b < blocks; b++) {
        if (peak_keys[b] < thr) continue;
        if (m + block > cap) return -1;                  /* each group writes 8 slots from m: block in all */
        for (int64_t g = b * block; g < (b + 1) * block; g += 8) {
            __m256i key = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(const void *)(u + g)), magnitude);
            int hits = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below)));
            __m256i perm = _mm256_loadu_si256((const __m256i *)(const void *)lut[hits]);
            __m256i at = _mm256_add_epi32(_mm256_set1_epi32((int32_t)g), perm);
            _mm256_storeu_si256((__m256i *)(void *)(keys + m), _mm256_permutevar8x32_epi32(key, perm));
            _mm256_storeu_si256((__m256i *)(void *)(pos + m), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at)));
            _mm256_storeu_si256((__m256i *)(void *)(pos + m + 4), _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1)));
            m += __builtin_popcount((unsigned)hits);
        }
    }
    return m;
}

static int32_t pack_lut[256][8];      /* pack_lut[mask]: the lanes of mask's set bits, lowest first, then 0s */

/* Fills pack_lut once, when the library is loaded (before any caller's thread can use it). */
__attribute__((constructor))
static void fill_pack_lut(void)
{
    for (int mask = 0; mask < 256; mask++) {
        int n = 0;
        for (int lane = 0; lane < 8; lane++)
            if (mask >> lane & 1) pack_lut[mask][n++] = lane;
        while (n < 8) pack_lut[mask][n++] = 0;
    }
}

static int64_t gather_blocks(const float *u, int64_t blocks, int64_t block, const uint32_t *peak_keys, uint32_t thr,
                             int64_t *pos, uint32_t *keys, int64_t cap)
{
    if (block % 8 == 0 && blocks * block < ((int64_t)1 << 31) && __builtin_cpu_supports("avx2"))
        return gather_avx2(u, blocks, block, peak_keys, thr, pos, keys, cap, (const int32_t (*)[8])pack_lut);
    return gather_scalar(u, blocks, block, peak_keys, thr, pos, keys, cap);
}
#else
#define gather_blocks gather_scalar
#endif

/* The Top-k positions of u[n] (block peaks peak[n / block], threshold thr from ssgd_topk_threshold):
 * gathers the positions and keys of the entries >= thr of the blocks whose peak is >= thr and of the
 * last n mod block entries into pos[cap] and keys[cap] (work: cap more keys), selects the k-th largest
 * key T among them, and when exactly k of them are >= T writes those k positions in increasing order
 * to out[k] and returns k. Returns 0 when a tie at T leaves the set to a tie rule (out untouched; the
 * gathered positions, in increasing order, stay in pos[0 .. *gathered) for the caller's tie rule), -1
 * when cap is too small or fewer than k entries were gathered (the caller's bug). */
int64_t ssgd_topk_blocks(const float *u, int64_t n, int64_t block, const float *peak, uint32_t thr, int64_t k,
                         int64_t *pos, uint32_t *keys, uint32_t *work, int64_t cap, int64_t *out, int64_t *gathered)
{
    int64_t blocks = n / block, m = 0, take, equal = 0, j = 0;
    const uint32_t *peak_keys = (const uint32_t *)(const void *)peak;
    uint32_t t;
    m = gather_blocks(u, blocks, block, peak_keys, thr, pos, keys, cap);
    if (m < 0) return -1;
    for (int64_t q = blocks * block; q < n; q++) {
        if (m >= cap) return -1;
        uint32_t key = magnitude_key(u[q]);
        pos[m] = q;
        keys[m] = key;
        m += key >= thr;
    }
    *gathered = m;
    if (m < k) return -1;
    t = ssgd_kth_largest(keys, m, k, work, &take);
    for (int64_t p = 0; p < m; p++)
        equal += keys[p] == t;
    if (equal != take) return 0;
    for (int64_t p = 0; p < m; p++)
        if (keys[p] >= t) out[j++] = pos[p];
    return j;
}
