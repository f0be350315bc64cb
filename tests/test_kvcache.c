/*
 * test_kvcache.c - K and V as engines keep them (include/sdpa.h, "KV caches"): paged
 * pools read through a block table, and quantized storage (int8, fp8 e4m3/e5m2, int4)
 * with strided scales, on every kernel table; and sdpa_kv_write, the quantizer.
 *
 * What it shows:
 *   - paged calls give the same bits as contiguous calls on the same data, for page
 *     sizes 1, 3, 16, 64, 256, shuffled pages (common/case.c draws the pool's order),
 *     partly filled last pages, shared pages, decode and chunked prefill, every storage
 *     type, the bf16 compute mode and split-KV;
 *   - quantized caches agree with sdpa_reference, which dequantizes by the formats'
 *     arithmetic definitions (src/reference.c code_value), not by kernels/kvq.h, at every
 *     scale granularity (per tensor, head, token, group of 32 / 64), in fp32 and f16;
 *   - every table's dequant is bit-exact on all 256 codes of each 8-bit format and all
 *     16 int4 codes, and its fused quantized kernels (qk_rows_q, pv_q), where it has
 *     them, give the bits of dequant followed by qk_rows / pv;
 *   - sdpa_kv_write rounds to nearest even, saturates, keeps NaN in fp8, packs int4 low
 *     nibble first, and writes exactly the rows it is asked to (paged or not);
 *   - bad block tables, page sizes, scales, groups, dtypes and strides are refused with
 *     the outputs untouched, in sdpa_forward and sdpa_kv_write alike.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static uint64_t seed_of(int a, int b, int c) { return (uint64_t)(a * 7919 + b * 131 + c) + 4242; }

/* A table whose fp32 tiles and dequant are its base's (avx512bf16, neonbf16, amx) runs
 * only the bf16-compute cases: the others would repeat its base's runs bit for bit. */
static int skip_case(const sc_case *c) {
    return !(sdpa_isa_lookup(th_isa)->own & (1u << SDPA_COMPUTE_F32)) &&
           c->compute != SDPA_COMPUTE_BF16;
}

/* Run case c fused on th_isa; the tensors are kept for the caller (free them). */
static sdpa_status run_fused(const sc_case *c, sc_tensors *t) {
    th_tensors_make(t, c);
    return sdpa_forward(&t->desc, &t->q, &t->k, &t->v, &t->o, t->lse);
}

/* o and lse of two runs of cases that differ only in their K/V storage: the same bits. */
static int same_bits(const sc_tensors *a, const sc_tensors *b) {
    return memcmp(a->bufs[3], b->bufs[3], a->elems[3] * sc_dtype_size(a->o.dtype)) == 0 &&
           memcmp(a->lse, b->lse, a->elems[4] * sizeof(float)) == 0;
}

/* Paged against contiguous on the same data, and each against the reference. */
static void paged_identical(void) {
    static const int64_t pages[] = {1, 3, 16, 64, 256};
    static const sdpa_dtype dts[] = {SDPA_F32, SDPA_F16, SDPA_BF16, SDPA_I8, SDPA_FP8_E4M3,
                                     SDPA_I4};
    /* decode with GQA and kv_lens; chunked prefill (bottom-right causal); a window; decode
     * in a window whose first key is odd (the bf16 decode pair sums V's keys in pairs from
     * a call's first: pages of odd size, or even pages from an odd key, are read as one
     * gathered block, tile.c v_runs) */
    static const sc_case shapes[] = {
        {.B = 3, .Hq = 8, .Hkv = 2, .Tq = 1, .Tkv = 300, .Dk = 64, .Dv = 64, .lens = SC_LENS_KV},
        {.B = 2, .Hq = 4, .Hkv = 4, .Tq = 37, .Tkv = 200, .Dk = 32, .Dv = 48, .causal = 1},
        {.B = 1, .Hq = 2, .Hkv = 1, .Tq = 20, .Tkv = 333, .Dk = 32, .Dv = 32, .causal = 1,
         .window = 1, .wl = 70, .layout = SC_BTHD},
        {.B = 2, .Hq = 4, .Hkv = 1, .Tq = 1, .Tkv = 333, .Dk = 64, .Dv = 32, .causal = 1,
         .window = 1, .wl = 71},
    };
    /* fp32 compute, then the bf16 mode on the decode shapes (chunked prefill's with
     * 16-token pages in the first pass) */
    for (int bf = 0; bf < 2; bf++)
    for (int s = 0; s < N(shapes); s++)
        for (int d = 0; d < N(dts); d++)
            for (int pg = 0; pg < N(pages); pg++) {
                if (th_quick && (pg + d + s + bf) % 3 != 0) /* --quick: a third */
                    continue;
                if (bf && shapes[s].Tq > 1)
                    continue;
                sc_case c = shapes[s];
                c.dt[1] = c.dt[2] = dts[d];
                c.qgroup = (d + pg) % 2 ? 0 : 16;
                c.seed = seed_of(s, d, pg) + (uint64_t)bf;
                c.compute = bf || (pg == 2 && s == 1) ? SDPA_COMPUTE_BF16 : SDPA_COMPUTE_F32;
                if (skip_case(&c))
                    continue;
                if (s == 2 && pg % 2)
                    c.layout = SC_PADDED;
                /* a decode over one-token pages runs as head groups (plan.c heads_together),
                 * whose key blocks are those of the same call over a tokens-major cache,
                 * not over a heads-major one (decode's longer blocks, dispatch.c
                 * sdpa_decode_bc): against the tokens-major view */
                if (pages[pg] == 1 && c.layout == SC_BHTD)
                    c.layout = SC_BTHD;
                sc_tensors flat, paged;
                const sdpa_status s0 = run_fused(&c, &flat);
                c.page = pages[pg];
                const sdpa_status s1 = run_fused(&c, &paged);
                char desc[512];
                CHECK(s0 == SDPA_OK && s1 == SDPA_OK && same_bits(&flat, &paged),
                      "paged vs contiguous [%s]: status %s / %s, same bits %d",
                      th_case_str(&c, desc, sizeof desc), sdpa_strerror(s0), sdpa_strerror(s1),
                      s0 == SDPA_OK && s1 == SDPA_OK ? same_bits(&flat, &paged) : -1);
                sc_tensors_free(&flat);
                sc_tensors_free(&paged);
                if (pg % 2 == 0)
                    th_run_case(&c, "paged");
            }
    /* K and V stored apart, one side rows read at addresses (f32/f16/bf16), the other
     * quantized (int4 rows have no whole byte per element) */
    static const sdpa_dtype kv[][2] = {{SDPA_F32, SDPA_I4}, {SDPA_I4, SDPA_F16},
                                       {SDPA_BF16, SDPA_FP8_E4M3}, {SDPA_I8, SDPA_F32}};
    for (int s = 0; s < N(shapes); s++)
        for (int d = 0; d < N(kv); d++)
            for (int pg = 0; pg < 3; pg++) {
                sc_case c = shapes[s];
                c.dt[1] = kv[d][0];
                c.dt[2] = kv[d][1];
                c.seed = seed_of(s, d + N(dts), pg);
                if (skip_case(&c))
                    continue;
                sc_tensors flat, paged;
                const sdpa_status s0 = run_fused(&c, &flat);
                c.page = pages[pg];
                const sdpa_status s1 = run_fused(&c, &paged);
                char desc[512];
                CHECK(s0 == SDPA_OK && s1 == SDPA_OK && same_bits(&flat, &paged),
                      "paged vs contiguous, K and V stored apart [%s]: status %s / %s, same "
                      "bits %d", th_case_str(&c, desc, sizeof desc), sdpa_strerror(s0),
                      sdpa_strerror(s1),
                      s0 == SDPA_OK && s1 == SDPA_OK ? same_bits(&flat, &paged) : -1);
                sc_tensors_free(&flat);
                sc_tensors_free(&paged);
            }
}

