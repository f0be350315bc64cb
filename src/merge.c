/*
 * merge.c - sdpa_merge: partial attention results over disjoint key sets combined by
 * their log-sum-exp, row by row, on the calling thread or an OpenMP team. The arithmetic
 * is sdpa_merge_row (finalize.c), the same function the fused path's split-KV merge
 * runs; this file validates, lays out the rows and splits them across threads.
 */
#include <math.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "driver.h"

/* Below this many multiply-adds (rows x parts x D) a merge runs on the calling thread,
 * as the fused path's serial cut-off does (sdpa.c SERIAL_FLOPS_MAX). */
#define MERGE_SERIAL_MAX (1 << 22)

sdpa_status sdpa_merge(const sdpa_merge_desc *d, const sdpa_tensor *parts,
                       const float *const *lses, const sdpa_tensor *o, float *lse) {
    sdpa_status st = sdpa_validate_merge(d, parts, lses, o, lse);
    if (st != SDPA_OK)
        return st;
    const int64_t H = d->heads, T = d->len, nrows = d->batch * H * T;
    const int n = d->parts;
    int nt = 1;
#ifdef _OPENMP
    if ((double)nrows * (double)n * (double)d->dim >= (double)MERGE_SERIAL_MAX &&
        !(omp_in_parallel() && d->num_threads == 0))
        nt = d->num_threads > 0 ? d->num_threads : omp_get_max_threads();
    if ((int64_t)nt > nrows)
        nt = (int)nrows;
#endif
    /* per thread: the row's part pointers, their dtypes, lse values and coefficients */
    const size_t per =
        round_up((size_t)n * (sizeof(void *) + sizeof(sdpa_dtype) + 2 * sizeof(float)), 64);
    char *buf = sdpa_alloc(per * (size_t)nt);
    if (!buf)
        return SDPA_ERR_OUT_OF_MEMORY;
    const size_t oes = sdpa_dtype_size(o->dtype);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        char *mine = buf + (size_t)tid * per;
        const void **ptrs = (const void **)(void *)mine;
        sdpa_dtype *dts = (sdpa_dtype *)(void *)(mine + (size_t)n * sizeof(void *));
        float *lv = (float *)(void *)(dts + n);
        float *coef = lv + n;
        for (int i = 0; i < n; i++)
            dts[i] = parts[i].dtype;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t r = 0; r < nrows; r++) {
            const int64_t b = r / (H * T), h = r / T % H, t = r % T;
            for (int i = 0; i < n; i++) {
                const sdpa_tensor *pv = &parts[i];
                ptrs[i] = (const char *)pv->data +
                          (size_t)(b * pv->stride_b + h * pv->stride_h + t * pv->stride_t) *
                              sdpa_dtype_size(pv->dtype);
                lv[i] = lses[i][r];
            }
            void *dst = (char *)o->data +
                        (size_t)(b * o->stride_b + h * o->stride_h + t * o->stride_t) * oes;
            sdpa_merge_row(n, ptrs, dts, lv, -INFINITY, 0, d->dim, dst, o->dtype,
                           lse ? &lse[r] : NULL, coef);
        }
    }
    sdpa_free(buf);
    return SDPA_OK;
}
