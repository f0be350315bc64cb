/*
 * scalar.c - the portable kernel table: plain C11 tile functions, no intrinsics.
 *
 * It is the fallback on every CPU and the ground truth the SIMD tables are compared
 * against tile by tile in tests/test_ukernel.c, so it is written to be obviously
 * right rather than fast: straight loops the compiler may vectorise with the baseline
 * ISA (SSE2 on x86-64), libm expf (glibc's is correctly rounded in practice: < 1 ulp),
 * the portable 16-bit conversions of kernels/convert.h (per element, where K and V are
 * read; fp32 rows are read as floats). It is not a performance path; a CPU with AVX2,
 * AVX-512 or NEON never runs it unless SDPA_ISA=scalar asks.
 *
 * Kp layout: transposed, Kp[d * n + j] = K[j][d], so qk's inner loop runs over
 * contiguous keys. kp_align is 1: no padding. It also computes the bf16 mode
 * (SDPA_COMPUTE_BF16) by emulating its roundings exactly, so the mode exists on every
 * target.
 */
#include <math.h>
#include <stddef.h>

#include "../convert.h"
#include "../kvq.h"
#include "../ukernel.h"

/* Bytes of one element of a storage type (validate.c admits only these three). */
static size_t elem_bytes(sdpa_dtype dt) { return dt == SDPA_F32 ? 4 : 2; }

/* The fp32 tiles' inner loops run ACC_CHUNK independent sums a step (keys of S in qk,
 * dims of O in pv), which the compiler keeps in registers (two SSE vectors on x86-64's
 * baseline) instead of storing every element after every dim or key. Each element's sum
 * keeps its order: the same bits as a loop over one element at a time
 * (docs/PERFORMANCE.md, "The scalar table's loops"). */
#define ACC_CHUNK 8

/* <q, row> in dim order; an fp32 row read as floats, a 16-bit one converted element by
 * element (the same sum either way: the conversions are exact). */
static float dot_row(const float *q, const char *row, int dk, sdpa_dtype dt) {
    float acc = 0.0f;
    if (dt == SDPA_F32) {
        const float *kr = (const float *)(const void *)row;
        for (int d = 0; d < dk; d++)
            acc += q[d] * kr[d];
    } else {
        for (int d = 0; d < dk; d++)
            acc += q[d] * sdpa_load_as_f32(row, d, dt);
    }
    return acc;
}

/* o += p x row, element by element, the row read as dot_row reads it. */
static void axpy_row(float *o, float p, const char *row, int dv, sdpa_dtype dt) {
    if (dt == SDPA_F32) {
        const float *vr = (const float *)(const void *)row;
        for (int d = 0; d < dv; d++)
            o[d] += p * vr[d];
    } else {
        for (int d = 0; d < dv; d++)
            o[d] += p * sdpa_load_as_f32(row, d, dt);
    }
}

static void scalar_pack_k(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                          float *kp) {
    for (int j = 0; j < n; j++) {
        const char *row = (const char *)k + (size_t)j * (size_t)ldk * elem_bytes(dt);
        for (int d = 0; d < dk; d++)
            kp[(size_t)d * (size_t)n + (size_t)j] = sdpa_load_as_f32(row, d, dt);
    }
}

static void scalar_qk(int m, int n, int dk, float scale, const float *q, int ldq,
                      const float *kp, float *s, int lds) {
    for (int r = 0; r < m; r++) {
        const float *qr = q + (size_t)r * (size_t)ldq;
        float *sr = s + (size_t)r * (size_t)lds;
        int j0 = 0;
        for (; j0 + ACC_CHUNK <= n; j0 += ACC_CHUNK) { /* ACC_CHUNK keys' sums in registers */
            float acc[ACC_CHUNK] = {0};
            for (int d = 0; d < dk; d++) {
                const float qv = qr[d], *kd = kp + (size_t)d * (size_t)n + (size_t)j0;
                for (int c = 0; c < ACC_CHUNK; c++)
                    acc[c] += qv * kd[c];
            }
            for (int c = 0; c < ACC_CHUNK; c++)
                sr[j0 + c] = acc[c] * scale;
        }
        for (int j = j0; j < n; j++)
            sr[j] = 0.0f;
        for (int d = 0; d < dk && j0 < n; d++) {
            const float qv = qr[d];
            const float *kd = kp + (size_t)d * (size_t)n;
            for (int j = j0; j < n; j++)
                sr[j] += qv * kd[j];
        }
        for (int j = j0; j < n; j++)
            sr[j] *= scale;
    }
}

