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

static int64_t row_end(const sb_shape *s, int64_t i) {
    if (s->causal == SDPA_CAUSAL_NONE)
        return s->Tkv;
    const int64_t e = i + (s->Tkv - s->Tq) + 1;
    return e < 0 ? 0 : (e > s->Tkv ? s->Tkv : e);
}

/* One block: query rows [i0, i0 + m) of (b, h). S is m x Tkv scratch, sum m floats. */
static void block(const sb_problem *p, int64_t b, int64_t h, int64_t i0, int m, float *S,
                  float *sum) {
    const sb_shape *s = &p->s;
    const int64_t hk = h / (s->Hq / s->Hkv);
    /* fp32 data: the benchmark runs this baseline on plain shapes only (sb_is_plain) */
    const float *Q = (const float *)p->q + ((b * s->Hq + h) * s->Tq + i0) * s->Dk;
    const float *K = (const float *)p->k + (b * s->Hkv + hk) * s->Tkv * s->Dk;
    const float *V = (const float *)p->v + (b * s->Hkv + hk) * s->Tkv * s->Dv;
    float *O = (float *)p->o + ((b * s->Hq + h) * s->Tq + i0) * s->Dv;
    const int n = (int)row_end(s, i0 + m - 1); /* keys the block's last row sees */
    if (n == 0) {
        memset(O, 0, (size_t)m * (size_t)s->Dv * sizeof(float));
        return;
    }
    const float scale = 1.0f / sqrtf((float)s->Dk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, (int)s->Dk, scale, Q,
                (int)s->Dk, K, (int)s->Dk, 0.0f, S, n);
    for (int r = 0; r < m; r++) {
        float *row = S + (size_t)r * (size_t)n;
        const int e = (int)row_end(s, i0 + r);
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, (int)s->Dv, n, 1.0f, S, n, V,
                (int)s->Dv, 0.0f, O, (int)s->Dv);
    for (int r = 0; r < m; r++) {
        float *orow = O + (size_t)r * (size_t)s->Dv;
        const float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f; /* no key seen: zeros */
        for (int64_t d = 0; d < s->Dv; d++)
            orow[d] *= inv;
    }
}

sdpa_status sb_run_blas(const sb_problem *p, int threads) {
    const sb_shape *s = &p->s;
    if (!sb_is_plain(s))
        return SDPA_ERR_BAD_ARGUMENT;
    const int64_t nblk = (s->Tq + SB_BLAS_ROWS - 1) / SB_BLAS_ROWS;
    const int64_t items = s->B * s->Hq * nblk;
    int nt = 1;
#ifdef _OPENMP
    nt = threads > 0 ? threads : omp_get_max_threads();
#else
    (void)threads;
#endif
    const size_t per_thread = (size_t)SB_BLAS_ROWS * (size_t)(s->Tkv + 1);
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
        const int m = (int)(s->Tq - i0 < SB_BLAS_ROWS ? s->Tq - i0 : SB_BLAS_ROWS);
        block(p, bh / s->Hq, bh % s->Hq, i0, m, S, S + (size_t)SB_BLAS_ROWS * (size_t)s->Tkv);
    }
    free(scratch);
    return SDPA_OK;
}
