/*
 * test_ukernel.c - every tile function of an ISA's kernel table against a double-
 * precision computation of the same tile operation, over sweeps around the table's tile
 * sizes and the vector widths (equal, one less, one more, multiples).
 *
 * Runs once per usable ISA (the scalar table included: it is checked the same way); the
 * bf16-compute tiles of the tables that have them (the scalar emulation, avx512bf16, amx,
 * neonbf16) are checked against double sums of their bf16-rounded operands.
 * Caller-memory operands (K, V, vexp's x and y) end on an unmapped page, so an
 * over-read faults; scratch operands are surrounded by sentinels that must survive, so a
 * write outside the contract's region is caught; scratch padding the contract says is
 * unspecified holds NaN, so a kernel that reads it poisons its result.
 *
 * Tolerances are forward-error bounds of fp32 arithmetic, not tuned numbers: a dot
 * product of n terms computed in any order with or without FMA is within
 * (n + 2) u sum |terms| of the exact value (u = 2^-24 unit roundoff; Higham,
 * "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 3.1), and exp is
 * allowed EXP_TOL relative error. A wrong index, a lost tail or a missing scale is off
 * by O(|terms|), far outside these bounds.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/convert.h"
#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define U 5.9604644775390625e-8 /* 2^-24 */

/* Relative error every table's exp must meet on normal results: 2^-20 (8 ulp). Each
 * table states its own measured figure at its definition; this is the contract. */
#define EXP_TOL 9.5367431640625e-7

static const sdpa_kernels *kt;
static uint64_t rng;

static size_t rup(size_t a, size_t b) { return (a + b - 1) / b * b; }

/* A quiet NaN with a payload no computation makes: the "untouched scratch" sentinel. */
static float sentinel(void) { return sdpa_f32_from_bits(0x7fc0beefu); }
static int is_sentinel(float f) { return sdpa_bits_from_f32(f) == 0x7fc0beefu; }

/* A 64-byte aligned scratch buffer of n floats plus 16 sentinel floats on each side. */
static float *scratch_alloc(size_t n) {
    float *b = aligned_alloc(64, rup((n + 32) * sizeof(float), 64));
    for (size_t i = 0; i < n + 32; i++)
        b[i] = sentinel();
    return b + 16;
}
static void scratch_free(float *p) { free(p - 16); }
static int guards_intact(const float *p, size_t n) {
    for (int i = 1; i <= 16; i++)
        if (!is_sentinel(p[-i]) || !is_sentinel(p[n + (size_t)i - 1]))
            return 0;
    return 1;
}

static size_t dtype_bytes(sdpa_dtype dt) { return dt == SDPA_F32 ? 4 : 2; }
static const char *dtype_name(sdpa_dtype dt) {
    return dt == SDPA_F32 ? "f32" : dt == SDPA_F16 ? "f16" : "bf16";
}

/* rows x ld elements of dt in caller-like memory ending on an unmapped page (only the
 * last row's first `width` elements are allocated), filled with random values
 * representable in dt; `exact` receives them as fp32, row-major with stride width. */
static void *caller_rows(int rows, int width, int64_t ld, sdpa_dtype dt, float *exact) {
    const size_t elems = (size_t)((int64_t)(rows - 1) * ld + width);
    char *buf = th_alloc(elems * dtype_bytes(dt), SC_GUARD_AFTER);
    for (size_t e = 0; e < elems; e++) {
        const float x = sc_rand_float(&rng);
        if (dt == SDPA_F32) {
            memcpy(buf + 4 * e, &x, 4);
        } else {
            const uint16_t h = dt == SDPA_F16 ? sdpa_f32_to_f16(x) : sdpa_f32_to_bf16(x);
            memcpy(buf + 2 * e, &h, 2);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < width; c++)
            exact[(size_t)r * (size_t)width + (size_t)c] =
                sdpa_load_as_f32(buf + (size_t)((int64_t)r * ld) * dtype_bytes(dt), c, dt);
    return buf;
}

/* The n rows of width elements at src (ld apart, stored as dt) copied into one guarded
 * buffer (*buf) in shuffled order, each in a slot of width + 3 elements, and the array
 * of their addresses (malloc) that qk_rows_at and pv_at read: row j's at [j], then npf
 * more entries (the next call's rows, prefetched only), the rows again from the first. */
static const void **scattered_rows(int n, int width, const void *src, int64_t ld,
                                   sdpa_dtype dt, int npf, char **buf) {
    const size_t es = dtype_bytes(dt), slot = (size_t)(width + 3) * es;
    *buf = th_alloc((size_t)n * slot, SC_GUARD_AFTER);
    int *perm = malloc((size_t)n * sizeof(int));
    const void **at = malloc((size_t)(n + npf) * sizeof(void *));
    for (int j = 0; j < n; j++)
        perm[j] = j;
    for (int j = n - 1; j > 0; j--) {
        const int i = (int)(sc_rand_u64(&rng) % (uint64_t)(j + 1)), t = perm[j];
        perm[j] = perm[i];
        perm[i] = t;
    }
    for (int j = 0; j < n; j++) {
        memcpy(*buf + (size_t)perm[j] * slot, (const char *)src + (size_t)((int64_t)j * ld) * es,
               (size_t)width * es);
        at[j] = *buf + (size_t)perm[j] * slot;
    }
    for (int j = 0; j < npf; j++)
        at[n + j] = at[j % n];
    free(perm);
    return at;
}

/* Sizes around a tile or vector edge, below limit, deduplicated, ascending. */
static int edge_sizes(int limit, int *out) {
    static const int base[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24,
                               25, 31, 32, 33, 47, 48, 49, 63, 64, 65, 95, 96, 97, 127, 128};
    int k = 0;
    for (int i = 0; i < N(base); i++)
        if (base[i] <= limit)
            out[k++] = base[i];
    const int extra[] = {limit - 1, limit};
    for (int e = 0; e < 2; e++)
        if (extra[e] >= 1 && (k == 0 || extra[e] > out[k - 1]))
            out[k++] = extra[e];
    return k;
}

/* ---- pack_k + qk ---------------------------------------------------------------- */

static void check_qk(int m, int n, int dk, int64_t ldk, sdpa_dtype dt, float scale) {
    const int ldq = (int)rup((size_t)dk, 16);
    const int np = (int)rup((size_t)n, (size_t)kt->kp_align);
    const int lds = (int)rup((size_t)np, 16);
    float *kx = malloc((size_t)n * (size_t)dk * sizeof(float));
    void *k = caller_rows(n, dk, ldk, dt, kx);
    float *q = scratch_alloc((size_t)m * (size_t)ldq);
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldq; d++) /* padding is NaN: reading it poisons S */
            q[(size_t)r * (size_t)ldq + (size_t)d] = d < dk ? sc_rand_float(&rng) : NAN;
    const size_t kp_n = (size_t)np * (size_t)dk;
    float *kp = scratch_alloc(kp_n);
    float *s = scratch_alloc((size_t)m * (size_t)lds);

    kt->pack_k(n, dk, k, ldk, dt, kp);
    kt->qk(m, n, dk, scale, q, ldq, kp, s, lds);

    double worst = 0;
    int bad = 0, spill = 0;
    for (int r = 0; r < m && !bad; r++)
        for (int j = 0; j < lds; j++) {
            const float got = s[(size_t)r * (size_t)lds + (size_t)j];
            if (j >= np) { /* beyond the padded keys: must be untouched */
                spill |= !is_sentinel(got);
                continue;
            }
            if (j >= n)
                continue;
            double exact = 0, mag = 0;
            for (int d = 0; d < dk; d++) {
                const double t = (double)q[(size_t)r * (size_t)ldq + (size_t)d] *
                                 (double)kx[(size_t)j * (size_t)dk + (size_t)d];
                exact += t;
                mag += fabs(t);
            }
            exact *= scale;
            const double tol = (dk + 3) * U * fabs((double)scale) * mag + 1e-37;
            const double err = fabs((double)got - exact);
            if (!(err <= tol))
                bad = 1;
            if (err > worst && mag > 0)
                worst = err / (fabs((double)scale) * mag);
        }
    CHECK(!bad, "%s qk m=%d n=%d dk=%d ldk=%lld %s: an element is off (worst %.3g of |q||k|)",
          kt->name, m, n, dk, (long long)ldk, dtype_name(dt), worst);
    CHECK(!spill && guards_intact(s, (size_t)m * (size_t)lds) && guards_intact(kp, kp_n) &&
              guards_intact(q, (size_t)m * (size_t)ldq),
          "%s qk m=%d n=%d dk=%d %s: wrote outside S[m][round_up(n, kp_align)] or Kp", kt->name,
          m, n, dk, dtype_name(dt));
    scratch_free(q);
    scratch_free(kp);
    scratch_free(s);
    sc_free(k);
    free(kx);
}