/* Each score a plain dot product in d order, so a row's bits do not depend on m. */
static void scalar_qk_rows(int m, int n, int dk, float scale, const float *q, int ldq,
                           const void *k, int64_t ldk, sdpa_dtype dt, float *s, int lds,
                           int npf, const void *pf) {
    (void)npf; /* this table does not prefetch */
    (void)pf;
    for (int r = 0; r < m; r++) {
        const float *qr = q + (size_t)r * (size_t)ldq;
        float *sr = s + (size_t)r * (size_t)lds;
        for (int j = 0; j < n; j++) {
            const char *row = (const char *)k + (size_t)j * (size_t)ldk * elem_bytes(dt);
            sr[j] = dot_row(qr, row, dk, dt) * scale;
        }
    }
}

static void scalar_softmax(int m, int n, float *s, int lds, float *m_run, float *l_run,
                           float *alpha) {
    for (int r = 0; r < m; r++) {
        float *sr = s + (size_t)r * (size_t)lds;
        /* NaN scores fail every comparison, so they never become the max; they reach
         * l_run through expf(NaN) = NaN below. */
        float mx = m_run[r];
        for (int j = 0; j < n; j++)
            if (sr[j] > mx)
                mx = sr[j];
        /* A row that has seen only masked keys keeps mx = -inf; subtracting 0 instead
         * turns its -inf scores into exp(-inf) = 0 rather than exp(NaN). */
        const float mu = (mx == -INFINITY) ? 0.0f : mx;
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            const float p = expf(sr[j] - mu);
            sr[j] = p;
            sum += p;
        }
        const float a = expf(m_run[r] - mu);
        alpha[r] = a;
        l_run[r] = a * l_run[r] + sum;
        m_run[r] = mx;
    }
}

static void scalar_pv(int m, int n, int dv, const float *p, int ldp, const void *v,
                      int64_t ldv, sdpa_dtype dt, const float *alpha, float *o, int ldo,
                      int npf, const void *pf) {
    (void)npf; /* this table does not prefetch */
    (void)pf;
    for (int r = 0; r < m; r++) {
        float *orow = o + (size_t)r * (size_t)ldo;
        const float *pr = p + (size_t)r * (size_t)ldp;
        if (alpha) {
            const float a = alpha[r];
            for (int d = 0; d < dv; d++)
                orow[d] *= a;
        }
        int d0 = 0;
        if (dt == SDPA_F32) /* ACC_CHUNK elements of O in registers across the keys */
            for (; d0 + ACC_CHUNK <= dv; d0 += ACC_CHUNK) {
                float acc[ACC_CHUNK];
                for (int c = 0; c < ACC_CHUNK; c++)
                    acc[c] = orow[d0 + c];
                for (int j = 0; j < n; j++) {
                    const float pj = pr[j];
                    const float *vr = (const float *)v + (size_t)j * (size_t)ldv + (size_t)d0;
                    for (int c = 0; c < ACC_CHUNK; c++)
                        acc[c] += pj * vr[c];
                }
                for (int c = 0; c < ACC_CHUNK; c++)
                    orow[d0 + c] = acc[c];
            }
        for (int j = 0; j < n && d0 < dv; j++) { /* the rest, a key at a time */
            const char *vj =
                (const char *)v + ((size_t)j * (size_t)ldv + (size_t)d0) * elem_bytes(dt);
            axpy_row(orow + d0, pr[j], vj, dv - d0, dt);
        }
    }
}

static void scalar_vexp(int n, const float *x, float *y) {
    for (int i = 0; i < n; i++)
        y[i] = expf(x[i]);
}

