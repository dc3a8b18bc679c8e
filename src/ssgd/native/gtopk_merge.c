/* One gTop-k tree merge in time O(k): the union of two index-sorted sparse vectors, summed on common
 * indices, then its k entries of largest magnitude, kept in increasing index order.
 *
 * Shi et al., "A Distributed Synchronous SGD Algorithm with Global Top-k Sparsification for Low
 * Bandwidth Networks", ICDCS 2019 (arXiv:1901.04359), Algorithm 2: each tree step sums two k-sparse
 * vectors and keeps their top k. The Python side (ssgd/native/__init__.py) allocates every array
 * with torch and checks dtypes, lengths and contiguity; this file only reads and writes them.
 * docs/hot-path.md explains why this one function is C: the same steps as torch CPU operations
 * (a sort of the 2k indices, topk, an order-preserving compaction) cost 4-5x more at k = 26,214.
 *
 * Semantics, identical to the torch fallback in ssgd/comm/collectives/gtopk.py (tests/unit/test_native_merge.py):
 *   - on an index present in both operands the value is (0 + a) + b in float32 (the bits of
 *     `torch.zeros(n).index_add_` over a then b), elsewhere 0 + a or 0 + b (so -0.0 becomes +0.0);
 *   - magnitudes are ranked by the bits of |v| (bits(v) & 0x7fffffff): for numbers that is the order
 *     of |v|, NaN ranks above infinity, and -0.0 ties with +0.0;
 *   - among equal magnitudes at the top-k boundary the lower index wins.
 */
#include <stdint.h>
#include <string.h>

static uint32_t bits_of(float v)
{
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

static float float_of(uint32_t bits)
{
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static uint32_t magnitude_key(float v)
{
    return bits_of(v) & 0x7fffffffu;
}

/* Union of the index-sorted (a_idx, a_val)[na] and (b_idx, b_val)[nb] into out_idx/out_val (capacity
 * na + nb), the magnitude keys of its values into keys, and, when into_a / into_b are not NULL, the
 * union position of every operand entry. Returns the union's length, or -1 when an operand's
 * indices are not strictly increasing. Branch-free steps: an entry taken from a only gets
 * (0 + a) + 0, which has the bits of 0 + a (never -0.0; a NaN stays the same NaN). */
static int64_t merge_union(const int32_t *a_idx, const float *a_val, int64_t na,
                           const int32_t *b_idx, const float *b_val, int64_t nb,
                           int32_t *out_idx, float *out_val, uint32_t *keys,
                           int64_t *into_a, int64_t *into_b)
{
    int64_t i = 0, j = 0, n = 0;
    int bad = 0;
    for (int64_t t = 1; t < na; t++)
        bad |= a_idx[t] <= a_idx[t - 1];
    for (int64_t t = 1; t < nb; t++)
        bad |= b_idx[t] <= b_idx[t - 1];
    if (bad) return -1;
    while (i < na && j < nb) {
        int32_t x = a_idx[i], y = b_idx[j];
        uint32_t take_a = x <= y, take_b = y <= x;
        uint32_t ma = 0u - take_a, mb = 0u - (take_a & take_b);
        uint32_t first = (bits_of(a_val[i]) & ma) | (bits_of(b_val[j]) & ~ma);
        float v = (0.0f + float_of(first)) + float_of(bits_of(b_val[j]) & mb);   /* b, or +0.0 */
        out_idx[n] = x < y ? x : y;
        out_val[n] = v;
        keys[n] = magnitude_key(v);
        if (into_a && into_b) { into_a[i] = n; into_b[j] = n; }   /* rewritten until the entry is taken */
        i += take_a; j += take_b; n++;
    }
    for (; i < na; i++, n++) {
        float v = 0.0f + a_val[i];
        out_idx[n] = a_idx[i]; out_val[n] = v; keys[n] = magnitude_key(v);
        if (into_a) into_a[i] = n;
    }
    for (; j < nb; j++, n++) {
        float v = 0.0f + b_val[j];
        out_idx[n] = b_idx[j]; out_val[n] = v; keys[n] = magnitude_key(v);
        if (into_b) into_b[j] = n;
    }
    return n;
}

/* The k-th largest of keys[n] by radix selection (topk_select.c): see there. */
uint32_t ssgd_kth_largest(const uint32_t *keys, int64_t n, int64_t k, uint32_t *cand, int64_t *take);

/* The merge. out_idx/out_val need na + nb entries and keys 2 (na + nb); into_a[na], into_b[nb] and
 * kept[min(k, na + nb) + 1] (the compaction stores one past the result) are all NULL (no trace) or
 * all given. Returns the result's length m = min(k, n), the union's length n in *n_union, and, when
 * n > k, in kept[0..m) the union positions of the result's entries. Returns -1 when an operand's
 * indices are not strictly increasing. */
int64_t ssgd_gtopk_merge(const int32_t *a_idx, const float *a_val, int64_t na,
                         const int32_t *b_idx, const float *b_val, int64_t nb, int64_t k,
                         int32_t *out_idx, float *out_val, uint32_t *keys,
                         int64_t *into_a, int64_t *into_b, int64_t *kept, int64_t *n_union)
{
    int64_t n, take, m = 0;
    uint32_t t;
    n = merge_union(a_idx, a_val, na, b_idx, b_val, nb, out_idx, out_val, keys, into_a, into_b);
    *n_union = n;
    if (n < 0) return -1;
    if (n <= k) return n;
    t = ssgd_kth_largest(keys, n, k, keys + n, &take);
    for (int64_t p = 0; p < n; p++) {                 /* in place, in index order (m <= p), branch-free */
        uint32_t key = keys[p];
        int64_t tie = (key == t) & (take > 0);
        int64_t keep = (key > t) | tie;
        take -= tie;
        out_idx[m] = out_idx[p];
        out_val[m] = out_val[p];
        if (kept) kept[m] = p;
        m += keep;
    }
    return m;
}
