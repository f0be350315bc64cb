/*
 * linear.c - the projection GEMM of the multi-head attention layer, y = x W^T + b in
 * nn.Linear's layout, driven by the kernel table's QK^T microkernel.
 *
 * y = x W^T has the same shape as S = Q K^T: rows of x dotted with rows of W. So the
 * table that computes attention scores also computes projections: pack_k packs a block
 * of W's rows exactly as it packs keys, qk computes a tile of dot products, and this
 * file only blocks the loops for the caches, accumulates over the blocks of the inner
 * dimension and adds the bias. It is portable C (no -m flags), fp32 only, and not a
 * general BLAS: no transposes, no alpha/beta, row-major only.
 *
 * Blocking (BLIS's loop order, with the table's microkernel inside qk):
 *
 *   for jc in [0, N) step NC:                W columns (output features)
 *     for pc in [0, K) step KC:              inner dimension
 *       Wp = pack_k(W[jc:jc+NC, pc:pc+KC])   in panels of Bc rows, shared by the threads
 *       parallel for ic in [0, M) step Br:   rows of x
 *         Xb = x[ic:ic+Br, pc:pc+KC]         copied to aligned scratch (qk's contract)
 *         for each panel jr of Wp:
 *           S = Xb Wp[jr]^T                  qk, Br x Bc
 *           y[ic.., jc+jr..] (pc == 0 ? = S + b : += S)
 *
 * KC keeps a panel (Bc x KC floats) in L1/L2 while a row block streams past it; NC
 * bounds the packed block (NC x KC floats) to the L2/L3 share a core can count on. Each
 * y element is the same sum in the same order whatever the thread count.
 */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

/* Inner-dimension block: 256 floats = 1 KiB per row, so a Bc = 64 panel is 64 KiB (L2)
 * and a Br = 32 row block 32 KiB (L1-sized); beyond 256 the per-block overhead (the S
 * to y pass, one in KC) is already under 0.5%. */
#define LINEAR_KC 256
/* Output-feature block: 4096 x 256 floats = 4 MiB of packed W per pass. */
#define LINEAR_NC 4096
/* Below this many flops the call runs on the calling thread (as in sdpa.c). */
#define LINEAR_SERIAL_FLOPS (1 << 22)

static size_t rup(size_t a, size_t b) { return (a + b - 1) / b * b; }

typedef struct linear_plan {
    const sdpa_kernels *kt;
    int64_t M, N, K;
    const float *x, *w, *bias;
    float *y;
    int64_t ldx, ldw, ldy;
    int ldq, lds;
    size_t panel_floats; /* one packed panel of Bc rows of W, KC deep */
} linear_plan;

/* Rows [i0, i0 + m) of x against the packed block (n0 columns starting at jc, kc deep). */
static void row_block(const linear_plan *lp, float *q, float *s, const float *wp, int64_t i0,
                      int m, int64_t jc, int64_t n0, int64_t pc, int kc) {
    const sdpa_kernels *kt = lp->kt;
    for (int r = 0; r < m; r++)
        memcpy(q + (size_t)r * (size_t)lp->ldq, lp->x + (i0 + r) * lp->ldx + pc,
               (size_t)kc * sizeof(float));
    for (int64_t jr = 0; jr < n0; jr += kt->bc) {
        const int n = (int)(n0 - jr < kt->bc ? n0 - jr : kt->bc);
        kt->qk(m, n, kc, 1.0f, q, lp->ldq, wp + (size_t)(jr / kt->bc) * lp->panel_floats, s,
               lp->lds);
        for (int r = 0; r < m; r++) {
            float *yr = lp->y + (i0 + r) * lp->ldy + jc + jr;
            const float *sr = s + (size_t)r * (size_t)lp->lds;
            if (pc == 0 && lp->bias) {
                const float *b = lp->bias + jc + jr;
                for (int j = 0; j < n; j++)
                    yr[j] = sr[j] + b[j];
            } else if (pc == 0) {
                memcpy(yr, sr, (size_t)n * sizeof(float));
            } else {
                for (int j = 0; j < n; j++)
                    yr[j] += sr[j];
            }
        }
    }
}