static void test_qk(void) {
    int ms[48], ns[48];
    const int nm = edge_sizes(kt->br, ms), nn = edge_sizes(kt->bc, ns);
    static const int dks[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 80, 96, 128, 256};
    /* every m x n at a few head dims, with K rows padded apart */
    static const int full_dk[] = {1, 17, 64};
    for (int a = 0; a < N(full_dk); a++)
        for (int i = 0; i < nm; i++)
            for (int j = 0; j < nn; j++)
                check_qk(ms[i], ns[j], full_dk[a], full_dk[a] + (j & 1) * 3, SDPA_F32, 0.125f);
    /* every head dim at the tile corners */
    for (int a = 0; a < N(dks); a++) {
        const int corners[][2] = {{1, 1}, {kt->br, kt->bc}, {kt->br - 1 > 0 ? kt->br - 1 : 1,
                                  kt->bc - 1 > 0 ? kt->bc - 1 : 1}, {3, 17}, {13, 33}};
        for (int c = 0; c < N(corners); c++) {
            const int m = corners[c][0] < kt->br ? corners[c][0] : kt->br;
            const int n = corners[c][1] < kt->bc ? corners[c][1] : kt->bc;
            check_qk(m, n, dks[a], dks[a], SDPA_F32, 1.0f / sqrtf((float)dks[a]));
        }
    }
    /* 16-bit K storage, converted while packing */
    static const sdpa_dtype dts[] = {SDPA_F16, SDPA_BF16};
    for (int t = 0; t < 2; t++)
        for (int a = 0; a < N(dks); a += 3)
            check_qk(kt->br < 7 ? kt->br : 7, kt->bc - 1 > 0 ? kt->bc - 1 : 1, dks[a],
                     dks[a] + 1, dts[t], -0.5f);
}

/* kp_split: a block's pack cut at a multiple h of it is the packs of its two parts, bit
 * for bit (the driver multiplies the causal diagonal's parts on a kept pack of the whole
 * block; src/tile.c, qk_parts), padding zeros included. */
static void check_pack_split(int n, int dk, int64_t ldk, sdpa_dtype dt) {
    const size_t whole = rup((size_t)n, (size_t)kt->kp_align) * (size_t)dk;
    float *kx = malloc((size_t)n * (size_t)dk * sizeof(float));
    void *k = caller_rows(n, dk, ldk, dt, kx);
    float *kp = scratch_alloc(whole), *part = scratch_alloc(whole);
    kt->pack_k(n, dk, k, ldk, dt, kp);
    const size_t es = sdpa_dtype_size(dt);
    int bad = 0;
    for (int h = kt->kp_split; h < n && !bad; h += kt->kp_split) {
        const size_t first = (size_t)h * (size_t)dk;
        const size_t rest = rup((size_t)(n - h), (size_t)kt->kp_align) * (size_t)dk;
        kt->pack_k(h, dk, k, ldk, dt, part);
        bad |= memcmp(part, kp, first * sizeof(float)) != 0;
        kt->pack_k(n - h, dk, (const char *)k + (size_t)h * (size_t)ldk * es, ldk, dt, part);
        bad |= first + rest != whole || memcmp(part, kp + first, rest * sizeof(float)) != 0;
        if (bad)
            CHECK(0, "%s pack_k n=%d dk=%d %s: the pack cut at key %d is not the packs of "
                  "its parts (kp_split %d)", kt->name, n, dk, dtype_name(dt), h, kt->kp_split);
    }
    CHECK(guards_intact(kp, whole) && guards_intact(part, whole),
          "%s pack_k n=%d dk=%d: wrote outside Kp", kt->name, n, dk);
    scratch_free(kp);
    scratch_free(part);
    sc_free(k);
    free(kx);
}

static void test_pack_split(void) {
    if (!CHECK(kt->kp_split >= 0 && kt->kp_split % kt->kp_align == 0,
               "%s: kp_split=%d not a multiple of kp_align=%d", kt->name, kt->kp_split,
               kt->kp_align) ||
        kt->kp_split == 0)
        return;
    int ns[48];
    const int nn = edge_sizes(kt->bc, ns);
    static const int dks[] = {1, 17, 64, 128};
    for (int a = 0; a < N(dks); a++)
        for (int j = 0; j < nn; j++)
            check_pack_split(ns[j], dks[a], dks[a] + (j & 1) * 3,
                             j % 3 == 0 ? SDPA_F32 : j % 3 == 1 ? SDPA_F16 : SDPA_BF16);
}

/* ---- qk_rows -------------------------------------------------------------------- */

/* qk_rows on m rows against n keys read in place: each score within the dot-product
 * bound; nothing written outside S[0..m)[0..n); and every row's scores the same bits
 * when the call covers only rows [1, m) (the band calls of the driver, the attention
 * weights' recomputation). */
static void check_qk_rows(int m, int n, int dk, int64_t ldk, sdpa_dtype dt, float scale) {
    const int ldq = (int)rup((size_t)dk, 16), lds = (int)rup((size_t)n, 16);
    float *kx = malloc((size_t)n * (size_t)dk * sizeof(float));
    void *k = caller_rows(n, dk, ldk, dt, kx);
    float *q = scratch_alloc((size_t)m * (size_t)ldq);
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldq; d++) /* padding is NaN: reading it poisons S */
            q[(size_t)r * (size_t)ldq + (size_t)d] = d < dk ? sc_rand_float(&rng) : NAN;
    const size_t sn = (size_t)m * (size_t)lds;
    float *s = scratch_alloc(sn), *s2 = scratch_alloc(sn);

    /* the first call is told the stream goes on past its rows (npf: kernels/ukernel.h),
     * which may be prefetched, never read: past the guard page here; the second to
     * prefetch a paged run in step (pf), K's rows again, on every third n; the bits must
     * not change */
    kt->qk_rows(m, n, dk, scale, q, ldq, k, ldk, dt, s, lds, 4096, NULL);
    if (m > 1)
        kt->qk_rows(m - 1, n, dk, scale, q + ldq, ldq, k, ldk, dt, s2 + lds, lds,
                    n % 3 ? 0 : n, n % 3 ? NULL : k);
    /* qk_rows_at on the same rows scattered: the same bits as qk_rows */
    int at_bits = 0;
    if (kt->qk_rows_at) {
        char *kbuf;
        const int npf = n % 2 ? 0 : 64;
        const void **at = scattered_rows(n, dk, k, ldk, dt, npf, &kbuf);
        float *s3 = scratch_alloc(sn);
        kt->qk_rows_at(m, n, dk, scale, q, ldq, at, dt, s3, lds, npf);
        for (size_t e = 0; e < sn; e++)
            at_bits |= sdpa_bits_from_f32(s3[e]) != sdpa_bits_from_f32(s[e]);
        at_bits |= !guards_intact(s3, sn);
        scratch_free(s3);
        sc_free(kbuf);
        free(at);
    }

    double worst = 0;
    int bad = 0, spill = 0, band = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < lds; j++) {
            const float got = s[(size_t)r * (size_t)lds + (size_t)j];
            if (j >= n) { /* beyond the keys: must be untouched */
                spill |= !is_sentinel(got);
                if (r > 0)
                    spill |= !is_sentinel(s2[(size_t)r * (size_t)lds + (size_t)j]);
                continue;
            }
            if (r > 0)
                band |= sdpa_bits_from_f32(got) !=
                        sdpa_bits_from_f32(s2[(size_t)r * (size_t)lds + (size_t)j]);
            double exact = 0, mag = 0;
            for (int d = 0; d < dk; d++) {
                const double t = (double)q[(size_t)r * (size_t)ldq + (size_t)d] *
                                 (double)kx[(size_t)j * (size_t)dk + (size_t)d];
                exact += t;
                mag += fabs(t);
            }
            exact *= scale;
            const double tol = (dk + 3) * U * fabs((double)scale) * mag + 1e-37;
            const double err = fabs((double)got - exact);
            bad |= !(err <= tol);
            if (err > worst && mag > 0)
                worst = err / (fabs((double)scale) * mag);
        }
    spill |= !guards_intact(s, sn) || !guards_intact(s2, sn) ||
             !guards_intact(q, (size_t)m * (size_t)ldq);
    for (int j = 0; j < lds; j++) /* the band call left row 0 alone */
        spill |= !is_sentinel(s2[j]);
    CHECK(!bad, "%s qk_rows m=%d n=%d dk=%d ldk=%lld %s: an element is off (worst %.3g of |q||k|)",
          kt->name, m, n, dk, (long long)ldk, dtype_name(dt), worst);
    CHECK(!spill, "%s qk_rows m=%d n=%d dk=%d %s: wrote outside S[m][n]", kt->name, m, n, dk,
          dtype_name(dt));
    CHECK(!at_bits, "%s qk_rows_at m=%d n=%d dk=%d %s: not qk_rows' bits on the same rows",
          kt->name, m, n, dk, dtype_name(dt));
    CHECK(!band,
          "%s qk_rows m=%d n=%d dk=%d %s: a row's scores change with the rows sharing the call",
          kt->name, m, n, dk, dtype_name(dt));
    scratch_free(q);
    scratch_free(s);
    scratch_free(s2);
    sc_free(k);
    free(kx);
}

