/*
 * blas.c - the unfused BLAS baseline (see blas.h): attention the way a user writes it
 * with OpenBLAS and no fused kernel, as the benchmark's yardstick for the fused path.
 *
 * It is written the way a careful user would, not as a straw man: OpenMP over (b, h,
 * block of query rows) with single-threaded sgemm inside (so the softmax runs in
 * parallel too), causal row blocks (the keys after a block's last visible key are never
 * multiplied), and a score buffer of one block per thread instead of the whole Tq x Tkv
 * matrix. What it does not have is what a fused kernel brings: the scores make a round
 * trip through memory between the two sgemm calls, and the softmax is plain libm expf.
 * Built only with `make bench BLAS=openblas`; it is not part of libsdpa.
 */
#include "blas.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

const char *sb_blas_name(void) { return openblas_get_config(); }

static int64_t row_end(const sdpa_desc *d, int64_t i) {
    if (d->causal == SDPA_CAUSAL_NONE)
        return d->len_kv;
    const int64_t e = i + (d->len_kv - d->len_q) + 1;
    return e < 0 ? 0 : (e > d->len_kv ? d->len_kv : e);
}

/* One block: query rows [i0, i0 + m) of (b, h). S is m x Tkv scratch, sum m floats. Rows
 * are read and written through the views' row strides (fp32 data: the benchmark runs
 * this baseline on plain cases only, sb_is_plain). */
static void block(const sc_tensors *t, int64_t b, int64_t h, int64_t i0, int m, float *S,
                  float *sum) {
    const sdpa_desc *d = &t->desc;
    const int64_t hk = h / (d->heads_q / d->heads_kv), Dk = d->dim_qk, Dv = d->dim_v;
    const float *Q = sc_at(&t->q, b, h, i0), *K = sc_at(&t->k, b, hk, 0);
    const float *V = sc_at(&t->v, b, hk, 0);
    float *O = sc_at(&t->o, b, h, i0);
    const int ldq = (int)t->q.stride_t, ldk = (int)t->k.stride_t, ldv = (int)t->v.stride_t;
    const int ldo = (int)t->o.stride_t;
    const int n = (int)row_end(d, i0 + m - 1); /* keys the block's last row sees */
    if (n == 0) {
        for (int r = 0; r < m; r++)
            memset(O + (size_t)r * (size_t)ldo, 0, (size_t)Dv * sizeof(float));
        return;
    }
    const float scale = d->scale != 0.0f ? d->scale : 1.0f / sqrtf((float)Dk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, (int)Dk, scale, Q, ldq, K, ldk,
                0.0f, S, n);
    for (int r = 0; r < m; r++) {
        float *row = S + (size_t)r * (size_t)n;
        const int e = (int)row_end(d, i0 + r);
        float mx = -INFINITY, l = 0.0f;
        for (int j = 0; j < e; j++)
            mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j < e; j++) {
            row[j] = expf(row[j] - mx);
            l += row[j];
        }
        for (int j = e; j < n; j++) /* keys this row must not see weigh exactly 0 */
            row[j] = 0.0f;
        sum[r] = l;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, (int)Dv, n, 1.0f, S, n, V, ldv,
                0.0f, O, ldo);
    for (int r = 0; r < m; r++) {
        float *orow = O + (size_t)r * (size_t)ldo;
        const float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f; /* no key seen: zeros */
        for (int64_t x = 0; x < Dv; x++)
            orow[x] *= inv;
    }
}

sdpa_status sb_run_blas(const sc_tensors *t, int threads) {
    const sdpa_desc *d = &t->desc;
    const int64_t nblk = (d->len_q + SB_BLAS_ROWS - 1) / SB_BLAS_ROWS;
    const int64_t items = d->batch * d->heads_q * nblk;
    int nt = 1;
#ifdef _OPENMP
    nt = threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
#endif
    const size_t per_thread = (size_t)SB_BLAS_ROWS * (size_t)(d->len_kv + 1);
    float *scratch = malloc((size_t)nt * per_thread * sizeof(float));
    if (!scratch)
        return SDPA_ERR_OUT_OF_MEMORY;
    /* Threads come from OpenMP here; OpenBLAS's own would oversubscribe the cores. */
    openblas_set_num_threads(1);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
#endif
    for (int64_t it = 0; it < items; it++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *S = scratch + (size_t)tid * per_thread;
        const int64_t bh = it / nblk, i0 = (it % nblk) * SB_BLAS_ROWS;
        const int m = (int)(d->len_q - i0 < SB_BLAS_ROWS ? d->len_q - i0 : SB_BLAS_ROWS);
        block(t, bh / d->heads_q, bh % d->heads_q, i0, m, S,
              S + (size_t)SB_BLAS_ROWS * (size_t)d->len_kv);
    }
    free(scratch);
    return SDPA_OK;
}