/* The blocking of a call: leading dimensions, panel size, threads, scratch bytes. */
typedef struct linear_shape {
    int ldq, lds;
    size_t panel_floats;
    size_t wp_bytes;   /* the packed block of W, shared by the threads */
    size_t per_thread; /* one thread's x block and S tile */
    int nt;
} linear_shape;

static linear_shape shape_of(const sdpa_kernels *kt, int64_t M, int64_t N, int64_t K,
                             int num_threads) {
    linear_shape sh;
    const int64_t kcmax = K < LINEAR_KC ? K : LINEAR_KC;
    const int64_t ncmax = N < LINEAR_NC ? N : LINEAR_NC;
    sh.ldq = (int)rup((size_t)kcmax, 16);
    sh.lds = (int)rup(rup((size_t)kt->bc, (size_t)kt->kp_align), 16);
    sh.panel_floats = rup(rup((size_t)kt->bc, (size_t)kt->kp_align) * (size_t)kcmax, 16);
    const int64_t npanels = (ncmax + kt->bc - 1) / kt->bc;
    sh.nt = 1;
#ifdef _OPENMP
    if (2.0 * (double)M * (double)N * (double)K >= (double)LINEAR_SERIAL_FLOPS &&
        !(omp_in_parallel() && num_threads == 0))
        sh.nt = num_threads > 0 ? num_threads : omp_get_max_threads();
    const int64_t blocks = (M + kt->br - 1) / kt->br;
    if (sh.nt > blocks)
        sh.nt = (int)(blocks > 0 ? blocks : 1);
#else
    (void)M;
    (void)num_threads;
#endif
    sh.per_thread = rup((size_t)kt->br * (size_t)sh.ldq * sizeof(float), 64) +
                    rup((size_t)kt->br * (size_t)sh.lds * sizeof(float), 64);
    sh.wp_bytes = rup((size_t)npanels * sh.panel_floats * sizeof(float), 64);
    return sh;
}

size_t sdpa_linear_scratch(const sdpa_kernels *kt, int64_t M, int64_t N, int64_t K,
                           int num_threads) {
    const linear_shape sh = shape_of(kt, M, N, K, num_threads);
    return sh.wp_bytes + sh.per_thread * (size_t)sh.nt;
}

sdpa_status sdpa_linear_with(const sdpa_kernels *kt, int64_t M, int64_t N, int64_t K,
                             const float *x, int64_t ldx, const float *w, int64_t ldw,
                             const float *bias, float *y, int64_t ldy, int num_threads,
                             void *scratch) {
    const linear_shape sh = shape_of(kt, M, N, K, num_threads);
    linear_plan lp = {kt, M, N, K, x, w, bias, y, ldx, ldw, ldy, sh.ldq, sh.lds, sh.panel_floats};
    const int nt = sh.nt;
    const size_t per_thread = sh.per_thread;
    char *buf = scratch ? scratch : sdpa_alloc(sh.wp_bytes + per_thread * (size_t)nt);
    if (!buf)
        return SDPA_ERR_OUT_OF_MEMORY;
    float *wp = (float *)(void *)buf;
    char *scr = buf + sh.wp_bytes;

    for (int64_t jc = 0; jc < N; jc += LINEAR_NC) {
        const int64_t n0 = N - jc < LINEAR_NC ? N - jc : LINEAR_NC;
        const int64_t np = (n0 + kt->bc - 1) / kt->bc;
        for (int64_t pc = 0; pc < K; pc += LINEAR_KC) {
            const int kc = (int)(K - pc < LINEAR_KC ? K - pc : LINEAR_KC);
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
            {
                int tid = 0;
#ifdef _OPENMP
                tid = omp_get_thread_num();
#endif
                float *q = (float *)(void *)(scr + (size_t)tid * per_thread);
                float *s = (float *)(void *)((char *)q +
                                             rup((size_t)kt->br * (size_t)lp.ldq * sizeof(float), 64));
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
                for (int64_t jp = 0; jp < np; jp++) {
                    const int64_t j = jc + jp * kt->bc;
                    const int n = (int)(jc + n0 - j < kt->bc ? jc + n0 - j : kt->bc);
                    kt->pack_k(n, kc, w + j * ldw + pc, ldw, SDPA_F32,
                               wp + (size_t)jp * lp.panel_floats);
                }
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
                for (int64_t i0 = 0; i0 < M; i0 += kt->br) {
                    const int m = (int)(M - i0 < kt->br ? M - i0 : kt->br);
                    row_block(&lp, q, s, wp, i0, m, jc, n0, pc, kc);
                }
            }
        }
    }
    if (!scratch)
        sdpa_free(buf);
    return SDPA_OK;
}