/* Split-KV (one long decode row, few items) over a paged int8 cache and 16-token pages
 * gives the same bits as the contiguous cache, at 1 and 3 threads. */
static void paged_split(void) {
    sc_case c = {.B = 1, .Hq = 4, .Hkv = 1, .Tq = 1, .Tkv = 5000, .Dk = 64, .Dv = 64,
                 .dt = {SDPA_F32, SDPA_I8, SDPA_I8, SDPA_F32}, .seed = 99};
    sc_tensors ref;
    run_fused(&c, &ref);
    c.page = 16;
    for (int threads = 1; threads <= 3; threads += 2) {
        c.threads = threads;
        sc_tensors t;
        const sdpa_status st = run_fused(&c, &t);
        CHECK(st == SDPA_OK && same_bits(&ref, &t), "split-KV paged int8, %d threads: %s",
              threads, sdpa_strerror(st));
        sc_tensors_free(&t);
    }
    sc_tensors_free(&ref);
    th_run_case(&c, "paged split-KV");
}

/* Two entries reading the same pages (a shared prompt prefix): with the same query rows
 * their outputs are the same bits, and both agree with the reference. */
static void shared_pages(void) {
    sc_case c = {.B = 2, .Hq = 4, .Hkv = 2, .Tq = 3, .Tkv = 100, .Dk = 32, .Dv = 32,
                 .causal = 1, .page = 16, .seed = 7, .dt = {0, SDPA_I8, SDPA_F16, 0}};
    sc_tensors t, r;
    th_tensors_make(&t, &c);
    th_tensors_make(&r, &c);
    const int64_t per = t.desc.pages.stride;
    for (int64_t p = 0; p < per; p++) {
        t.table[per + p] = t.table[p];
        r.table[per + p] = r.table[p];
    }
    for (int64_t h = 0; h < c.Hq; h++)
        for (int64_t i = 0; i < c.Tq; i++) {
            memcpy(sc_at(&t.q, 1, h, i), sc_at(&t.q, 0, h, i), (size_t)c.Dk * sizeof(float));
            memcpy(sc_at(&r.q, 1, h, i), sc_at(&r.q, 0, h, i), (size_t)c.Dk * sizeof(float));
        }
    const sdpa_status sf = sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse);
    const sdpa_status sr = sdpa_reference(&r.desc, &r.q, &r.k, &r.v, &r.o, r.lse);
    int same = 1;
    for (int64_t h = 0; h < c.Hq; h++)
        for (int64_t i = 0; i < c.Tq; i++)
            same &= memcmp(sc_at(&t.o, 0, h, i), sc_at(&t.o, 1, h, i),
                           (size_t)c.Dv * sizeof(float)) == 0;
    const sc_error e = th_compare(&c, &t, &r);
    CHECK(sf == SDPA_OK && sr == SDPA_OK && same && e.bad == 0,
          "shared pages: %s / %s, entries equal %d, bad %lld", sdpa_strerror(sf),
          sdpa_strerror(sr), same, (long long)e.bad);
    sc_tensors_free(&t);
    sc_tensors_free(&r);
}

/* Quantized caches against the reference at every scale granularity and format. */
static void quantized(void) {
    static const sdpa_dtype dts[] = {SDPA_I8, SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_I4};
    static const struct {
        int qs;
        int64_t group;
        sdpa_dtype sdt;
    } scales[] = {{SC_QS_ROW, 0, SDPA_F32}, {SC_QS_ROW, 32, SDPA_F32}, {SC_QS_ROW, 64, SDPA_F16},
                  {SC_QS_HEAD, 0, SDPA_F32}, {SC_QS_TENSOR, 0, SDPA_F16}};
    for (int d = 0; d < N(dts); d++)
        for (int s = 0; s < N(scales); s++)
            for (int shape = 0; shape < 3; shape++) {
                if (th_quick && (d + s + shape) % 3 != 0) /* --quick: one shape each */
                    continue;
                sc_case c = {.B = 2, .Hq = 4, .Hkv = 2, .Dk = 64, .Dv = 64,
                             .dt = {SDPA_F32, dts[d], dts[(d + s) % N(dts)], SDPA_F32},
                             .qscale = scales[s].qs, .qgroup = scales[s].group,
                             .qscale_dt = scales[s].sdt, .layout = (d + s) % 3,
                             .seed = seed_of(d, s, shape)};
                if (shape == 0) { /* decode */
                    c.Tq = 1;
                    c.Tkv = 333;
                    c.lens = SC_LENS_KV;
                } else if (shape == 1) { /* prefill, causal, with a softcap */
                    c.Tq = c.Tkv = 100;
                    c.causal = 1;
                    c.softcap = 20.0f;
                } else { /* chunked prefill, bf16 compute, paged */
                    c.Tq = 40;
                    c.Tkv = 200;
                    c.causal = 1;
                    c.compute = SDPA_COMPUTE_BF16;
                    c.page = 16;
                }
                if (!skip_case(&c))
                    th_run_case(&c, "quantized");
            }
    /* packed varlen: the scales' stride_b is ignored like the views' (the per-token
     * scales of a guarded buffer end where one batch entry's do) */
    for (int d = 0; d < N(dts); d++) {
        sc_case c = {.B = 3, .Hq = 2, .Hkv = 1, .Tq = 9, .Tkv = 40, .Dk = 32, .Dv = 32,
                     .causal = 1, .lens = SC_LENS_VARLEN, .dt = {SDPA_F32, dts[d], dts[d], SDPA_F32},
                     .seed = seed_of(d, 9, 9)};
        if (!skip_case(&c))
            th_run_case(&c, "quantized varlen");
    }
}