static void test_qk_rows(void) {
    static const int ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 32};
    int ns[48];
    const int nn = edge_sizes(kt->bc, ns);
    static const int dks[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 80, 96, 128, 256};
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    /* every m x n at a few head dims and every storage type, K rows padded apart */
    static const int full_dk[] = {1, 17, 128};
    for (int t = 0; t < N(dts); t++)
        for (int a = 0; a < N(full_dk); a++)
            for (int i = 0; i < N(ms); i++)
                for (int j = 0; j < nn; j++)
                    check_qk_rows(ms[i], ns[j], full_dk[a], full_dk[a] + (j & 1) * 3, dts[t],
                                  0.125f);
    /* every head dim at a few tile corners */
    for (int t = 0; t < N(dts); t++)
        for (int a = 0; a < N(dks); a++) {
            const int corners[][2] = {{1, 1}, {4, kt->bc}, {8, kt->bc - 1 > 0 ? kt->bc - 1 : 1},
                                      {3, 17}, {5, 33}};
            for (int c = 0; c < N(corners); c++)
                check_qk_rows(corners[c][0], corners[c][1], dks[a], dks[a] + c % 2, dts[t],
                              1.0f / sqrtf((float)dks[a]));
        }
    /* decode's longer blocks (kernels/ukernel.h, SDPA_DECODE_BC_MAX) */
    for (int t = 0; t < N(dts); t++)
        for (int a = 0; a < N(full_dk); a++) {
            check_qk_rows(4, SDPA_DECODE_BC_MAX, full_dk[a], full_dk[a], dts[t], 0.125f);
            check_qk_rows(16, SDPA_DECODE_BC_MAX - 1, full_dk[a], full_dk[a] + 3, dts[t],
                          0.125f);
            check_qk_rows(1, SDPA_DECODE_BC_MAX - 15, full_dk[a], full_dk[a], dts[t], 0.125f);
        }
}

/* ---- exact widening --------------------------------------------------------------- */

/* Every one of the 65536 16-bit patterns of F16 and BF16 widened by qk_rows and pv must
 * be the exact conversion of kernels/convert.h: qk_rows with dk = 1 and q = 1 computes
 * 1 * k exactly (the reduction adds zeros: only a -0 may come out +0), pv with p = 1 onto
 * O = -0 computes -0 + 1 * v = v exactly; a NaN keeps its payload (quietened). The
 * forward-error tests cannot see a wrong subnormal or NaN; this does. */
static void test_widening(void) {
    enum { PATTERNS = 65536, CHUNK = 64 };
    static const sdpa_dtype dts[] = {SDPA_F16, SDPA_BF16};
    for (int t = 0; t < N(dts); t++) {
        const sdpa_dtype dt = dts[t];
        uint16_t *all = th_alloc(PATTERNS * sizeof(uint16_t), SC_GUARD_AFTER);
        for (int i = 0; i < PATTERNS; i++)
            all[i] = (uint16_t)i;
        float *q = scratch_alloc(16), *s = scratch_alloc(CHUNK);
        float *o = scratch_alloc(PATTERNS), *p = scratch_alloc(16);
        q[0] = 1.0f;
        p[0] = 1.0f;
        for (int i = 1; i < 16; i++)
            q[i] = p[i] = NAN; /* padding the kernels must not read */
        int bad_qk = 0, bad_pv = 0, first = -1;
        for (int i = 0; i < PATTERNS; i++)
            o[i] = -0.0f;
        kt->pv(1, 1, PATTERNS, p, 16, all, PATTERNS, dt, NULL, o, PATTERNS, 0, NULL);
        for (int c = 0; c < PATTERNS; c += CHUNK) {
            kt->qk_rows(1, CHUNK, 1, 1.0f, q, 16, all + c, 1, dt, s, CHUNK, 0, NULL);
            for (int i = 0; i < CHUNK; i++) {
                const float want = dt == SDPA_F16 ? sdpa_f16_to_f32(all[c + i])
                                                  : sdpa_bf16_to_f32(all[c + i]);
                /* arithmetic on a signalling NaN (BF16 widening keeps one) quietens it */
                const uint32_t quiet = isnan(want) ? 0x00400000u : 0;
                const uint32_t w = sdpa_bits_from_f32(want) | quiet;
                const uint32_t gq = sdpa_bits_from_f32(s[i]) | quiet;
                const uint32_t gp = sdpa_bits_from_f32(o[c + i]) | quiet;
                const int qk_ok = gq == w || (want == 0.0f && s[i] == 0.0f);
                const int pv_ok = gp == w;
                if (!qk_ok || !pv_ok) {
                    bad_qk |= !qk_ok;
                    bad_pv |= !pv_ok;
                    if (first < 0)
                        first = c + i;
                }
            }
        }
        CHECK(!bad_qk && !bad_pv && guards_intact(s, CHUNK) && guards_intact(o, PATTERNS),
              "%s %s widening: qk_rows %s, pv %s (first wrong pattern 0x%04x)", kt->name,
              dtype_name(dt), bad_qk ? "WRONG" : "exact", bad_pv ? "WRONG" : "exact",
              first < 0 ? 0 : first);
        scratch_free(q);
        scratch_free(s);
        scratch_free(o);
        scratch_free(p);
        sc_free(all);
    }
}

/* ---- softmax -------------------------------------------------------------------- */

/* Row kinds: fresh state, running state, some -inf, all -inf, NaN, huge scores. */
static void check_softmax(int m, int n) {
    const int lds = (int)rup((size_t)n, 16);
    float *s = scratch_alloc((size_t)m * (size_t)lds);
    float *s0 = malloc((size_t)m * (size_t)lds * sizeof(float));
    float *mr = scratch_alloc((size_t)m), *lr = scratch_alloc((size_t)m),
          *al = scratch_alloc((size_t)m);
    float *mr0 = malloc((size_t)m * sizeof(float)), *lr0 = malloc((size_t)m * sizeof(float));
    for (int r = 0; r < m; r++) {
        const int kind = r % 6;
        float *row = s + (size_t)r * (size_t)lds;
        for (int j = 0; j < n; j++) {
            float x = 8.0f * sc_rand_float(&rng);
            if (kind == 2 && (j % 3) == 1)
                x = -INFINITY;
            if (kind == 3)
                x = -INFINITY;
            if (kind == 4 && j == n / 2)
                x = NAN;
            if (kind == 5)
                x = 90.0f + 10.0f * sc_rand_float(&rng); /* exp(x) alone overflows */
            row[j] = x;
        }
        /* padding: a huge finite score, which a kernel that folds it into the max or the
         * sum cannot hide (NaN would vanish in a NaN-ignoring max) */
        for (int j = n; j < lds; j++)
            row[j] = 1e30f;
        mr[r] = (kind == 0 || kind == 3) ? -INFINITY : 4.0f * sc_rand_float(&rng);
        lr[r] = (kind == 0 || kind == 3) ? 0.0f : 1.0f + (float)n * fabsf(sc_rand_float(&rng));
        if (kind == 5)
            mr[r] = 95.0f;
        mr0[r] = mr[r];
        lr0[r] = lr[r];
    }
    memcpy(s0, s, (size_t)m * (size_t)lds * sizeof(float));

    kt->softmax(m, n, s, lds, mr, lr, al);

    int bad_m = 0, bad_p = 0, bad_l = 0, bad_a = 0, spill = 0;
    for (int r = 0; r < m; r++) {
        const float *in = s0 + (size_t)r * (size_t)lds, *p = s + (size_t)r * (size_t)lds;
        float mx = mr0[r];
        int has_nan = 0;
        for (int j = 0; j < n; j++) {
            if (in[j] > mx)
                mx = in[j];
            has_nan |= isnan(in[j]);
        }
        if (has_nan) { /* the row's m and P are unspecified; its sum must be NaN */
            bad_l |= !isnan(lr[r]);
            continue;
        }
        bad_m |= sdpa_bits_from_f32(mr[r]) != sdpa_bits_from_f32(mx);
        const float mu = mx == -INFINITY ? 0.0f : mx;
        double sum = 0, mag = 0;
        for (int j = 0; j < n; j++) {
            const float x = in[j] - mu; /* the same float difference the kernel forms */
            const double want = exp((double)x);
            sum += want;
            mag += want;
            if (in[j] == -INFINITY)
                bad_p |= sdpa_bits_from_f32(p[j]) != 0; /* exactly +0 */
            else if (want >= FLT_MIN)
                bad_p |= !(fabs((double)p[j] - want) <= EXP_TOL * want);
            else
                bad_p |= !(fabs((double)p[j] - want) <= FLT_MIN);
        }
        for (int j = n; j < lds; j++)
            spill |= sdpa_bits_from_f32(p[j]) != sdpa_bits_from_f32(s0[(size_t)r * (size_t)lds + (size_t)j]);
        const double a = exp((double)(mr0[r] - mu));
        if (a >= FLT_MIN || a == 0)
            bad_a |= !(fabs((double)al[r] - a) <= EXP_TOL * a);
        const double l = a * (double)lr0[r] + sum;
        bad_l |= !(fabs((double)lr[r] - l) <= (EXP_TOL + (n + 4) * U) * (a * lr0[r] + mag) + 1e-37);
    }
    CHECK(!bad_m && !bad_p && !bad_l && !bad_a && !spill && guards_intact(s, (size_t)m * (size_t)lds) &&
              guards_intact(mr, (size_t)m) && guards_intact(lr, (size_t)m) && guards_intact(al, (size_t)m),
          "%s softmax m=%d n=%d: max %s, P %s, l %s, alpha %s, writes %s", kt->name, m, n,
          bad_m ? "WRONG" : "ok", bad_p ? "WRONG" : "ok", bad_l ? "WRONG" : "ok",
          bad_a ? "WRONG" : "ok", spill ? "OUTSIDE" : "ok");
    scratch_free(s);
    scratch_free(mr);
    scratch_free(lr);
    scratch_free(al);
    free(s0);
    free(mr0);
    free(lr0);
}

