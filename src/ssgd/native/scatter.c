/* A sparse average written into a buffer whose parts lie in another order: the DDP hook's decode.
 *
 * The hook (ssgd/ddp.py) keeps a bucket's gradient in the model's parameter order, and DDP's bucket
 * buffer holds the same parameters in the order their gradients became ready. The sparse result
 * (indices in model order) is written into DDP's buffer by moving each index by its parameter's shift:
 * one pass, instead of a segment search, an index shift, a zeroing and a scatter as torch operations.
 *
 * Semantics (the torch path in ssgd/ddp.py, `_Bucket.in_buffer` then `Sparse.to_dense(scale, out)`;
 * tests/unit/test_native_scatter.py): out[0 .. out_n) = +0.0, then for each entry j in order,
 * out[idx[j] + shifts[s]] = val[j] / scale (IEEE float32 division; val[j] itself when scale is 1),
 * where s is the last segment with starts[s] <= idx[j] (starts increasing, starts[0] = 0). A later
 * entry at the same target wins, as torch's scatter_ on one thread. The vector and out have the same
 * length out_n. Returns 0, or -1 when an index or its target falls outside [0, out_n) (then out holds
 * zeros and the entries before it).
 */
#include <stdint.h>
#include <string.h>

/* The last s < segments with starts[s] <= i (starts increasing, starts[0] <= i). */
static int64_t segment_of(const int64_t *starts, int64_t segments, int64_t i)
{
    int64_t lo = 0, hi = segments - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (starts[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int64_t ssgd_scatter_segments(const int64_t *idx, const float *val, int64_t n, float scale, const int64_t *starts,
                              const int64_t *shifts, int64_t segments, float *out, int64_t out_n)
{
    memset(out, 0, (size_t)out_n * sizeof *out);
    for (int64_t j = 0; j < n; j++) {
        int64_t i = idx[j];
        if (i < starts[0] || i >= out_n) return -1;
        int64_t at = i + shifts[segment_of(starts, segments, i)];
        if (at < 0 || at >= out_n) return -1;
        out[at] = scale == 1.0f ? val[j] : val[j] / scale;
    }
    return 0;
}