/* Each table's dequant on every code, scale 1 and scale 0.75, against the formats'
 * definitions computed here in double, a NaN code's bits exactly. */
static double code_def(sdpa_dtype t, int c) {
    if (t == SDPA_I8)
        return (double)(int8_t)c;
    if (t == SDPA_I4)
        return (double)(c >= 8 ? c - 16 : c);
    const int mb = t == SDPA_FP8_E4M3 ? 3 : 2, bias = t == SDPA_FP8_E4M3 ? 7 : 15;
    const int e = (c & 0x7f) >> mb, m = c & ((1 << mb) - 1);
    const double sg = (c & 0x80) ? -1.0 : 1.0;
    if (t == SDPA_FP8_E4M3 && (c & 0x7f) == 0x7f)
        return NAN;
    if (t == SDPA_FP8_E5M2 && e == 31)
        return m ? NAN : sg * INFINITY;
    return sg * (e ? ldexp(1.0 + m / (double)(1 << mb), e - bias)
                   : ldexp(m / (double)(1 << mb), 1 - bias));
}

/* The bits of a NaN code's value, as kernels/kvq.h defines them in every table (the
 * scales here are finite, and a NaN times a number is that NaN): e4m3, the binary16
 * 0x7f80 widened; e5m2, its mantissa kept, quiet. */
static uint32_t nan_bits(sdpa_dtype t, int c) {
    const uint32_t sign = (uint32_t)(c & 0x80) << 24;
    if (t == SDPA_FP8_E4M3)
        return sign | 0x7ff00000u;
    return sign | 0x7fc00000u | (uint32_t)(c & 3) << 21;
}

static void dequant_codes(void) {
    const sdpa_kernels *kt = sdpa_isa_lookup(th_isa)->kernels;
    static const sdpa_dtype dts[] = {SDPA_I8, SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_I4};
    static const float scs[] = {1.0f, 0.75f, 3e-3f};
    uint8_t codes[256];
    float out[256], sc[256];
    for (int i = 0; i < 256; i++)
        codes[i] = (uint8_t)i;
    for (int d = 0; d < N(dts); d++)
        for (int s = 0; s < N(scs); s++) {
            /* 256 elements (int4: 256 nibbles, each code 16 times), groups of 32 */
            for (int g = 0; g < 8; g++)
                sc[g] = scs[s] * (float)(g + 1);
            kt->dequant(256, codes, dts[d], sc, 32, out);
            int bad = 0;
            for (int i = 0; i < 256; i++) {
                const int code = dts[d] == SDPA_I4 ? (codes[i / 2] >> (4 * (i % 2))) & 15 : i;
                const float want = (float)code_def(dts[d], code) * sc[i / 32];
                uint32_t got;
                memcpy(&got, &out[i], 4);
                bad += isnan(want) ? got != nan_bits(dts[d], code)
                                   : memcmp(&want, &out[i], 4) != 0;
            }
            CHECK(bad == 0, "%s dequant dtype %d scale %g: %d codes wrong",
                  sdpa_isa_name(th_isa), dts[d], (double)scs[s], bad);
        }
}

/* 1 if a[0 .. n) and b[0 .. n) hold the same bits, or NaN both (which NaN an operation
 * returns when two operands are NaN depends on their order, which the compiler picks). */
static int same_floats(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i])))
            return 0;
    return 1;
}

/* The int8 scales whose products with every code are exact (include/sdpa.h,
 * sdpa_kv_write; kernels/convert.h): low 7 significand bits 0, biased exponent at most
 * 247. Written here from the rule, not taken from the library. */
static int i8_exact(float s) {
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    return (u & 0x7fu) == 0 && ((u >> 23) & 0xffu) <= 247u;
}

static float i8_round(float s) {
    uint32_t u;
    memcpy(&u, &s, sizeof u);
    if (u & 0x7fu)
        u = (u | 0x7fu) + 1u;
    memcpy(&s, &u, sizeof u);
    return s;
}

/* What the x86 tiles give for int8 keys with one exact scale each (kernels/x86/tiles.h,
 * "int8 scales factored"), from qk_rows and pv on the codes as fp32 (n rows of D int8 at
 * ldb bytes, key j's scale sc[j ldsc]). Scores: a key j with an exact scale s_j scores
 * fl(fl(dot(q, c_j) s_j) scale) unless fl(dot s_j) is not finite, when it keeps the score
 * of its dequantized row that s holds on entry. */
static void i8_expect_scores(const sdpa_kernels *kt, int m, int n, int D, float scale,
                             const float *q, int ldq, const unsigned char *codes, int64_t ldb,
                             const float *sc, int64_t ldsc, float *s, int lds) {
    float *cf = malloc(sizeof(float) * (size_t)(n * D));
    float *dots = malloc(sizeof(float) * (size_t)(m * lds));
    for (int j = 0; j < n; j++)
        for (int d = 0; d < D; d++)
            cf[j * D + d] = (float)(int8_t)codes[j * ldb + d];
    kt->qk_rows(m, n, D, 1.0f, q, ldq, cf, D, SDPA_F32, dots, lds, 0, NULL);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++) {
            const float sj = sc[j * ldsc], f = dots[r * lds + j] * sj;
            if (i8_exact(sj) && isfinite(f))
                s[r * lds + j] = f * scale;
        }
    free(cf);
    free(dots);
}