static void test_softmax(void) {
    int ms[48], ns[48];
    const int nm = edge_sizes(kt->br, ms), nn = edge_sizes(kt->bc, ns);
    for (int i = 0; i < nm; i++)
        for (int j = 0; j < nn; j++)
            check_softmax(ms[i], ns[j]);
    /* decode's longer blocks (kernels/ukernel.h, SDPA_DECODE_BC_MAX) */
    static const int md[] = {1, 4, 16, 17};
    for (int i = 0; i < N(md); i++) {
        check_softmax(md[i], SDPA_DECODE_BC_MAX);
        check_softmax(md[i], SDPA_DECODE_BC_MAX - 1);
    }
}

/* ---- pv ------------------------------------------------------------------------- */

static void check_pv(int m, int n, int dv, int64_t ldv, sdpa_dtype dt, int rescale) {
    const int ldp = (int)rup((size_t)n, 16), ldo = (int)rup((size_t)dv, 16);
    float *vx = malloc((size_t)n * (size_t)dv * sizeof(float));
    void *v = caller_rows(n, dv, ldv, dt, vx);
    float *p = scratch_alloc((size_t)m * (size_t)ldp);
    float *o = scratch_alloc((size_t)m * (size_t)ldo);
    float *o0 = malloc((size_t)m * (size_t)ldo * sizeof(float));
    float *alpha = scratch_alloc((size_t)m);
    for (int r = 0; r < m; r++) {
        for (int j = 0; j < ldp; j++) /* P padding is NaN: reading it poisons O */
            p[(size_t)r * (size_t)ldp + (size_t)j] = j < n ? fabsf(sc_rand_float(&rng)) : NAN;
        for (int d = 0; d < ldo; d++)
            o[(size_t)r * (size_t)ldo + (size_t)d] = d < dv ? sc_rand_float(&rng) : sentinel();
        alpha[r] = fabsf(sc_rand_float(&rng));
    }
    memcpy(o0, o, (size_t)m * (size_t)ldo * sizeof(float));

    /* streaming on past the rows (npf) on odd n, a paged run in step (pf: V's rows again)
     * on other multiples of 3: prefetches only, the results the same */
    const int step = n % 2 == 0 && n % 3 == 0;
    kt->pv(m, n, dv, p, ldp, v, ldv, dt, rescale ? alpha : NULL, o, ldo,
           step ? n : n % 2 ? 4096 : 0, step ? v : NULL);
    /* pv_at on the same rows scattered, from the same O: the same bits as pv */
    int at_bits = 0;
    if (kt->pv_at) {
        char *vbuf;
        const int npf = n % 2 ? 64 : 0;
        const void **at = scattered_rows(n, dv, v, ldv, dt, npf, &vbuf);
        const size_t on = (size_t)m * (size_t)ldo;
        float *o3 = scratch_alloc(on);
        memcpy(o3, o0, on * sizeof(float));
        kt->pv_at(m, n, dv, p, ldp, at, dt, rescale ? alpha : NULL, o3, ldo, npf);
        for (size_t e = 0; e < on; e++)
            at_bits |= sdpa_bits_from_f32(o3[e]) != sdpa_bits_from_f32(o[e]);
        at_bits |= !guards_intact(o3, on);
        scratch_free(o3);
        sc_free(vbuf);
        free(at);
    }

    int bad = 0, spill = 0;
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldo; d++) {
            const float got = o[(size_t)r * (size_t)ldo + (size_t)d];
            if (d >= dv) {
                spill |= !is_sentinel(got);
                continue;
            }
            const double a = rescale ? (double)alpha[r] : 1.0;
            double exact = a * (double)o0[(size_t)r * (size_t)ldo + (size_t)d];
            double mag = fabs(exact);
            for (int j = 0; j < n; j++) {
                const double t = (double)p[(size_t)r * (size_t)ldp + (size_t)j] *
                                 (double)vx[(size_t)j * (size_t)dv + (size_t)d];
                exact += t;
                mag += fabs(t);
            }
            bad |= !(fabs((double)got - exact) <= (n + 4) * U * mag + 1e-37);
        }
    CHECK(!bad, "%s pv m=%d n=%d dv=%d ldv=%lld %s alpha=%s: an element is off", kt->name, m,
          n, dv, (long long)ldv, dtype_name(dt), rescale ? "yes" : "NULL");
    CHECK(!at_bits, "%s pv_at m=%d n=%d dv=%d %s alpha=%s: not pv's bits on the same rows",
          kt->name, m, n, dv, dtype_name(dt), rescale ? "yes" : "NULL");
    CHECK(!spill && guards_intact(o, (size_t)m * (size_t)ldo) && guards_intact(alpha, (size_t)m) &&
              guards_intact(p, (size_t)m * (size_t)ldp),
          "%s pv m=%d n=%d dv=%d: wrote outside O[m][dv]", kt->name, m, n, dv);
    scratch_free(p);
    scratch_free(o);
    scratch_free(alpha);
    free(o0);
    sc_free(v);
    free(vx);
}