/* ---- bf16 compute: the mode's roundings emulated exactly ------------------------------
 * Kpb and Vpb are row-major bf16 ([key][dim], dims padded to 32 with zeros); each sum is
 * a plain fp32 loop over exact products of bf16 values, in dim (QK^T) or key (P V)
 * order. */

static float bf16r(float x) { return sdpa_bf16_to_f32(sdpa_f32_to_bf16(x)); }

static int pad32(int d) { return (d + 31) & ~31; }

static void pack_rows_bf16(int n, int dim, const void *src, int64_t ld, sdpa_dtype dt,
                           uint16_t *dst) {
    const int w = pad32(dim);
    for (int j = 0; j < n; j++) {
        const char *row = (const char *)src + (size_t)j * (size_t)ld * elem_bytes(dt);
        for (int d = 0; d < w; d++)
            dst[(size_t)j * (size_t)w + (size_t)d] =
                d < dim ? sdpa_f32_to_bf16(sdpa_load_as_f32(row, d, dt)) : 0;
    }
}

static void scalar_pack_q_bf16(int dk, const void *q, sdpa_dtype dt, uint16_t *qb) {
    pack_rows_bf16(1, dk, q, dk, dt, qb);
}

static void scalar_pack_k_bf16(int n, int dk, const void *k, int64_t ldk, sdpa_dtype dt,
                               uint16_t *kp) {
    pack_rows_bf16(n, dk, k, ldk, dt, kp);
}

static void scalar_qk_bf16(int m, int n, int dk, float scale, const uint16_t *q, int ldq,
                           const uint16_t *kp, float *s, int lds) {
    const int w = pad32(dk);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int d = 0; d < dk; d++)
                acc += sdpa_bf16_to_f32(q[(size_t)r * (size_t)ldq + (size_t)d]) *
                       sdpa_bf16_to_f32(kp[(size_t)j * (size_t)w + (size_t)d]);
            s[(size_t)r * (size_t)lds + (size_t)j] = scale * acc;
        }
}

static int scalar_pack_v_bf16(int n, int dv, const void *v, int64_t ldv, sdpa_dtype dt,
                              uint16_t *vp) {
    pack_rows_bf16(n, dv, v, ldv, dt, vp);
    const int w = pad32(dv);
    for (size_t e = 0; e < (size_t)n * (size_t)w; e++)
        if ((vp[e] & 0x7f80u) == 0x7f80u) /* bf16's exponent field all ones: inf or NaN */
            return 0;
    return 1;
}

static void scalar_pv_bf16(int m, int n, int dv, const float *p, int ldp, const uint16_t *vp,
                           const float *alpha, float *o, int ldo) {
    const int w = pad32(dv);
    for (int r = 0; r < m; r++) {
        float *orow = o + (size_t)r * (size_t)ldo;
        const float *pr = p + (size_t)r * (size_t)ldp;
        if (alpha)
            for (int d = 0; d < dv; d++)
                orow[d] *= alpha[r];
        for (int j = 0; j < n; j++) {
            const float pj = bf16r(pr[j]);
            for (int d = 0; d < dv; d++)
                orow[d] += pj * sdpa_bf16_to_f32(vp[(size_t)j * (size_t)w + (size_t)d]);
        }
    }
}


const sdpa_kernels sdpa_kernels_scalar = {
    .isa = SDPA_ISA_SCALAR, .name = "scalar", .br = 32, .bc = 64, .kp_align = 1,
    .kpb_align = 1, .vpb_align = 1,
    .pack_k = scalar_pack_k, .qk = scalar_qk, .qk_rows = scalar_qk_rows,
    .softmax = scalar_softmax, .pv = scalar_pv, .vexp = scalar_vexp, .dequant = kvq_dequant,
    .pack_q_bf16 = scalar_pack_q_bf16, .pack_k_bf16 = scalar_pack_k_bf16,
    .qk_bf16 = scalar_qk_bf16,
    .pack_v_bf16 = scalar_pack_v_bf16, .pv_bf16 = scalar_pv_bf16,
};