/* O: alpha O (o holds O on entry) + sum_j p'_j v'_j, where for a key with an exact scale
 * p' = fl(p s_j) and v' its codes, else p and its dequantized row (deq). */
static void i8_expect_pv(const sdpa_kernels *kt, int m, int n, int D, const unsigned char *codes,
                         int64_t ldb, const float *sc, int64_t ldsc, const float *p, int ldp,
                         const float *deq, const float *alpha, float *o, int ldo) {
    float *v2 = malloc(sizeof(float) * (size_t)(n * D));
    float *p2 = malloc(sizeof(float) * (size_t)(m * ldp));
    for (int j = 0; j < n; j++)
        for (int d = 0; d < D; d++)
            v2[j * D + d] = i8_exact(sc[j * ldsc]) ? (float)(int8_t)codes[j * ldb + d]
                                                   : deq[j * D + d];
    for (int r = 0; r < m; r++)
        for (int j = 0; j < n; j++)
            p2[r * ldp + j] = i8_exact(sc[j * ldsc]) ? p[r * ldp + j] * sc[j * ldsc]
                                                     : p[r * ldp + j];
    kt->pv(m, n, D, p2, ldp, v2, D, SDPA_F32, alpha, o, ldo, 0, NULL);
    free(v2);
    free(p2);
}

/* The bf16 decode pair (qk_rows_bf16, pv_rows_bf16), where the table has it, on quantized
 * rows against the same pair on their dequantized fp32 rows: the same bits, NaN payloads
 * aside (kernels/ukernel.h: the pair rounds to bf16 what `dequant` gives). Q rounded by
 * the table's pack_q_bf16, P and the initial O (o0) as the fused test's; the quantized
 * calls prefetch as that test's. Returns the rows of S and of O that differ. */
static int bf16_pair_mismatch(const sdpa_kernels *kt, int m, int n, int D, const float *q,
                              int ldq, const unsigned char *codes, int64_t ldb, sdpa_dtype dt,
                              const sdpa_qscales *qs, const float *deq, const float *p, int lds,
                              const float *al, const float *o0, int step) {
    if (!kt->qk_rows_bf16)
        return 0;
    const int ldqb = (D + 31) / 32 * 32;
    uint16_t *qb = th_alloc(sizeof(uint16_t) * (size_t)(m * ldqb), SC_GUARD_NONE);
    for (int r = 0; r < m; r++)
        kt->pack_q_bf16(D, q + r * ldq, SDPA_F32, qb + r * ldqb);
    const size_t sn = sizeof(float) * (size_t)(m * lds), on = sizeof(float) * (size_t)(m * ldq);
    float *sa = th_alloc(sn, SC_GUARD_NONE), *sb = th_alloc(sn, SC_GUARD_NONE);
    float *oa = th_alloc(on, SC_GUARD_NONE), *ob = th_alloc(on, SC_GUARD_NONE);
    memcpy(oa, o0, on);
    memcpy(ob, o0, on);
    const int64_t ldf = (int64_t)D * (int64_t)sizeof(float);
    kt->qk_rows_bf16(m, n, D, 0.125f, qb, ldqb, codes, ldb, dt, qs, sa, lds, step ? n : 4096,
                     step ? codes : NULL);
    kt->qk_rows_bf16(m, n, D, 0.125f, qb, ldqb, deq, ldf, SDPA_F32, NULL, sb, lds, 0, NULL);
    kt->pv_rows_bf16(m, n, D, p, lds, codes, ldb, dt, qs, al, oa, ldq, step ? n : 4096,
                     step ? codes : NULL);
    kt->pv_rows_bf16(m, n, D, p, lds, deq, ldf, SDPA_F32, NULL, al, ob, ldq, 0, NULL);
    int bad = 0;
    for (int r = 0; r < m; r++)
        bad += !same_floats(sa + r * lds, sb + r * lds, n) +
               !same_floats(oa + r * ldq, ob + r * ldq, D);
    sc_free(qb);
    sc_free(sa);
    sc_free(sb);
    sc_free(oa);
    sc_free(ob);
    return bad;
}

/* qk_rows_q and pv_q, where the table has them, against its dequant into fp32 rows
 * followed by its qk_rows / pv: the same bits, NaN payloads aside (kernels/ukernel.h),
 * except that the x86 tables factor exact int8 scales out (i8_factored_expect), for
 * every format, one
 * scale per row and groups of multiples of SDPA_QGROUP_VEC, scales shared by all rows
 * (ldsc 0) or per row, fp32 or f16, head dims with vector tails, 1 to 11 rows (one or two passes of
 * every tile), misaligned rows whose last byte is followed by an unmapped page. Shared
 * fp32 scales also come near 2^-130 (products in the subnormals), up to 2^119 (2^8 s
 * still finite: the x86 tiles fold e4m3's 2^8 into them) and up to 2^122 (where they
 * must not), over fp8 codes of small values. */