static void test_pv(void) {
    int ms[48], ns[48];
    const int nm = edge_sizes(kt->br, ms), nn = edge_sizes(kt->bc, ns);
    static const int dvs[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65,
                              80, 96, 112, 128, 129, 256};
    static const int full_dv[] = {1, 17, 64, 80};
    for (int a = 0; a < N(full_dv); a++)
        for (int i = 0; i < nm; i++)
            for (int j = 0; j < nn; j++)
                check_pv(ms[i], ns[j], full_dv[a], full_dv[a] + (i & 1) * 5, SDPA_F32, (i + j) & 1);
    for (int a = 0; a < N(dvs); a++) {
        const int corners[][2] = {{1, 1}, {kt->br, kt->bc}, {3, 17}, {13, 33}};
        for (int c = 0; c < N(corners); c++) {
            const int m = corners[c][0] < kt->br ? corners[c][0] : kt->br;
            const int n = corners[c][1] < kt->bc ? corners[c][1] : kt->bc;
            check_pv(m, n, dvs[a], dvs[a], SDPA_F32, c & 1);
        }
    }
    /* 16-bit V, widened as pv reads it: every m at a few Dv, then every Dv */
    static const sdpa_dtype dts[] = {SDPA_F16, SDPA_BF16};
    static const int dv16[] = {7, 64, 128};
    for (int t = 0; t < 2; t++) {
        for (int a = 0; a < N(dv16); a++)
            for (int i = 0; i < nm; i++)
                check_pv(ms[i], ns[(i * 7) % nn], dv16[a], dv16[a] + (i & 1), dts[t], i & 1);
        for (int a = 0; a < N(dvs); a++)
            check_pv(kt->br < 5 ? kt->br : 5, kt->bc, dvs[a], dvs[a] + 3, dts[t], 1);
    }
    /* a GQA group of 4 in one tile (AVX-512: pv_4x7v on a 16-bit V at Dv 97..112,
     * pv_4x8v at 113..128), every V storage, every Dv */
    static const sdpa_dtype dt3[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    for (int t = 0; t < N(dt3); t++)
        for (int a = 0; a < N(dvs); a++)
            check_pv(kt->br < 4 ? kt->br : 4, kt->bc - 3, dvs[a], dvs[a] + 1, dt3[t], t & 1);
    /* decode's longer blocks (kernels/ukernel.h, SDPA_DECODE_BC_MAX): a GQA group of 4,
     * one row, and 16 rows */
    static const int dvd[] = {17, 64, 128, 256};
    for (int t = 0; t < N(dt3); t++)
        for (int a = 0; a < N(dvd); a++) {
            check_pv(kt->br < 4 ? kt->br : 4, SDPA_DECODE_BC_MAX, dvd[a], dvd[a], dt3[t], 1);
            check_pv(1, SDPA_DECODE_BC_MAX - 1, dvd[a], dvd[a] + 3, dt3[t], 0);
            check_pv(kt->br < 16 ? kt->br : 16, SDPA_DECODE_BC_MAX - 3, dvd[a], dvd[a],
                     dt3[t], t & 1);
        }
    /* more keys than a span of the chunk's V (PV_SPAN_BYTES on x86: 32 fp32 rows of
     * Dv = 128, 64 of f16) for rows in more than one tile, and for one */
    static const sdpa_dtype all[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    static const int span_m[] = {1, 3, 4, 5, 8}, span_n[] = {65, 129, 200};
    for (int t = 0; t < N(all); t++)
        for (int i = 0; i < N(span_m); i++)
            for (int j = 0; j < N(span_n); j++)
                check_pv(span_m[i], span_n[j], 128 + 16 * (j & 1), 128 + 16 * (j & 1) + i,
                         all[t], (i + j) & 1);
    /* decode's chunks run span by span in one call (AVX-512: a GQA group of up to 4 at
     * Dv = 256, pv_4x8v_spans; AVX2: up to 8 rows, pv_6x2v_spans), and chunk after chunk
     * at Dv = 512: every row count of the nests, one span, several and a part of one
     * (8 KiB spans: 8 fp32 rows at Dv = 256), each checked against the exact sums and
     * against pv_at, which runs the same chunks one call each (the same bits) */
    static const int nest_n[] = {5, 8, 37, 130}, nest_dv[] = {256, 512};
    for (int t = 0; t < N(all); t++)
        for (int m = 1; m <= 8 && m <= kt->br; m++)
            for (int j = 0; j < N(nest_n); j++)
                for (int a = 0; a < N(nest_dv); a++)
                    check_pv(m, nest_n[j], nest_dv[a], nest_dv[a] + 16 * (m & 1), all[t],
                             (m + j) & 1);
}

/* ---- bf16 compute: pack_k_bf16 + qk_bf16, pack_v_bf16 + pv_bf16, pack_q_bf16 ------ */

/* The tables' bf16 tiles (kernels/ukernel.h, "bf16 compute") against double sums of the
 * mode's operands: Q, K, V and P rounded to bf16 (nearest even, here as in the
 * contract), so each product is exact and the only error left is the fp32 summation's,
 * bounded as above with 2u per operation ((2 terms + 6 or 8) u sum |terms|: Arm's
 * BFMMLA rounds its sums to odd, one ulp; kernels/neonbf16/neonbf16.c), plus what
 * DAZ/FTZ may lose (vdpbf16ps and TDPBF16PS read bf16 subnormals as zero and flush
 * subnormal results; their fp32-to-bf16 conversion flushes fp32 subnormals): the terms
 * with an operand below 2^-126, before or after rounding, and 2^-126 per operation. Some
 * rows are scaled down to that range so the flushes happen. Each check also requires:
 * nothing written outside S[m][round_up(n, kpb_align)] / O[m][dv] or the packed block's
 * round_up(n, align) * round_up(dim, 32) elements; Qb beyond round_up(dk, 32), P beyond
 * n and O beyond dv hold NaN and must not be read; and every row's results the same
 * bits when the call covers rows [1, m) or that row alone (the driver's band calls and
 * the attention weights' recomputation rely on it). */

static float bf16r(float x) { return sdpa_bf16_to_f32(sdpa_f32_to_bf16(x)); }

/* The operand raw (as stored) may be flushed: below 2^-126 as fp32 or once rounded. */
static int flushable(float raw) {
    const float r = bf16r(raw);
    return (raw != 0 && fabsf(raw) < FLT_MIN) || (r != 0 && fabsf(r) < FLT_MIN);
}

/* 64-byte aligned, guarded scratch of n (even) bf16 elements. */
static uint16_t *scratch_u16(size_t n) { return (uint16_t *)scratch_alloc(n / 2); }
static void scratch_free_u16(uint16_t *p) { scratch_free((float *)p); }
static int guards_intact_u16(const uint16_t *p, size_t n) {
    return guards_intact((const float *)p, n / 2);
}

/* The first n floats of a and b are the same bits. */
static int same_bits(const float *a, const float *b, int n) {
    for (int j = 0; j < n; j++)
        if (sdpa_bits_from_f32(a[j]) != sdpa_bits_from_f32(b[j]))
            return 0;
    return 1;
}

/* The tiny rows: their values are scaled into the flushing range. */
#define TINY_ROW(r) ((r) % 7 == 3)

static void check_qk_bf16(int m, int n, int dk, int64_t ldk, sdpa_dtype dt, float scale) {
    const int dkp = (int)rup((size_t)dk, 32), ldq = dkp + (m % 3 == 1 ? 32 : 0);
    const int np = (int)rup((size_t)n, (size_t)kt->kpb_align), lds = (int)rup((size_t)np, 16);
    float *kx = malloc((size_t)n * (size_t)dk * sizeof(float));
    void *k = caller_rows(n, dk, ldk, dt, kx);
    const size_t qn = (size_t)m * (size_t)ldq, kpn = (size_t)np * (size_t)dkp;
    uint16_t *q = scratch_u16(qn), *kp = scratch_u16(kpn);
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldq; d++) { /* zero to dkp, then NaN: reading it poisons S */
            const float x = sc_rand_float(&rng) * (TINY_ROW(r) ? 0x1p-125f : 1.0f);
            q[(size_t)r * (size_t)ldq + (size_t)d] =
                d < dk ? sdpa_f32_to_bf16(x) : d < dkp ? 0 : 0x7fc1;
        }
    const size_t sn = (size_t)m * (size_t)lds;
    float *s = scratch_alloc(sn), *s2 = scratch_alloc(sn), *s1 = scratch_alloc((size_t)lds);

    kt->pack_k_bf16(n, dk, k, ldk, dt, kp);
    kt->qk_bf16(m, n, dk, scale, q, ldq, kp, s, lds);
    if (m > 1)
        kt->qk_bf16(m - 1, n, dk, scale, q + ldq, ldq, kp, s2 + lds, lds);
    int band = 0, alone = 0, spill = 0;
    const int lone[3] = {0, m / 2, m - 1};
    for (int i = 0; i < 3; i++) {
        const int r = lone[i];
        kt->qk_bf16(1, n, dk, scale, q + (size_t)r * (size_t)ldq, ldq, kp, s1, lds);
        alone |= !same_bits(s1, s + (size_t)r * (size_t)lds, n);
        for (int j = np; j < lds; j++)
            spill |= !is_sentinel(s1[j]);
    }

    double worst = 0;
    int bad = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < lds; j++) {
            const float got = s[(size_t)r * (size_t)lds + (size_t)j];
            if (j >= np) { /* beyond the padded keys: must be untouched */
                spill |= !is_sentinel(got) ||
                         (r > 0 && !is_sentinel(s2[(size_t)r * (size_t)lds + (size_t)j]));
                continue;
            }
            if (j >= n)
                continue;
            if (r > 0)
                band |= sdpa_bits_from_f32(got) !=
                        sdpa_bits_from_f32(s2[(size_t)r * (size_t)lds + (size_t)j]);
            double exact = 0, mag = 0, lost = 0;
            for (int d = 0; d < dk; d++) {
                const float qd = sdpa_bf16_to_f32(q[(size_t)r * (size_t)ldq + (size_t)d]);
                const float kd = kx[(size_t)j * (size_t)dk + (size_t)d];
                const double t = (double)qd * (double)bf16r(kd);
                exact += t;
                mag += fabs(t);
                if (flushable(qd) || flushable(kd))
                    lost += fabs(t);
            }
            const double as = fabs((double)scale);
            const double tol = (2.0 * dk + 6) * U * as * mag +
                               as * (lost + (2.0 * dk + 4) * FLT_MIN) + FLT_MIN;
            const double err = fabs((double)got - scale * exact);
            bad |= !(err <= tol);
            if (err > worst && mag > 0)
                worst = err / (as * mag);
        }
    for (int j = 0; j < lds; j++) /* the band call left row 0 alone */
        spill |= !is_sentinel(s2[j]);
    spill |= !guards_intact(s, sn) || !guards_intact(s2, sn) ||
             !guards_intact(s1, (size_t)lds) || !guards_intact_u16(kp, kpn) ||
             !guards_intact_u16(q, qn);
    CHECK(!bad,
          "%s qk_bf16 m=%d n=%d dk=%d ldk=%lld %s: an element is off (worst %.3g of |q||k|)",
          kt->name, m, n, dk, (long long)ldk, dtype_name(dt), worst);
    CHECK(!spill, "%s qk_bf16 m=%d n=%d dk=%d %s: wrote outside S[m][round_up(n, kpb_align)] "
          "or Kpb", kt->name, m, n, dk, dtype_name(dt));
    CHECK(!band && !alone,
          "%s qk_bf16 m=%d n=%d dk=%d %s: a row's scores change with the rows sharing the call "
          "(rows 1..m: %s, one row: %s)", kt->name, m, n, dk, dtype_name(dt),
          band ? "DIFFER" : "same", alone ? "DIFFER" : "same");
    scratch_free_u16(q);
    scratch_free_u16(kp);
    scratch_free(s);
    scratch_free(s2);
    scratch_free(s1);
    sc_free(k);
    free(kx);
}

/* Key counts: every edge up to Bc, and one past it (a kernel takes any n). */
static int bf16_key_sizes(int *out) {
    const int k = edge_sizes(kt->bc, out);
    out[k] = kt->bc + 1;
    return k + 1;
}

/* Head dims of the bf16 sweeps: vector and tile edges, the common heads, 576 (MLA). */
static const int bf16_dims[] = {1, 2, 7, 8, 16, 17, 31, 32, 33, 64, 80, 96, 112, 128, 256, 576};

static void test_qk_bf16(void) {
    int ms[48], ns[48];
    const int nm = edge_sizes(kt->br, ms), nn = bf16_key_sizes(ns);
    /* every m x n at a few head dims (one under --quick), K rows padded apart */
    static const int full_dk[] = {17, 1, 64};
    for (int a = 0; a < (th_quick ? 1 : N(full_dk)); a++)
        for (int i = 0; i < nm; i++)
            for (int j = 0; j < nn; j++)
                check_qk_bf16(ms[i], ns[j], full_dk[a], full_dk[a] + (j & 1) * 3, SDPA_F32,
                              0.125f);
    /* every head dim at the tile corners (two under --quick), every storage type */
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    for (int t = 0; t < N(dts); t++)
        for (int a = 0; a < N(bf16_dims); a++) {
            const int dk = bf16_dims[a];
            const int corners[][2] = {{kt->br, kt->bc}, {3, 17}, {1, 1},
                                      {kt->br - 1, kt->bc - 1}, {13, 33}};
            for (int c = 0; c < (th_quick ? 2 : N(corners)); c++) {
                const int m = corners[c][0] < 1 ? 1 : corners[c][0];
                const int n = corners[c][1] < 1 ? 1 : corners[c][1];
                check_qk_bf16(m, n, dk, dk + (c & 1) * 5, dts[t], 1.0f / sqrtf((float)dk));
            }
        }
}