/* The extent of rows x cols floats ld apart as a byte span; 0 on overflow. */
static int rows_span(const float *a, int64_t rows, int64_t cols, int64_t ld, uintptr_t *lo,
                     uintptr_t *hi) {
    int64_t last;
    if (__builtin_mul_overflow(rows - 1, ld, &last) || __builtin_add_overflow(last, cols, &last) ||
        __builtin_mul_overflow(last, (int64_t)sizeof(float), &last) ||
        (uint64_t)last > (uint64_t)PTRDIFF_MAX)
        return 0;
    *lo = (uintptr_t)a;
    return !__builtin_add_overflow(*lo, (uintptr_t)last, hi);
}

sdpa_status sdpa_linear(const sdpa_linear_desc *d, const float *x, float *y) {
    if (!d || !x || !y || !d->weight)
        return SDPA_ERR_NULL_POINTER;
    const int64_t M = d->rows, K = d->in_features, N = d->out_features;
    if (M < 1 || K < 1 || N < 1 || M > SDPA_MAX_DIM || K > SDPA_MAX_DIM || N > SDPA_MAX_DIM)
        return SDPA_ERR_BAD_DIMENSION;
    const int64_t ldx = d->ld_x ? d->ld_x : K, ldw = d->ld_w ? d->ld_w : K;
    const int64_t ldy = d->ld_y ? d->ld_y : N;
    if (ldx < K || ldw < K || ldy < N)
        return SDPA_ERR_BAD_STRIDE;
    if (d->num_threads < 0 || d->isa < SDPA_ISA_AUTO || d->isa >= SDPA_ISA_COUNT_)
        return SDPA_ERR_BAD_ARGUMENT;
    if ((uintptr_t)x % 4 || (uintptr_t)y % 4 || (uintptr_t)d->weight % 4 ||
        (uintptr_t)d->bias % 4)
        return SDPA_ERR_MISALIGNED;
    uintptr_t xl, xh, wl, wh, yl, yh, bl = 0, bh = 0;
    if (!rows_span(x, M, K, ldx, &xl, &xh) || !rows_span(d->weight, N, K, ldw, &wl, &wh) ||
        !rows_span(y, M, N, ldy, &yl, &yh) || (d->bias && !rows_span(d->bias, 1, N, N, &bl, &bh)))
        return SDPA_ERR_OVERFLOW;
    if ((yl < xh && xl < yh) || (yl < wh && wl < yh) || (d->bias && yl < bh && bl < yh))
        return SDPA_ERR_OVERLAP;
    const sdpa_kernels *kt = sdpa_dispatch_table((sdpa_isa)d->isa, SDPA_COMPUTE_F32);
    if (!kt)
        return SDPA_ERR_UNSUPPORTED_ISA;
    return sdpa_linear_with(kt, M, N, K, x, ldx, d->weight, ldw, d->bias, y, ldy, d->num_threads,
                            NULL);
}