static void fused_quantized(void) {
    const sdpa_kernels *kt = sdpa_isa_lookup(th_isa)->kernels;
    if (!kt->qk_rows_q || !kt->pv_q)
        return;
    static const sdpa_dtype dts[] = {SDPA_I8, SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_I4};
    const int x86 = kt->isa == SDPA_ISA_AVX2 || kt->isa == SDPA_ISA_AVX512 ||
                    kt->isa == SDPA_ISA_AVX512BF16 || kt->isa == SDPA_ISA_AMX;
    static const int dims[] = {8, 24, 64, 80, 128, 256}, ms[] = {1, 4, 8, 11, 3, 6},
                     ns[] = {1, 5, 64, 17, 2, 300};
    uint64_t st = 777;
    int cases = 0;
    for (int d = 0; d < N(dts); d++)
        for (int di = 0; di < N(dims); di++)
            for (int gsel = 0; gsel < 4; gsel++) {
                const int D = dims[di], group = gsel == 0 ? D : 16 << (gsel - 1);
                if (group > D || D % group != 0 || (gsel > 0 && group == D))
                    continue;
                for (int sm = 0; sm < 4; sm++, cases++) {
                    const int m = ms[cases % N(ms)], n = ns[cases % N(ns)], ng = D / group;
                    const int64_t ldsc = sm == 0 || sm == 3 ? 0 : sm == 1 ? ng : ng + 3;
                    static const float mags[] = {1.0f, 0x1p121f, 0x1p-130f, 0x1p118f};
                    const float mag = sm == 0 ? mags[cases / 4 % N(mags)] : 1.0f;
                    const int64_t rowb = dts[d] == SDPA_I4 ? D / 2 : D;
                    const int64_t ldb = rowb + (cases % 3) * 5;
                    const size_t cbytes = (size_t)((n - 1) * ldb + rowb);
                    const int ldq = (D + 15) / 16 * 16, lds = (n + 15) / 16 * 16;
                    unsigned char *codes = th_alloc(cbytes, SC_GUARD_AFTER);
                    /* scales f16 on the third (per row) and fourth (shared) pass, fp32
                     * otherwise; sc holds their fp32 values for dequant */
                    const sdpa_dtype sdt = sm >= 2 ? SDPA_F16 : SDPA_F32;
                    const size_t nsc = (size_t)(ldsc * (n - 1) + ng);
                    void *scs = th_alloc(sc_dtype_size(sdt) * nsc, SC_GUARD_AFTER);
                    float *sc = th_alloc(sizeof(float) * nsc, SC_GUARD_NONE);
                    float *q = th_alloc(sizeof(float) * (size_t)(m * ldq), SC_GUARD_NONE);
                    float *deq = th_alloc(sizeof(float) * (size_t)(n * D), SC_GUARD_NONE);
                    float *s1 = th_alloc(sizeof(float) * (size_t)(m * lds), SC_GUARD_NONE);
                    float *s2 = th_alloc(sizeof(float) * (size_t)(m * lds), SC_GUARD_NONE);
                    float *o1 = th_alloc(sizeof(float) * (size_t)(m * ldq), SC_GUARD_NONE);
                    float *o2 = th_alloc(sizeof(float) * (size_t)(m * ldq), SC_GUARD_NONE);
                    float alpha[16];
                    /* under the large scales, fp8 codes of small values (the top exponent
                     * bits cleared: below 2^-3 in e4m3), so that the products stay finite
                     * and a wrong fold shows */
                    const int small = mag > 1.0f && (dts[d] == SDPA_FP8_E4M3 ||
                                                     dts[d] == SDPA_FP8_E5M2);
                    for (size_t i = 0; i < cbytes; i++)
                        codes[i] = (unsigned char)(sc_rand_u64(&st) & (small ? 0x9fu : 0xffu));
                    /* int8's fp32 scales: every other one rounded to an exact scale (a
                     * strip of factored and plain keys), and all on every third case */
                    for (size_t i = 0; i < nsc; i++) {
                        float x = sc_rand_float(&st) * 2.0f * mag;
                        if (dts[d] == SDPA_I8 && (i % 2 == 0 || cases % 3 == 1))
                            x = i8_round(x);
                        sc_store(scs, i, sdt, x);
                        sc[i] = sc_load(scs, i, sdt);
                    }
                    for (int i = 0; i < m * ldq; i++)
                        q[i] = o1[i] = sc_rand_float(&st);
                    memcpy(o2, o1, sizeof(float) * (size_t)(m * ldq));
                    for (int r = 0; r < m; r++)
                        alpha[r] = 0.5f + 0.5f * sc_rand_float(&st);
                    for (int j = 0; j < n; j++)
                        kt->dequant(D, codes + j * ldb, dts[d], sc + j * ldsc, group, deq + j * D);
                    const sdpa_qscales qs = {scs, ldsc, group, sdt};
                    /* the fused calls are told the rows go on (npf), past the guard
                     * page, or on every third case to prefetch a paged run in step (pf:
                     * the codes again): prefetches only */
                    const int step = cases % 3 == 0;
                    kt->qk_rows_q(m, n, D, 0.125f, q, ldq, codes, ldb, dts[d], &qs, s1, lds,
                                  step ? n : 4096, step ? codes : NULL);
                    kt->qk_rows(m, n, D, 0.125f, q, ldq, deq, D, SDPA_F32, s2, lds, 0, NULL);
                    /* the x86 tiles factor int8's exact scales out */
                    const int fac = x86 && dts[d] == SDPA_I8 && group == D;
                    float *s3 = th_alloc(sizeof(float) * (size_t)(m * lds), SC_GUARD_NONE);
                    memcpy(s3, s2, sizeof(float) * (size_t)(m * lds));
                    if (fac)
                        i8_expect_scores(kt, m, n, D, 0.125f, q, ldq, codes, ldb, sc, ldsc, s3,
                                         lds);
                    int sbad = 0, obad = 0;
                    for (int r = 0; r < m; r++)
                        sbad += !same_floats(s1 + r * lds, s3 + r * lds, n);
                    /* P: the scores made probabilities' size; alpha on odd cases only */
                    for (int i = 0; i < m * lds; i++)
                        s1[i] = fabsf(s2[i]) < 1.0f ? fabsf(s2[i]) : 0.25f;
                    const float *al = cases % 2 ? alpha : NULL;
                    const int pbad = bf16_pair_mismatch(kt, m, n, D, q, ldq, codes, ldb, dts[d],
                                                        &qs, deq, s1, lds, al, o1, step);
                    kt->pv_q(m, n, D, s1, lds, codes, ldb, dts[d], &qs, al, o1, ldq,
                             step ? n : 4096, step ? codes : NULL);
                    if (fac)
                        i8_expect_pv(kt, m, n, D, codes, ldb, sc, ldsc, s1, lds, deq, al, o2,
                                     ldq);
                    else
                        kt->pv(m, n, D, s1, lds, deq, D, SDPA_F32, al, o2, ldq, 0, NULL);
                    for (int r = 0; r < m; r++)
                        obad += !same_floats(o1 + r * ldq, o2 + r * ldq, D);
                    CHECK(sbad == 0 && obad == 0,
                          "%s fused dtype %d D %d group %d ldsc %lld m %d n %d: %d score rows, "
                          "%d O rows differ from dequant + qk_rows / pv",
                          sdpa_isa_name(th_isa), dts[d], D, group, (long long)ldsc, m, n, sbad,
                          obad);
                    CHECK(pbad == 0,
                          "%s bf16 decode pair, dtype %d D %d group %d ldsc %lld m %d n %d: %d "
                          "rows of S and O differ from the pair on the dequantized rows",
                          sdpa_isa_name(th_isa), dts[d], D, group, (long long)ldsc, m, n, pbad);
                    sc_free(codes);
                    sc_free(scs);
                    sc_free(sc);
                    sc_free(q);
                    sc_free(deq);
                    sc_free(s1);
                    sc_free(s2);
                    sc_free(s3);
                    sc_free(o1);
                    sc_free(o2);
                }
            }
}