static void check_pv_bf16(int m, int n, int dv, int64_t ldv, sdpa_dtype dt, int rescale) {
    /* P from a column past a row's start (the driver's calls on part of a tile) */
    const int off = (m + n) % 3 == 0 ? 0 : 5;
    const int ldp = (int)rup((size_t)(n + off), 16), ldo = (int)rup((size_t)dv, 16);
    const int nvp = (int)rup((size_t)n, (size_t)kt->vpb_align);
    const size_t vpn = (size_t)nvp * rup((size_t)dv, 32), on = (size_t)m * (size_t)ldo;
    float *vx = malloc((size_t)n * (size_t)dv * sizeof(float));
    void *v = caller_rows(n, dv, ldv, dt, vx);
    uint16_t *vp = scratch_u16(vpn);
    float *p = scratch_alloc((size_t)m * (size_t)ldp);
    float *o = scratch_alloc(on), *o2 = scratch_alloc(on), *o1 = scratch_alloc((size_t)ldo);
    float *o0 = malloc(on * sizeof(float));
    float *alpha = scratch_alloc((size_t)m);
    for (int r = 0; r < m; r++) {
        for (int j = 0; j < ldp; j++) /* P outside its n columns is NaN */
            p[(size_t)r * (size_t)ldp + (size_t)j] =
                j >= off && j < off + n
                    ? fabsf(sc_rand_float(&rng)) * (TINY_ROW(r) ? 0x1p-126f : 1.0f)
                    : NAN;
        for (int d = 0; d < ldo; d++)
            o[(size_t)r * (size_t)ldo + (size_t)d] = d < dv ? sc_rand_float(&rng) : sentinel();
        alpha[r] = fabsf(sc_rand_float(&rng));
    }
    memcpy(o0, o, on * sizeof(float));
    memcpy(o2, o, on * sizeof(float));
    const float *al = rescale ? alpha : NULL;
    const float *p0 = p + off;

    const int finite = kt->pack_v_bf16(n, dv, v, ldv, dt, vp);
    CHECK(finite == 1, "%s pack_v_bf16 n=%d dv=%d %s: finite V reported as not finite",
          kt->name, n, dv, dtype_name(dt));
    kt->pv_bf16(m, n, dv, p0, ldp, vp, al, o, ldo);
    if (m > 1)
        kt->pv_bf16(m - 1, n, dv, p0 + ldp, ldp, vp, al ? al + 1 : NULL, o2 + ldo, ldo);
    int band = !same_bits(o2, o0, ldo), alone = 0, spill = 0; /* the band left row 0 alone */
    for (int r = 1; r < m; r++)
        band |= !same_bits(o2 + (size_t)r * (size_t)ldo, o + (size_t)r * (size_t)ldo, dv);
    const int lone[3] = {0, m / 2, m - 1};
    for (int i = 0; i < 3; i++) {
        const int r = lone[i];
        memcpy(o1, o0 + (size_t)r * (size_t)ldo, (size_t)ldo * sizeof(float));
        kt->pv_bf16(1, n, dv, p0 + (size_t)r * (size_t)ldp, ldp, vp, al ? al + r : NULL, o1, ldo);
        alone |= !same_bits(o1, o + (size_t)r * (size_t)ldo, dv);
        for (int d = dv; d < ldo; d++)
            spill |= !is_sentinel(o1[d]);
    }

    double worst = 0;
    int bad = 0;
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldo; d++) {
            const float got = o[(size_t)r * (size_t)ldo + (size_t)d];
            if (d >= dv) {
                spill |= !is_sentinel(got) ||
                         !is_sentinel(o2[(size_t)r * (size_t)ldo + (size_t)d]);
                continue;
            }
            const double a = rescale ? (double)alpha[r] : 1.0;
            double exact = a * (double)o0[(size_t)r * (size_t)ldo + (size_t)d];
            double mag = fabs(exact), lost = 0;
            for (int j = 0; j < n; j++) {
                const float pj = p0[(size_t)r * (size_t)ldp + (size_t)j];
                const float vj = vx[(size_t)j * (size_t)dv + (size_t)d];
                const double t = (double)bf16r(pj) * (double)bf16r(vj);
                exact += t;
                mag += fabs(t);
                if (flushable(pj) || flushable(vj))
                    lost += fabs(t);
            }
            const double tol = (2.0 * n + 8) * U * mag + lost + (2.0 * n + 4) * FLT_MIN;
            const double err = fabs((double)got - exact);
            bad |= !(err <= tol);
            if (err > worst && mag > 0)
                worst = err / mag;
        }
    spill |= !guards_intact(o, on) || !guards_intact(o2, on) || !guards_intact(o1, (size_t)ldo) ||
             !guards_intact_u16(vp, vpn) || !guards_intact(p, (size_t)m * (size_t)ldp) ||
             !guards_intact(alpha, (size_t)m);
    CHECK(!bad,
          "%s pv_bf16 m=%d n=%d dv=%d ldv=%lld %s alpha=%s: an element is off (worst %.3g of "
          "sum |p||v|)", kt->name, m, n, dv, (long long)ldv, dtype_name(dt),
          rescale ? "yes" : "NULL", worst);
    CHECK(!spill, "%s pv_bf16 m=%d n=%d dv=%d %s: wrote outside O[m][dv] or Vpb", kt->name, m,
          n, dv, dtype_name(dt));
    CHECK(!band && !alone,
          "%s pv_bf16 m=%d n=%d dv=%d %s: a row's output changes with the rows sharing the "
          "call (rows 1..m: %s, one row: %s)", kt->name, m, n, dv, dtype_name(dt),
          band ? "DIFFER" : "same", alone ? "DIFFER" : "same");
    scratch_free_u16(vp);
    scratch_free(p);
    scratch_free(o);
    scratch_free(o2);
    scratch_free(o1);
    scratch_free(alpha);
    free(o0);
    sc_free(v);
    free(vx);
}

static void test_pv_bf16(void) {
    int ms[48], ns[48];
    const int nm = edge_sizes(kt->br, ms), nn = bf16_key_sizes(ns);
    /* every m x n at a few Dv (one under --quick), V rows padded apart */
    static const int full_dv[] = {80, 1, 17, 64};
    for (int a = 0; a < (th_quick ? 1 : N(full_dv)); a++)
        for (int i = 0; i < nm; i++)
            for (int j = 0; j < nn; j++)
                check_pv_bf16(ms[i], ns[j], full_dv[a], full_dv[a] + (i & 1) * 5, SDPA_F32,
                              (i + j) & 1);
    /* every Dv at the tile corners (two under --quick), every storage type */
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    for (int t = 0; t < N(dts); t++)
        for (int a = 0; a < N(bf16_dims); a++) {
            const int dv = bf16_dims[a];
            const int corners[][2] = {{kt->br - 1, kt->bc + 1}, {3, 17}, {1, 1},
                                      {kt->br, kt->bc}, {13, 33}};
            for (int c = 0; c < (th_quick ? 2 : N(corners)); c++) {
                const int m = corners[c][0] < 1 ? 1 : corners[c][0];
                check_pv_bf16(m, corners[c][1], dv, dv + (c & 1) * 3, dts[t], c & 1);
            }
        }
}

/* The bf16 decode pair (qk_rows_bf16, pv_rows_bf16) on rows read in place, stored as dt
 * (f32 and f16 rounded in the kernel), checked as qk_bf16 / pv_bf16 above: against
 * double sums of the mode's operands with the same bounds; nothing written outside
 * S[m][n] / O[m][dv]; Qb past round_up(dk, 32), P past n and O past dv hold NaN or
 * sentinels; a row's results the same bits when the call covers rows [1, m); the first
 * call told its stream goes on (npf, prefetched past the guard page, never read), the
 * second given the rows of a paged cache's next run (pf: the same rows, only
 * prefetched). */
