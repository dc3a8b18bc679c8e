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