/* Factored int8 scores that overflow: sum_d q_d c_d past FLT_MAX where sum_d q_d (c_d s)
 * is finite (a row of q near 1e36, scales near 2^-12). Those keys of that row must score
 * as on their dequantized rows; the other rows, and the other keys of the strip (one
 * scale in five not exact), keep their factored scores. */
static void factored_overflow(void) {
    const sdpa_kernels *kt = sdpa_isa_lookup(th_isa)->kernels;
    if (!kt->qk_rows_q || !(kt->isa == SDPA_ISA_AVX2 || kt->isa == SDPA_ISA_AVX512 ||
                            kt->isa == SDPA_ISA_AVX512BF16 || kt->isa == SDPA_ISA_AMX))
        return;
    enum { M = 3, N = 40, D = 64, LDS = 48 };
    static unsigned char codes[N * D];
    static float q[M * D], sc[N], deq[N * D], s1[M * LDS], s2[M * LDS];
    uint64_t st = 4242;
    for (int i = 0; i < N * D; i++)
        codes[i] = (unsigned char)(sc_rand_u64(&st) % 255u + 129u); /* -127 .. 127 */
    for (int j = 0; j < N; j++) {
        const float x = 0x1p-12f * (1.0f + sc_rand_float(&st));
        sc[j] = j % 5 == 3 ? x : i8_round(x);
    }
    for (int i = 0; i < M * D; i++)
        q[i] = (i / D == 1 ? 1e36f : 1.0f) * (0.5f + sc_rand_float(&st));
    for (int j = 0; j < N; j++)
        kt->dequant(D, codes + j * D, SDPA_I8, sc + j, D, deq + j * D);
    const sdpa_qscales qs = {sc, 1, D, SDPA_F32};
    kt->qk_rows_q(M, N, D, 0.125f, q, D, codes, D, SDPA_I8, &qs, s1, LDS, 0, NULL);
    kt->qk_rows(M, N, D, 0.125f, q, D, deq, D, SDPA_F32, s2, LDS, 0, NULL);
    int finite2 = 1;
    for (int j = 0; j < N; j++)
        finite2 &= isfinite(s2[LDS + j]);
    i8_expect_scores(kt, M, N, D, 0.125f, q, D, codes, D, sc, 1, s2, LDS);
    int bad = 0, plain = 0;
    for (int r = 0; r < M; r++)
        bad += !same_floats(s1 + r * LDS, s2 + r * LDS, N);
    for (int j = 0; j < N; j++)
        plain += isfinite(s1[LDS + j]);
    CHECK(bad == 0 && finite2 && plain == N, "%s factored int8 scores overflowing: %d rows "
          "differ from the expectation, %d of %d finite in the large row",
          sdpa_isa_name(th_isa), bad, plain, N);
}

/* pv_q on int8 rows with per-row scales for a GQA group of 4 at Dv = 128 (decode's
 * shape; on AVX-512 one 4 x 8-vector tile when every key of a span is factored) over 300
 * keys (three spans of tiles.h's PVQ_FAC_KEYS), with alpha: every scale exact, then one
 * key in the second span not (that span through the per-key multipliers), against
 * i8_expect_pv. */
static void factored_gqa4(void) {
    const sdpa_kernels *kt = sdpa_isa_lookup(th_isa)->kernels;
    if (!kt->pv_q || !(kt->isa == SDPA_ISA_AVX2 || kt->isa == SDPA_ISA_AVX512 ||
                       kt->isa == SDPA_ISA_AVX512BF16 || kt->isa == SDPA_ISA_AMX))
        return;
    enum { M = 4, N = 300, D = 128, LDP = 304 };
    static unsigned char codes[N * D];
    static float sc[N], deq[N * D], p[M * LDP], o1[M * D], o2[M * D];
    const float alpha[M] = {0.5f, 0.75f, 1.0f, 0.25f};
    uint64_t st = 99;
    for (int i = 0; i < N * D; i++)
        codes[i] = (unsigned char)(sc_rand_u64(&st) % 255u + 129u);
    for (int i = 0; i < M * LDP; i++)
        p[i] = sc_rand_float(&st);
    for (int mixed = 0; mixed < 2; mixed++) {
        for (int j = 0; j < N; j++) {
            const float x = 0.01f * (1.0f + sc_rand_float(&st));
            sc[j] = mixed && j == 200 ? x : i8_round(x);
            kt->dequant(D, codes + j * D, SDPA_I8, sc + j, D, deq + j * D);
        }
        for (int i = 0; i < M * D; i++)
            o1[i] = o2[i] = sc_rand_float(&st);
        const sdpa_qscales qs = {sc, 1, D, SDPA_F32};
        kt->pv_q(M, N, D, p, LDP, codes, D, SDPA_I8, &qs, alpha, o1, D, 0, NULL);
        i8_expect_pv(kt, M, N, D, codes, D, sc, 1, p, LDP, deq, alpha, o2, D);
        int bad = 0;
        for (int r = 0; r < M; r++)
            bad += !same_floats(o1 + r * D, o2 + r * D, D);
        CHECK(bad == 0, "%s factored int8 P V, 4 rows, Dv 128, %s scales: %d rows differ",
              sdpa_isa_name(th_isa), mixed ? "one key's not exact" : "exact", bad);
    }
}