static void check_qk_rows_bf16(int m, int n, int dk, int64_t ldk, float scale, sdpa_dtype dt) {
    const int dkp = (int)rup((size_t)dk, 32), ldq = dkp + (m % 3 == 1 ? 32 : 0);
    const int lds = (int)rup((size_t)n, 16);
    float *kx = malloc((size_t)n * (size_t)dk * sizeof(float));
    const void *k = caller_rows(n, dk, ldk, dt, kx);
    const size_t qn = (size_t)m * (size_t)ldq, sn = (size_t)m * (size_t)lds;
    uint16_t *q = scratch_u16(qn + (qn & 1));
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldq; d++) {
            const float x = sc_rand_float(&rng) * (TINY_ROW(r) ? 0x1p-125f : 1.0f);
            q[(size_t)r * (size_t)ldq + (size_t)d] =
                d < dk ? sdpa_f32_to_bf16(x) : d < dkp ? 0 : 0x7fc1;
        }
    float *s = scratch_alloc(sn), *s2 = scratch_alloc(sn);
    const int64_t ldkb = ldk * (int64_t)dtype_bytes(dt);
    kt->qk_rows_bf16(m, n, dk, scale, q, ldq, k, ldkb, dt, NULL, s, lds, 4096, NULL);
    if (m > 1)
        kt->qk_rows_bf16(m - 1, n, dk, scale, q + ldq, ldq, k, ldkb, dt, NULL, s2 + lds, lds, n,
                         k);
    int bad = 0, spill = 0, band = 0;
    double worst = 0;
    for (int r = 0; r < m; r++)
        for (int j = 0; j < lds; j++) {
            const float got = s[(size_t)r * (size_t)lds + (size_t)j];
            if (j >= n) {
                spill |= !is_sentinel(got) ||
                         (r > 0 && !is_sentinel(s2[(size_t)r * (size_t)lds + (size_t)j]));
                continue;
            }
            if (r > 0)
                band |= sdpa_bits_from_f32(got) !=
                        sdpa_bits_from_f32(s2[(size_t)r * (size_t)lds + (size_t)j]);
            double exact = 0, mag = 0, lost = 0;
            for (int d = 0; d < dk; d++) {
                const float qd = sdpa_bf16_to_f32(q[(size_t)r * (size_t)ldq + (size_t)d]);
                const float kraw = kx[(size_t)j * (size_t)dk + (size_t)d], kd = bf16r(kraw);
                const double t = (double)qd * (double)kd;
                exact += t;
                mag += fabs(t);
                if (flushable(qd) || flushable(kraw))
                    lost += fabs(t);
            }
            const double as = fabs((double)scale);
            const double tol = (2.0 * dk + 6) * U * as * mag +
                               as * (lost + (2.0 * dk + 4) * FLT_MIN) + FLT_MIN;
            const double err = fabs((double)got - scale * exact);
            bad |= !(err <= tol);
            if (err > worst && mag > 0)
                worst = err / (as * mag);
        }
    for (int j = 0; j < lds; j++)
        spill |= !is_sentinel(s2[j]);
    spill |= !guards_intact(s, sn) || !guards_intact(s2, sn) || !guards_intact_u16(q, qn + (qn & 1));
    CHECK(!bad, "%s qk_rows_bf16 m=%d n=%d dk=%d ldk=%lld %s: an element is off (worst %.3g "
          "of |q||k|)", kt->name, m, n, dk, (long long)ldk, dtype_name(dt), worst);
    CHECK(!spill, "%s qk_rows_bf16 m=%d n=%d dk=%d: wrote outside S[m][n]", kt->name, m, n, dk);
    CHECK(!band, "%s qk_rows_bf16 m=%d n=%d dk=%d: a row's scores change with the rows sharing "
          "the call", kt->name, m, n, dk);
    scratch_free_u16(q);
    scratch_free(s);
    scratch_free(s2);
    sc_free((void *)k);
    free(kx);
}

static void check_pv_rows_bf16(int m, int n, int dv, int64_t ldv, int rescale, sdpa_dtype dt) {
    const int ldp = (int)rup((size_t)n, 16), ldo = (int)rup((size_t)dv, 16);
    const size_t on = (size_t)m * (size_t)ldo;
    float *vx = malloc((size_t)n * (size_t)dv * sizeof(float));
    const void *v = caller_rows(n, dv, ldv, dt, vx);
    float *p = scratch_alloc((size_t)m * (size_t)ldp);
    float *o = scratch_alloc(on), *o2 = scratch_alloc(on), *o0 = malloc(on * sizeof(float));
    float *alpha = scratch_alloc((size_t)m);
    for (int r = 0; r < m; r++) {
        for (int j = 0; j < ldp; j++) /* P past its n columns is NaN */
            p[(size_t)r * (size_t)ldp + (size_t)j] =
                j < n ? fabsf(sc_rand_float(&rng)) * (TINY_ROW(r) ? 0x1p-126f : 1.0f) : NAN;
        for (int d = 0; d < ldo; d++)
            o[(size_t)r * (size_t)ldo + (size_t)d] = d < dv ? sc_rand_float(&rng) : sentinel();
        alpha[r] = fabsf(sc_rand_float(&rng));
    }
    memcpy(o0, o, on * sizeof(float));
    memcpy(o2, o, on * sizeof(float));
    const float *al = rescale ? alpha : NULL;
    const int64_t ldvb = ldv * (int64_t)dtype_bytes(dt);
    kt->pv_rows_bf16(m, n, dv, p, ldp, v, ldvb, dt, NULL, al, o, ldo, 4096, NULL);
    if (m > 1)
        kt->pv_rows_bf16(m - 1, n, dv, p + ldp, ldp, v, ldvb, dt, NULL, al ? al + 1 : NULL,
                         o2 + ldo, ldo, n, v);
    int band = !same_bits(o2, o0, ldo), spill = 0, bad = 0;
    for (int r = 1; r < m; r++)
        band |= !same_bits(o2 + (size_t)r * (size_t)ldo, o + (size_t)r * (size_t)ldo, dv);
    double worst = 0;
    for (int r = 0; r < m; r++)
        for (int d = 0; d < ldo; d++) {
            const float got = o[(size_t)r * (size_t)ldo + (size_t)d];
            if (d >= dv) {
                spill |= !is_sentinel(got) || !is_sentinel(o2[(size_t)r * (size_t)ldo + (size_t)d]);
                continue;
            }
            const double a = rescale ? (double)alpha[r] : 1.0;
            double exact = a * (double)o0[(size_t)r * (size_t)ldo + (size_t)d];
            double mag = fabs(exact), lost = 0;
            for (int j = 0; j < n; j++) {
                const float pj = p[(size_t)r * (size_t)ldp + (size_t)j];
                const float vj = vx[(size_t)j * (size_t)dv + (size_t)d];
                const double t = (double)bf16r(pj) * (double)bf16r(vj);
                exact += t;
                mag += fabs(t);
                if (flushable(pj) || flushable(vj))
                    lost += fabs(t);
            }
            const double tol = (2.0 * n + 8) * U * mag + lost + (2.0 * n + 4) * FLT_MIN;
            const double err = fabs((double)got - exact);
            bad |= !(err <= tol);
            if (err > worst && mag > 0)
                worst = err / mag;
        }
    spill |= !guards_intact(o, on) || !guards_intact(o2, on) ||
             !guards_intact(p, (size_t)m * (size_t)ldp) || !guards_intact(alpha, (size_t)m);
    CHECK(!bad, "%s pv_rows_bf16 m=%d n=%d dv=%d ldv=%lld alpha=%s %s: an element is off "
          "(worst %.3g of sum |p||v|)", kt->name, m, n, dv, (long long)ldv,
          rescale ? "yes" : "NULL", dtype_name(dt), worst);
    CHECK(!spill, "%s pv_rows_bf16 m=%d n=%d dv=%d: wrote outside O[m][dv]", kt->name, m, n, dv);
    CHECK(!band, "%s pv_rows_bf16 m=%d n=%d dv=%d: a row's output changes with the rows sharing "
          "the call", kt->name, m, n, dv);
    scratch_free(p);
    scratch_free(o);
    scratch_free(o2);
    scratch_free(alpha);
    free(o0);
    sc_free((void *)v);
    free(vx);
}

/* Every row count of decode's items (up to 16, QK_ROWS_MAX) against key counts around
 * the vector, pair and block edges (odd ones leave a key without its pair) and past the
 * 64-key piece of pv_rows_bf16's P, at every bf16 head dim, each storage type. */
static void test_rows_bf16(void) {
    static const int ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17};
    static const int ns[] = {1,  2,  3,  15, 16,  17,
                             31, 33, 63, 64, 65, 130, SDPA_DECODE_BC_MAX};
    static const sdpa_dtype dts[] = {SDPA_BF16, SDPA_F32, SDPA_F16};
    for (int i = 0; i < N(ms); i++)
        for (int j = 0; j < N(ns); j++) {
            const int d = bf16_dims[(i + j) % N(bf16_dims)];
            const sdpa_dtype dt = dts[(i + 2 * j) % N(dts)];
            check_qk_rows_bf16(ms[i], ns[j], d, d + (j & 1) * 3, 0.25f, dt);
            check_pv_rows_bf16(ms[i], ns[j], d, d + (i & 1) * 5, (i + j) & 1, dt);
        }
    for (int a = 0; a < N(bf16_dims); a++)
        for (int t = 0; t < N(dts); t++) {
            const int d = bf16_dims[a];
            check_qk_rows_bf16(4, 64, d, d, 1.0f / sqrtf((float)d), dts[t]);
            check_qk_rows_bf16(8, 33, d, d + 7, 1.0f / sqrtf((float)d), dts[t]);
            check_pv_rows_bf16(4, 64, d, d, 1, dts[t]);
            check_pv_rows_bf16(8, 33, d, d + 7, 0, dts[t]);
        }
}

/* pack_q_bf16 on one row of every storage type at every bf16 head dim, the row holding
 * normal values, zeros, fp32 subnormals, values that round past bf16's largest, inf and
 * NaN: each element is sdpa_f32_to_bf16 of its fp32 value (nearest even), except that
 * an fp32 subnormal may become a zero of its sign (x86's conversion flushes them:
 * kernels/x86/bf16.h) and a NaN need only stay a NaN of its sign (a bf16-stored NaN may
 * come back quiet); zero from dk to round_up(dk, 32); nothing written past that. */