/* sdpa_kv_write: codes and scales against hand-computed ones. */
static void writer(void) {
    /* int8, one row of 8 with a computed fp32 scale: amax 2.54 -> scale 0.02 (fp32),
     * rounded up to 17 significant bits, x / scale rounded to nearest even */
    const float x[8] = {2.54f, -2.54f, 0.01f, 0.03f, -0.05f, 1.0f, 0.0f, NAN};
    int8_t q8[8];
    float s8 = 0;
    sdpa_kv_write_desc d = {.batch = 1, .heads = 1, .len = 1, .dim = 8, .len_kv = 1,
                            .scales = {.data = &s8, .dtype = SDPA_F32}, .compute_scales = 1};
    sdpa_tensor src = sdpa_tensor_bhtd(x, SDPA_F32, 1, 1, 8);
    sdpa_tensor dst = sdpa_tensor_bhtd(q8, SDPA_I8, 1, 1, 8);
    sdpa_status st = sdpa_kv_write(&d, &src, &dst);
    const float s = i8_round(2.54f / 127.0f); /* rounded up to an exact scale */
    int ok = st == SDPA_OK && s8 == s && s > 2.54f / 127.0f;
    for (int i = 0; i < 8; i++) {
        const float r = isnan(x[i]) ? 0.0f : nearbyintf(x[i] / s);
        ok &= q8[i] == (int8_t)r;
    }
    CHECK(ok, "int8 writer: %s, scale %a want %a, codes %d %d %d %d %d %d %d %d",
          sdpa_strerror(st), (double)s8, (double)s, q8[0], q8[1], q8[2], q8[3], q8[4], q8[5],
          q8[6], q8[7]);

    /* fp8 with a given scale of 1: every finite code's value writes back to that code
     * (-0 to 0x80), the midpoints between neighbours to the even one, beyond max to max */
    static const sdpa_dtype f8[2] = {SDPA_FP8_E4M3, SDPA_FP8_E5M2};
    for (int k = 0; k < 2; k++) {
        float one = 1.0f, v[256];
        uint8_t q[256];
        int n = 0;
        for (int c = 0; c < 256; c++)
            v[c] = (float)code_def(f8[k], c);
        sdpa_kv_write_desc w = {.batch = 1, .heads = 1, .len = 1, .dim = 256, .len_kv = 1,
                                .scales = {.data = &one, .dtype = SDPA_F32}};
        src = sdpa_tensor_bhtd(v, SDPA_F32, 1, 1, 256);
        dst = sdpa_tensor_bhtd(q, f8[k], 1, 1, 256);
        st = sdpa_kv_write(&w, &src, &dst);
        for (int c = 0; c < 256; c++) {
            if (isnan(v[c]))
                n += !isnan(code_def(f8[k], q[c]));
            else if (isinf(v[c]))
                n += q[c] != (c & 0x80 ? 0xfb : 0x7b); /* saturated */
            else
                n += q[c] != c;
        }
        /* midpoints: between codes 1 and 2 (odd, even) -> 2; 2 and 3 -> 2; 1e9 -> max */
        float mid[3] = {(float)(0.5 * (code_def(f8[k], 0x09) + code_def(f8[k], 0x0a))),
                        (float)(0.5 * (code_def(f8[k], 0x0a) + code_def(f8[k], 0x0b))), 1e9f};
        uint8_t qm[3];
        w.dim = 3;
        src = sdpa_tensor_bhtd(mid, SDPA_F32, 1, 1, 3);
        dst = sdpa_tensor_bhtd(qm, f8[k], 1, 1, 3);
        st |= sdpa_kv_write(&w, &src, &dst);
        const uint8_t mx = k == 0 ? 0x7e : 0x7b;
        CHECK(st == SDPA_OK && n == 0 && qm[0] == 0x0a && qm[1] == 0x0a && qm[2] == mx,
              "%s writer: status %d, %d codes wrong, midpoints %02x %02x max %02x",
              k ? "e5m2" : "e4m3", st, n, qm[0], qm[1], qm[2]);
    }

    /* int4 packing: element 0 in the low nibble; a given f16 scale of 0.5 */
    const float x4[4] = {0.5f, -1.0f, 3.5f, -4.0f}; /* codes 1, -2, 7, -7 (saturated) */
    uint8_t q4[2] = {0};
    const uint16_t half = 0x3800; /* 0.5 in binary16 */
    sdpa_kv_write_desc w4 = {.batch = 1, .heads = 1, .len = 1, .dim = 4, .len_kv = 1,
                             .scales = {.data = &half, .dtype = SDPA_F16}};
    src = sdpa_tensor_bhtd(x4, SDPA_F32, 1, 1, 4);
    dst = sdpa_tensor_bhtd(q4, SDPA_I4, 1, 1, 4);
    st = sdpa_kv_write(&w4, &src, &dst);
    CHECK(st == SDPA_OK && q4[0] == 0xe1 && q4[1] == 0x97, "int4 writer: %s, bytes %02x %02x",
          sdpa_strerror(st), q4[0], q4[1]);

    /* a paged write of 5 rows at position 14 of 16-token pages touches pages 0 and 1 of
     * the table (pool pages 2 and 0) and nothing else */
    float rows[5 * 4], pool[3 * 16 * 4];
    for (int i = 0; i < 20; i++)
        rows[i] = (float)(i + 1);
    for (int i = 0; i < 3 * 64; i++)
        pool[i] = -1.0f;
    const int32_t table[2] = {2, 0};
    const int64_t pos = 14;
    sdpa_kv_write_desc wp = {.batch = 1, .heads = 1, .len = 5, .dim = 4, .len_kv = 32,
                             .pos = &pos, .pages = {table, 2, 16, 3}};
    src = sdpa_tensor_bhtd(rows, SDPA_F32, 1, 5, 4);
    dst = (sdpa_tensor){pool, SDPA_F32, 64, 64, 4};
    st = sdpa_kv_write(&wp, &src, &dst);
    int bad = 0;
    for (int p = 0; p < 3; p++)
        for (int slot = 0; slot < 16; slot++)
            for (int e = 0; e < 4; e++) {
                const int logical = p == 2 ? slot : p == 0 ? 16 + slot : -1;
                const int t = logical - 14;
                const float want = t >= 0 && t < 5 ? (float)(t * 4 + e + 1) : -1.0f;
                bad += pool[p * 64 + slot * 4 + e] != want;
            }
    CHECK(st == SDPA_OK && bad == 0, "paged writer: %s, %d elements wrong", sdpa_strerror(st),
          bad);
}

/* Every refusal leaves o and lse as they were. */
static void refusals(void) {
    sc_case c = {.B = 2, .Hq = 2, .Hkv = 1, .Tq = 2, .Tkv = 40, .Dk = 32, .Dv = 32,
                 .page = 16, .dt = {0, SDPA_I8, SDPA_I4, 0}, .seed = 5};
    for (int k = 0; k < 14; k++) {
        sc_tensors t;
        th_tensors_make(&t, &c);
        sdpa_desc d = t.desc;
        sdpa_tensor q = t.q, kk = t.k, v = t.v;
        sdpa_status want = SDPA_ERR_BAD_ARGUMENT;
        switch (k) {
        case 0: t.table[1] = (int32_t)d.pages.num_pages; break;          /* past the pool */
        case 1: t.table[2] = -1; break;                                  /* negative, used */
        case 2: d.pages.page_size = 0; break;
        case 3: d.pages.num_pages = 0; break;
        case 4: d.k_scales.data = NULL; break;                           /* int8 without */
        case 5: d.v_scales.group = 5; break;                             /* 5 does not divide 32 */
        case 6: d.v_scales.group = 1; break;                             /* odd group for int4 */
        case 7: d.k_scales.dtype = SDPA_BF16; want = SDPA_ERR_BAD_DTYPE; break;
        case 8: v.stride_t += 1; want = SDPA_ERR_BAD_STRIDE; break;      /* odd int4 stride */
        case 9: q.dtype = SDPA_I8; want = SDPA_ERR_BAD_DTYPE; break;     /* Q is never quantized */
        case 10: kk.dtype = (sdpa_dtype)7; want = SDPA_ERR_BAD_DTYPE; break;
        case 11: d.pages.stride = INT64_MAX / 2; want = SDPA_ERR_OVERFLOW; break;
        case 12: d.k_scales.stride_b = INT64_MAX / 4; want = SDPA_ERR_OVERFLOW; break;
        default: /* scales on an fp32 operand */
            kk.dtype = SDPA_F32;
            break;
        }
        const sdpa_status st = sdpa_forward(&d, &q, &kk, &v, &t.o, t.lse);
        const sdpa_status sr = sdpa_reference(&d, &q, &kk, &v, &t.o, t.lse);
        size_t untouched = 0;
        for (size_t e = 0; e < t.elems[3]; e++)
            untouched += ((uint32_t *)t.bufs[3])[e] == SC_SENTINEL_F32;
        for (size_t e = 0; e < t.elems[4]; e++)
            untouched += ((uint32_t *)(void *)t.lse)[e] == SC_SENTINEL_F32;
        CHECK(st == want && sr == want && untouched == t.elems[3] + t.elems[4],
              "refusal %d: forward %s reference %s (want %s), %zu of %zu untouched", k,
              sdpa_strerror(st), sdpa_strerror(sr), sdpa_strerror(want), untouched,
              t.elems[3] + t.elems[4]);
        sc_tensors_free(&t);
    }
    /* packed varlen with paging */
    sc_case v = {.B = 2, .Hq = 1, .Hkv = 1, .Tq = 3, .Tkv = 20, .Dk = 8, .Dv = 8, .seed = 3,
                 .lens = SC_LENS_VARLEN};
    sc_tensors t;
    th_tensors_make(&t, &v);
    const int32_t table[4] = {0, 1, 2, 3};
    t.desc.pages = (sdpa_pages){table, 2, 16, 4};
    const sdpa_status st = sdpa_forward(&t.desc, &t.q, &t.k, &t.v, &t.o, t.lse);
    CHECK(st == SDPA_ERR_BAD_ARGUMENT, "paged varlen: %s", sdpa_strerror(st));
    sc_tensors_free(&t);

    /* the writer: beyond the capacity, a page outside the pool, overlap, bad scales */
    float src[2 * 8] = {0}, cache[4 * 8];
    int8_t q8[4 * 8];
    float sc[4];
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < 32; i++)
            cache[i] = -7.0f;
        memset(q8, 0x55, sizeof q8);
        const int32_t tb[2] = {0, k == 1 ? 9 : 1};
        int64_t pos = k == 0 ? 3 : 0;
        sdpa_kv_write_desc w = {.batch = 1, .heads = 1, .len = 2, .dim = 8, .len_kv = 4,
                                .pos = &pos};
        sdpa_tensor s = sdpa_tensor_bhtd(src, SDPA_F32, 1, 2, 8);
        sdpa_tensor dst = sdpa_tensor_bhtd(k >= 3 ? (void *)q8 : (void *)cache,
                                           k >= 3 ? SDPA_I8 : SDPA_F32, 1, 4, 8);
        sdpa_status want = SDPA_ERR_BAD_ARGUMENT;
        if (k == 1) {
            pos = 1; /* rows 1, 2: pages 0 and 1 of 2-token pages; page 9 is not in the pool */
            w.pages = (sdpa_pages){tb, 2, 2, 2};
            dst.stride_b = 16;
        } else if (k == 2) {
            s.data = cache; /* the source inside the cache */
            want = SDPA_ERR_OVERLAP;
        } else if (k == 3) {
            w.scales = (sdpa_scales){.data = sc, .dtype = SDPA_F32, .group = 3};
        } else if (k == 4) { /* computed scales that every row shares: not an output */
            w.scales = (sdpa_scales){.data = sc, .dtype = SDPA_F32};
            w.compute_scales = 1;
            want = SDPA_ERR_BAD_STRIDE;
        } else if (k == 5) {
            w.compute_scales = 1; /* no scales at all */
        }
        const sdpa_status sw = sdpa_kv_write(&w, &s, &dst);
        int kept = 1;
        for (int i = 0; i < 32; i++)
            kept &= cache[i] == -7.0f && q8[i] == 0x55;
        CHECK(sw == want && kept, "writer refusal %d: %s (want %s), cache kept %d", k,
              sdpa_strerror(sw), sdpa_strerror(want), kept);
    }
}

void suite_kvcache(void) {
    const int own = (sdpa_isa_lookup(th_isa)->own & (1u << SDPA_COMPUTE_F32)) != 0;
    if (own) { /* fp32-compute cases, and the table's own dequant */
        dequant_codes();
        fused_quantized();
        factored_overflow();
        factored_gqa4();
        paged_split();
        shared_pages();
    }
    paged_identical();
    quantized();
    if (th_isa == sdpa_get_isa() || th_isa == SDPA_ISA_SCALAR) {
        writer();
        refusals();
    }
}