static void test_pack_q_bf16(void) {
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    static const float odd[] = {0.0f, -0.0f, 0x1p-140f, -0x1.8p-130f, FLT_MAX, -INFINITY,
                                NAN, 0x1.00018p0f, 0x1.00008p0f};
    for (int t = 0; t < N(dts); t++)
        for (int a = 0; a < N(bf16_dims); a++) {
            const int dk = bf16_dims[a], dkp = (int)rup((size_t)dk, 32);
            float *qx = malloc((size_t)dk * sizeof(float));
            char *q = caller_rows(1, dk, dk, dts[t], qx); /* guarded right after element dk - 1 */
            const size_t es = dtype_bytes(dts[t]);
            for (int d = 0; d < dk; d += 3) { /* every third element an odd one */
                const float x = odd[(d / 3) % N(odd)];
                if (dts[t] == SDPA_F32) {
                    memcpy(q + (size_t)d * es, &x, 4);
                } else {
                    const uint16_t h = dts[t] == SDPA_F16 ? sdpa_f32_to_f16(x) : sdpa_f32_to_bf16(x);
                    memcpy(q + (size_t)d * es, &h, 2);
                }
                qx[d] = sdpa_load_as_f32(q, d, dts[t]);
            }
            uint16_t *qb = scratch_u16((size_t)dkp);
            kt->pack_q_bf16(dk, q, dts[t], qb);
            int bad = -1;
            for (int d = 0; d < dkp && bad < 0; d++) {
                const uint16_t got = qb[d];
                if (d >= dk) {
                    bad = got != 0 ? d : -1;
                    continue;
                }
                const uint16_t want = sdpa_f32_to_bf16(qx[d]);
                const uint16_t sign = (uint16_t)(want & 0x8000u);
                const int nan = (want & 0x7f80u) == 0x7f80u && (want & 0x7fu);
                const int sub = qx[d] != 0 && fabsf(qx[d]) < FLT_MIN;
                const int ok = got == want || (sub && got == sign) ||
                               (nan && (got & 0xff80u) == (sign | 0x7f80u) && (got & 0x7fu));
                bad = ok ? -1 : d;
            }
            CHECK(bad < 0, "%s pack_q_bf16 dk=%d %s: element %d is 0x%04x (from %a)", kt->name,
                  dk, dtype_name(dts[t]), bad, bad >= 0 ? qb[bad] : 0,
                  bad >= 0 && bad < dk ? (double)qx[bad] : 0.0);
            CHECK(guards_intact_u16(qb, (size_t)dkp), "%s pack_q_bf16 dk=%d: wrote past the row",
                  kt->name, dk);
            scratch_free_u16(qb);
            sc_free(q);
            free(qx);
        }
}

/* pack_v_bf16's result: 0 exactly when an element of the n x dv block is inf or NaN once
 * rounded to bf16 (stored as inf or NaN, or fp32 FLT_MAX, which rounds to inf), at the
 * block's first, last or a middle element; a non-finite value in the gap between rows
 * (ldv > dv) or past the block is not V's and must not count. */
static void test_pack_v_finite(void) {
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16};
    static const int sizes[][2] = {{1, 1}, {2, 17}, {33, 64}, {64, 128}, {7, 576}};
    static const float specials[] = {INFINITY, -INFINITY, NAN, FLT_MAX};
    for (int t = 0; t < N(dts); t++)
        for (int z = 0; z < N(sizes); z++) {
            const int n = sizes[z][0], dv = sizes[z][1];
            const int64_t ldv = dv + 3;
            const size_t vpn = rup((size_t)n, (size_t)kt->vpb_align) * rup((size_t)dv, 32);
            const size_t es = dtype_bytes(dts[t]);
            float *vx = malloc((size_t)n * (size_t)dv * sizeof(float));
            char *v = caller_rows(n, dv, ldv, dts[t], vx);
            uint16_t *vp = scratch_u16(vpn);
            for (int sp = 0; sp < N(specials); sp++)
                for (int at = 0; at < 4; at++) {
                    /* where: first element, last, middle, the gap after row 0 */
                    const int64_t e = at == 0   ? 0
                                      : at == 1 ? (int64_t)(n - 1) * ldv + dv - 1
                                      : at == 2 ? (int64_t)(n / 2) * ldv + dv / 2
                                                : dv;
                    if (at == 3 && n == 1)
                        continue; /* no gap inside a single row's block */
                    char *el = v + (size_t)e * es;
                    uint32_t saved = 0;
                    memcpy(&saved, el, es);
                    const float x = specials[sp];
                    if (dts[t] == SDPA_F32) {
                        memcpy(el, &x, 4);
                    } else {
                        const uint16_t h = dts[t] == SDPA_F16 ? sdpa_f32_to_f16(x)
                                                               : sdpa_f32_to_bf16(x);
                        memcpy(el, &h, 2);
                    }
                    /* FLT_MAX stored as f16 is inf already; as bf16, inf (rounded) */
                    const int want = at == 3;
                    const int got = kt->pack_v_bf16(n, dv, v, ldv, dts[t], vp);
                    CHECK(got == want,
                          "%s pack_v_bf16 n=%d dv=%d %s: %g at element %lld gives %d, not %d",
                          kt->name, n, dv, dtype_name(dts[t]), (double)x, (long long)e, got,
                          want);
                    memcpy(el, &saved, es);
                }
            CHECK(guards_intact_u16(vp, vpn), "%s pack_v_bf16 n=%d dv=%d: wrote past Vpb",
                  kt->name, n, dv);
            scratch_free_u16(vp);
            sc_free(v);
            free(vx);
        }
}

/* ---- vexp ----------------------------------------------------------------------- */

/* Max relative error of vexp over [-104, 89] (normal results), plus its edge cases:
 * flush-or-subnormal below FLT_MIN, +inf above ln(FLT_MAX), exact 0/1/inf/NaN points. */
static void test_vexp(void) {
    enum { NPTS = 1 << 20 };
    float *x = th_alloc(NPTS * sizeof(float), SC_GUARD_AFTER);
    float *y = th_alloc(NPTS * sizeof(float), SC_GUARD_AFTER);
    const double lo = -104.0, hi = 89.0;
    for (int i = 0; i < NPTS; i++) /* a uniform grid plus a random jitter within each step */
        x[i] = (float)(lo + (hi - lo) * ((double)i + 0.5 + 0.5 * sc_rand_float(&rng)) / NPTS);
    double worst = 0, worst_x = 0;
    int bad_range = 0;
    /* odd lengths and offsets so tails and in-place use are exercised too */
    static const int chunks[] = {1, 3, 7, 15, 16, 17, 31, 33, 64, 100, 1000};
    for (int i = 0, c = 0; i < NPTS; c++) {
        int len = chunks[c % N(chunks)];
        if (len > NPTS - i)
            len = NPTS - i;
        if (c % 2)
            kt->vexp(len, x + i, y + i);
        else {
            memcpy(y + i, x + i, (size_t)len * sizeof(float));
            kt->vexp(len, y + i, y + i);
        }
        i += len;
    }
    for (int i = 0; i < NPTS; i++) {
        const double want = exp((double)x[i]);
        if (want > FLT_MAX) {
            bad_range |= !(isinf(y[i]) && y[i] > 0);
        } else if (want >= FLT_MIN) {
            const double rel = fabs((double)y[i] - want) / want;
            if (!(rel <= worst)) {
                worst = isnan(rel) ? INFINITY : rel;
                worst_x = x[i];
            }
        } else {
            bad_range |= !(y[i] >= 0 && fabs((double)y[i] - want) <= FLT_MIN);
        }
    }
    /* the tail: nothing past y[n-1] written (the guard page catches reads past x) */
    y[NPTS - 1] = 7.0f;
    kt->vexp(NPTS - 1, x, y);
    const int tail_ok = y[NPTS - 1] == 7.0f;

    float sx[6] = {-INFINITY, NAN, INFINITY, 0.0f, -200.0f, 200.0f}, sy[6];
    kt->vexp(6, sx, sy);
    const int specials = sy[0] == 0.0f && isnan(sy[1]) && isinf(sy[2]) && sy[2] > 0 &&
                         fabsf(sy[3] - 1.0f) <= FLT_EPSILON && sy[4] == 0.0f && isinf(sy[5]);
    CHECK(worst <= EXP_TOL && !bad_range && specials && tail_ok,
          "%s vexp: max rel err %.3g at x = %.7g (limit %.3g), range edges %s, specials %s, "
          "tail %s", kt->name, worst, worst_x, EXP_TOL, bad_range ? "WRONG" : "ok",
          specials ? "ok" : "WRONG", tail_ok ? "ok" : "OVERWRITTEN");
    printf("  %-7s vexp max relative error %.3g (%.2f ulp) over [-104, 89], %d points\n",
           kt->name, worst, worst / (2 * U), NPTS);
    sc_free(x);
    sc_free(y);
}

void suite_ukernel(void) {
    kt = sdpa_isa_lookup(th_isa)->kernels;
    if (!CHECK(kt != NULL && kt->isa == th_isa, "no table for %s", sdpa_isa_name(th_isa)))
        return;
    rng = 0x5eed0000u + (uint64_t)th_isa;
    CHECK(kt->br >= 1 && kt->bc >= 1 && kt->kp_align >= 1 && kt->bc % kt->kp_align == 0,
          "%s: tile sizes br=%d bc=%d kp_align=%d", kt->name, kt->br, kt->bc, kt->kp_align);
    test_qk();
    test_pack_split();
    test_qk_rows();
    test_widening();
    test_softmax();
    test_pv();
    test_vexp();
    if (kt->qk_bf16) { /* the tables whose row has dedicated bf16 tiles */
        CHECK(kt->kpb_align >= 1 && kt->vpb_align >= 1, "%s: kpb_align=%d vpb_align=%d",
              kt->name, kt->kpb_align, kt->vpb_align);
        test_qk_bf16();
        test_pv_bf16();
        test_pack_v_finite();
        test_pack_q_bf16();
    }
    CHECK((kt->qk_rows_bf16 == NULL) == (kt->pv_rows_bf16 == NULL),
          "%s: qk_rows_bf16 and pv_rows_bf16 come together", kt->name);
    if (kt->qk_rows_bf16 && kt->pv_rows_bf16)
        test_rows_bf16();
}
