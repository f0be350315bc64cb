/*
 * test_api.c - input validation and the small public helpers.
 *
 * One check per kind of bad input, each on sdpa_forward and sdpa_reference, and each
 * also checking that the outputs (o and lse) were not touched. Runs once, not per ISA:
 * validation happens before any kernel is chosen.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/convert.h"
#include "../src/philox.h"
#include "harness.h"
#include "suites.h"

enum { B = 2, HQ = 4, HKV = 2, TQ = 5, TKV = 7, DK = 8, DV = 6 };

typedef struct fixture {
    float q[B * HQ * TQ * DK], k[B * HKV * TKV * DK], v[B * HKV * TKV * DV];
    float o[B * HQ * TQ * DV], lse[B * HQ * TQ];
    float slopes[HQ];
    uint8_t mask[B * HQ * TQ * TKV];
    int64_t qlens[B], kvlens[B], cuq[B + 1], cukv[B + 1];
    sdpa_desc d;
    sdpa_tensor tq, tk, tv, to;
} fixture;

static void fixture_init(fixture *f) {
    uint64_t rng = 42;
    for (size_t i = 0; i < sizeof f->q / sizeof f->q[0]; i++)
        f->q[i] = sc_rand_float(&rng);
    for (size_t i = 0; i < sizeof f->k / sizeof f->k[0]; i++)
        f->k[i] = sc_rand_float(&rng);
    for (size_t i = 0; i < sizeof f->v / sizeof f->v[0]; i++)
        f->v[i] = sc_rand_float(&rng);
    for (int h = 0; h < HQ; h++)
        f->slopes[h] = 0.5f;
    memset(f->mask, 1, sizeof f->mask);
    for (int b = 0; b < B; b++) {
        f->qlens[b] = TQ;
        f->kvlens[b] = TKV - b;
    }
    /* packed varlen over the same views: two sequences sharing the rows */
    f->cuq[0] = 0, f->cuq[1] = 2, f->cuq[2] = TQ;
    f->cukv[0] = 0, f->cukv[1] = 3, f->cukv[2] = TKV;
    memset(f->o, 0xA5, sizeof f->o);
    memset(f->lse, 0xA5, sizeof f->lse);
    f->d = (sdpa_desc){.batch = B, .heads_q = HQ, .heads_kv = HKV, .len_q = TQ,
                       .len_kv = TKV, .dim_qk = DK, .dim_v = DV};
    f->tq = sdpa_tensor_bhtd(f->q, SDPA_F32, HQ, TQ, DK);
    f->tk = sdpa_tensor_bhtd(f->k, SDPA_F32, HKV, TKV, DK);
    f->tv = sdpa_tensor_bhtd(f->v, SDPA_F32, HKV, TKV, DV);
    f->to = sdpa_tensor_bhtd(f->o, SDPA_F32, HQ, TQ, DV);
}

static int untouched(const fixture *f) {
    for (size_t i = 0; i < sizeof f->o; i++)
        if (((const unsigned char *)f->o)[i] != 0xA5)
            return 0;
    for (size_t i = 0; i < sizeof f->lse; i++)
        if (((const unsigned char *)f->lse)[i] != 0xA5)
            return 0;
    return 1;
}

/* A mutation of a valid fixture and the status it must produce. */
typedef void (*mutate_fn)(fixture *f, const sdpa_desc **d, const sdpa_tensor **q,
                          const sdpa_tensor **k, const sdpa_tensor **v,
                          const sdpa_tensor **o, float **lse);

static void expect(const char *name, mutate_fn mut, sdpa_status want) {
    for (int ref = 0; ref < 2; ref++) {
        fixture *f = malloc(sizeof *f);
        fixture_init(f);
        const sdpa_desc *d = &f->d;
        const sdpa_tensor *q = &f->tq, *k = &f->tk, *v = &f->tv, *o = &f->to;
        float *lse = f->lse;
        mut(f, &d, &q, &k, &v, &o, &lse);
        const sdpa_status st =
            ref ? sdpa_reference(d, q, k, v, o, lse) : sdpa_forward(d, q, k, v, o, lse);
        CHECK(st == want, "%s (%s): got %d (%s), want %d (%s)", name,
              ref ? "reference" : "forward", st, sdpa_strerror(st), want, sdpa_strerror(want));
        CHECK(untouched(f), "%s (%s): an output was written on error", name,
              ref ? "reference" : "forward");
        free(f);
    }
}

#define MUT(name, body)                                                                   \
    static void name(fixture *f, const sdpa_desc **d, const sdpa_tensor **q,             \
                     const sdpa_tensor **k, const sdpa_tensor **v, const sdpa_tensor **o, \
                     float **lse) {                                                      \
        (void)f; (void)d; (void)q; (void)k; (void)v; (void)o; (void)lse;                 \
        body;                                                                            \
    }

MUT(m_null_desc, *d = NULL)
MUT(m_null_q, *q = NULL)
MUT(m_null_k, *k = NULL)
MUT(m_null_v, *v = NULL)
MUT(m_null_o, *o = NULL)
MUT(m_null_qdata, f->tq.data = NULL)
MUT(m_null_kdata, f->tk.data = NULL)
MUT(m_null_vdata, f->tv.data = NULL)
MUT(m_null_odata, f->to.data = NULL)
MUT(m_batch0, f->d.batch = 0)
MUT(m_batchneg, f->d.batch = -3)
MUT(m_hq0, f->d.heads_q = 0)
MUT(m_hkv0, f->d.heads_kv = 0)
MUT(m_tq0, f->d.len_q = 0)
MUT(m_tkv0, f->d.len_kv = 0)
MUT(m_dk0, f->d.dim_qk = 0)
MUT(m_dv0, f->d.dim_v = 0)
MUT(m_dkbig, f->d.dim_qk = SDPA_MAX_HEAD_DIM + 1)
MUT(m_tbig, f->d.len_kv = SDPA_MAX_DIM + 1)
MUT(m_heads, f->d.heads_kv = 3)
MUT(m_heads_more_kv, (f->d.heads_q = 2, f->d.heads_kv = 4))
MUT(m_overflow_mul, (f->d.len_kv = (int64_t)1 << 40, f->tk.stride_t = (int64_t)1 << 30))
MUT(m_overflow_bytes, f->tv.stride_b = (int64_t)1 << 62)
MUT(m_overflow_ptrdiff, f->tk.stride_b = ((int64_t)1 << 61) + 1000)
MUT(m_stride_max, f->tq.stride_t = INT64_MAX)
MUT(m_negstride_q, f->tq.stride_t = -DK)
MUT(m_negstride_v, f->tv.stride_h = -1)
MUT(m_negstride_o, f->to.stride_b = -1)
MUT(m_o_rows_overlap, f->to.stride_t = DV - 1)
MUT(m_o_heads_alias, f->to.stride_h = 0)
MUT(m_o_is_q, f->to.data = f->q)
MUT(m_o_overlaps_k, f->to.data = f->k + 3)
MUT(m_o_overlaps_v_end, f->to.data = f->v + sizeof f->v / sizeof f->v[0] - 1)
MUT(m_lse_in_o, *lse = f->o + 4)
MUT(m_lse_in_v, *lse = f->v + 2)
MUT(m_dtype_unknown, f->tq.dtype = (sdpa_dtype)7)
MUT(m_dtype_neg, f->to.dtype = (sdpa_dtype)-1)
MUT(m_mask_kind, (f->d.mask.kind = (sdpa_mask_kind)3, f->d.mask.data = f->mask))
MUT(m_mask_nodata, f->d.mask.kind = SDPA_MASK_BOOL)
MUT(m_mask_nokind, f->d.mask.data = f->mask)
MUT(m_mask_bool_dtype, (f->d.mask = (sdpa_mask){f->mask, SDPA_MASK_BOOL, SDPA_F16, 0, 0, TKV}))
MUT(m_mask_add_dtype, (f->d.mask = (sdpa_mask){f->mask, SDPA_MASK_ADDITIVE, (sdpa_dtype)9, 0, 0, TKV}))
MUT(m_mask_negstride, (f->d.mask = (sdpa_mask){f->mask, SDPA_MASK_BOOL, SDPA_F32, 0, -1, TKV}))
MUT(m_mask_misaligned, (f->d.mask = (sdpa_mask){f->mask + 1, SDPA_MASK_ADDITIVE, SDPA_F32, 0, 0, TKV}))
MUT(m_mask_overflow, (f->d.mask = (sdpa_mask){f->mask, SDPA_MASK_BOOL, SDPA_F32, INT64_MAX - 10, 0, TKV}))
MUT(m_mask_in_o, (f->d.mask = (sdpa_mask){f->o + 8, SDPA_MASK_ADDITIVE, SDPA_F32, 0, 0, 0}))
MUT(m_window_neg, (f->d.window = 1, f->d.window_left = -1))
MUT(m_window_big, (f->d.window = 1, f->d.window_right = SDPA_MAX_DIM + 1))
MUT(m_softcap_neg, f->d.softcap = -1.0f)
MUT(m_softcap_nan, f->d.softcap = NAN)
MUT(m_slopes_in_o, f->d.alibi_slopes = f->o + 3)
MUT(m_sinks_in_lse, (f->d.sinks = f->lse + 1))
MUT(m_slopes_misaligned, f->d.alibi_slopes = (const float *)(const void *)((const char *)f->slopes + 2))
MUT(m_qlens_neg, (f->qlens[1] = -1, f->d.q_lens = f->qlens))
MUT(m_kvlens_big, (f->kvlens[0] = TKV + 1, f->d.kv_lens = f->kvlens))
MUT(m_cu_only_q, f->d.cu_seqlens_q = f->cuq)
MUT(m_cu_start, (f->cuq[0] = 1, f->d.cu_seqlens_q = f->cuq, f->d.cu_seqlens_kv = f->cukv))
MUT(m_cu_decreasing, (f->cukv[1] = 6, f->cukv[2] = 5, f->d.cu_seqlens_q = f->cuq,
                      f->d.cu_seqlens_kv = f->cukv))
MUT(m_cu_past_end, (f->cuq[2] = TQ + 1, f->d.cu_seqlens_q = f->cuq, f->d.cu_seqlens_kv = f->cukv))
MUT(m_cu_and_lens, (f->d.cu_seqlens_q = f->cuq, f->d.cu_seqlens_kv = f->cukv,
                    f->d.kv_lens = f->kvlens))
MUT(m_dropout_one, f->d.dropout_p = 1.0f)
MUT(m_dropout_neg, f->d.dropout_p = -0.1f)
MUT(m_dropout_nan, f->d.dropout_p = NAN)
MUT(m_dropout_counter, (f->d.dropout_p = 0.5f, f->d.len_kv = (int64_t)1 << 35, f->tk.stride_t = 0,
                        f->tv.stride_t = 0))
MUT(m_lens_in_o, (f->d.kv_lens = f->kvlens, f->to.data = (void *)f->kvlens))
MUT(m_scale_nan, f->d.scale = NAN)
MUT(m_scale_inf, f->d.scale = INFINITY)
MUT(m_threads_neg, f->d.num_threads = -1)
MUT(m_causal_bad, f->d.causal = 7)
MUT(m_isa_bad, f->d.isa = 99)
MUT(m_misaligned_q, f->tq.data = (char *)f->q + 1)
MUT(m_misaligned_o, f->to.data = (char *)f->o + 2)
MUT(m_misaligned_lse, *lse = (float *)(void *)((char *)f->lse + 1))

static void test_validation(void) {
    expect("NULL descriptor", m_null_desc, SDPA_ERR_NULL_POINTER);
    expect("NULL q view", m_null_q, SDPA_ERR_NULL_POINTER);
    expect("NULL k view", m_null_k, SDPA_ERR_NULL_POINTER);
    expect("NULL v view", m_null_v, SDPA_ERR_NULL_POINTER);
    expect("NULL o view", m_null_o, SDPA_ERR_NULL_POINTER);
    expect("NULL q data", m_null_qdata, SDPA_ERR_NULL_POINTER);
    expect("NULL k data", m_null_kdata, SDPA_ERR_NULL_POINTER);
    expect("NULL v data", m_null_vdata, SDPA_ERR_NULL_POINTER);
    expect("NULL o data", m_null_odata, SDPA_ERR_NULL_POINTER);
    expect("batch 0", m_batch0, SDPA_ERR_BAD_DIMENSION);
    expect("batch -3", m_batchneg, SDPA_ERR_BAD_DIMENSION);
    expect("heads_q 0", m_hq0, SDPA_ERR_BAD_DIMENSION);
    expect("heads_kv 0", m_hkv0, SDPA_ERR_BAD_DIMENSION);
    expect("len_q 0", m_tq0, SDPA_ERR_BAD_DIMENSION);
    expect("len_kv 0", m_tkv0, SDPA_ERR_BAD_DIMENSION);
    expect("dim_qk 0", m_dk0, SDPA_ERR_BAD_DIMENSION);
    expect("dim_v 0", m_dv0, SDPA_ERR_BAD_DIMENSION);
    expect("dim_qk above max", m_dkbig, SDPA_ERR_BAD_DIMENSION);
    expect("len_kv above max", m_tbig, SDPA_ERR_BAD_DIMENSION);
    expect("heads_q % heads_kv", m_heads, SDPA_ERR_BAD_HEADS);
    expect("heads_kv > heads_q", m_heads_more_kv, SDPA_ERR_BAD_HEADS);
    expect("extent overflows int64", m_overflow_mul, SDPA_ERR_OVERFLOW);
    expect("bytes overflow", m_overflow_bytes, SDPA_ERR_OVERFLOW);
    expect("bytes above PTRDIFF_MAX", m_overflow_ptrdiff, SDPA_ERR_OVERFLOW);
    expect("stride INT64_MAX", m_stride_max, SDPA_ERR_OVERFLOW);
    expect("negative q stride", m_negstride_q, SDPA_ERR_BAD_STRIDE);
    expect("negative v stride", m_negstride_v, SDPA_ERR_BAD_STRIDE);
    expect("negative o stride", m_negstride_o, SDPA_ERR_BAD_STRIDE);
    expect("o rows overlap", m_o_rows_overlap, SDPA_ERR_BAD_STRIDE);
    expect("o heads alias", m_o_heads_alias, SDPA_ERR_BAD_STRIDE);
    expect("o is q", m_o_is_q, SDPA_ERR_OVERLAP);
    expect("o overlaps k", m_o_overlaps_k, SDPA_ERR_OVERLAP);
    expect("o overlaps the end of v", m_o_overlaps_v_end, SDPA_ERR_OVERLAP);
    expect("lse inside o", m_lse_in_o, SDPA_ERR_OVERLAP);
    expect("lse inside v", m_lse_in_v, SDPA_ERR_OVERLAP);
    expect("unknown dtype", m_dtype_unknown, SDPA_ERR_BAD_DTYPE);
    expect("negative dtype", m_dtype_neg, SDPA_ERR_BAD_DTYPE);
    expect("mask kind 3", m_mask_kind, SDPA_ERR_BAD_ARGUMENT);
    expect("mask kind without data", m_mask_nodata, SDPA_ERR_BAD_ARGUMENT);
    expect("mask data without kind", m_mask_nokind, SDPA_ERR_BAD_ARGUMENT);
    expect("bool mask with a dtype", m_mask_bool_dtype, SDPA_ERR_BAD_DTYPE);
    expect("additive mask dtype 9", m_mask_add_dtype, SDPA_ERR_BAD_DTYPE);
    expect("negative mask stride", m_mask_negstride, SDPA_ERR_BAD_STRIDE);
    expect("misaligned f32 mask", m_mask_misaligned, SDPA_ERR_MISALIGNED);
    expect("mask extent overflows", m_mask_overflow, SDPA_ERR_OVERFLOW);
    expect("mask inside o", m_mask_in_o, SDPA_ERR_OVERLAP);
    expect("window_left -1", m_window_neg, SDPA_ERR_BAD_ARGUMENT);
    expect("window_right above max", m_window_big, SDPA_ERR_BAD_ARGUMENT);
    expect("softcap -1", m_softcap_neg, SDPA_ERR_BAD_ARGUMENT);
    expect("softcap NaN", m_softcap_nan, SDPA_ERR_BAD_ARGUMENT);
    expect("ALiBi slopes inside o", m_slopes_in_o, SDPA_ERR_OVERLAP);
    expect("sinks inside lse", m_sinks_in_lse, SDPA_ERR_OVERLAP);
    expect("misaligned ALiBi slopes", m_slopes_misaligned, SDPA_ERR_MISALIGNED);
    expect("q_lens -1", m_qlens_neg, SDPA_ERR_BAD_LENGTHS);
    expect("kv_lens above len_kv", m_kvlens_big, SDPA_ERR_BAD_LENGTHS);
    expect("cu_seqlens_q without cu_seqlens_kv", m_cu_only_q, SDPA_ERR_BAD_LENGTHS);
    expect("cu_seqlens not starting at 0", m_cu_start, SDPA_ERR_BAD_LENGTHS);
    expect("cu_seqlens decreasing", m_cu_decreasing, SDPA_ERR_BAD_LENGTHS);
    expect("cu_seqlens past the view", m_cu_past_end, SDPA_ERR_BAD_LENGTHS);
    expect("cu_seqlens with kv_lens", m_cu_and_lens, SDPA_ERR_BAD_LENGTHS);
    expect("kv_lens inside o", m_lens_in_o, SDPA_ERR_OVERLAP);
    expect("dropout_p 1", m_dropout_one, SDPA_ERR_BAD_ARGUMENT);
    expect("dropout_p -0.1", m_dropout_neg, SDPA_ERR_BAD_ARGUMENT);
    expect("dropout_p NaN", m_dropout_nan, SDPA_ERR_BAD_ARGUMENT);
    expect("len_kv beyond the dropout counter", m_dropout_counter, SDPA_ERR_BAD_ARGUMENT);
    expect("scale NaN", m_scale_nan, SDPA_ERR_BAD_ARGUMENT);
    expect("scale inf", m_scale_inf, SDPA_ERR_BAD_ARGUMENT);
    expect("num_threads -1", m_threads_neg, SDPA_ERR_BAD_ARGUMENT);
    expect("causal 7", m_causal_bad, SDPA_ERR_BAD_ARGUMENT);
    expect("isa 99", m_isa_bad, SDPA_ERR_BAD_ARGUMENT);
    expect("q misaligned", m_misaligned_q, SDPA_ERR_MISALIGNED);
    expect("o misaligned", m_misaligned_o, SDPA_ERR_MISALIGNED);
    expect("lse misaligned", m_misaligned_lse, SDPA_ERR_MISALIGNED);
}

/* The valid fixture passes, broadcast (stride 0) inputs are accepted, and an ISA that
 * is not usable is refused per call, never replaced silently. */
static void test_valid_and_isa(void) {
    fixture *f = malloc(sizeof *f);
    fixture_init(f);
    CHECK(sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse) == SDPA_OK,
          "valid fixture rejected");
    f->tk.stride_h = 0; /* both K/V heads read the same K rows */
    CHECK(sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse) == SDPA_OK,
          "stride-0 (broadcast) input rejected");
    CHECK(sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, NULL) == SDPA_OK,
          "lse = NULL rejected");
    for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++) {
        fixture_init(f);
        f->d.isa = i;
        const sdpa_status st = sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
        if (sdpa_isa_supported((sdpa_isa)i)) {
            CHECK(st == SDPA_OK, "isa %s usable but refused: %s", sdpa_isa_name((sdpa_isa)i),
                  sdpa_strerror(st));
        } else {
            CHECK(st == SDPA_ERR_UNSUPPORTED_ISA && untouched(f),
                  "isa %s not usable but got %s", sdpa_isa_name((sdpa_isa)i), sdpa_strerror(st));
            const sdpa_isa before = sdpa_get_isa();
            CHECK(sdpa_set_isa((sdpa_isa)i) == SDPA_ERR_UNSUPPORTED_ISA && sdpa_get_isa() == before,
                  "sdpa_set_isa(%s) accepted an unusable ISA", sdpa_isa_name((sdpa_isa)i));
        }
    }
    CHECK(sdpa_isa_supported(SDPA_ISA_SCALAR), "scalar must always be usable");
    CHECK(!sdpa_isa_supported(SDPA_ISA_AUTO) && !sdpa_isa_supported(SDPA_ISA_COUNT_),
          "auto/count are not ISAs");
    const sdpa_isa cur = sdpa_get_isa();
    CHECK(sdpa_set_isa(SDPA_ISA_SCALAR) == SDPA_OK && sdpa_get_isa() == SDPA_ISA_SCALAR,
          "sdpa_set_isa(scalar) did not take");
    CHECK(sdpa_set_isa(SDPA_ISA_AUTO) == SDPA_OK && sdpa_get_isa() == cur,
          "sdpa_set_isa(auto) did not restore %s", sdpa_isa_name(cur));
    free(f);
}

/* desc.isa names the fused path's kernels; sdpa_reference runs none, so it accepts any
 * sdpa_isa value, one this build or CPU lacks included, while sdpa_forward refuses that
 * one. A value outside the enum is refused by both. */
static void test_reference_isa(void) {
    for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++) {
        if (sdpa_isa_supported((sdpa_isa)i))
            continue;
        fixture *f = malloc(sizeof *f);
        fixture_init(f);
        f->d.isa = i;
        const sdpa_status sf = sdpa_forward(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
        const sdpa_status sr = sdpa_reference(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse);
        CHECK(sf == SDPA_ERR_UNSUPPORTED_ISA && sr == SDPA_OK,
              "isa %s (unusable here): forward %d (want UNSUPPORTED_ISA), reference %d (want OK)",
              sdpa_isa_name((sdpa_isa)i), sf, sr);
        f->d.isa = SDPA_ISA_COUNT_;
        CHECK(sdpa_reference(&f->d, &f->tq, &f->tk, &f->tv, &f->to, f->lse) == SDPA_ERR_BAD_ARGUMENT,
              "reference with an isa outside the enum");
        free(f);
    }
}

static void test_helpers(void) {
    const char *seen[32];
    int n = 0;
    for (int s = SDPA_OK; s <= SDPA_ERR_BAD_LENGTHS; s++) {
        const char *msg = sdpa_strerror((sdpa_status)s);
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= strcmp(seen[i], msg) == 0;
        CHECK(msg && *msg && !dup && strcmp(msg, "unknown status") != 0,
              "sdpa_strerror(%d) missing or duplicated", s);
        seen[n++] = msg;
    }
    CHECK(strcmp(sdpa_strerror((sdpa_status)1000), "unknown status") == 0,
          "sdpa_strerror of an unknown code");
    CHECK(strcmp(sdpa_version(), SDPA_VERSION_STRING) == 0, "sdpa_version %s != header %s",
          sdpa_version(), SDPA_VERSION_STRING);
    CHECK(strcmp(sdpa_isa_name(SDPA_ISA_AVX512), "avx512") == 0 &&
              strcmp(sdpa_isa_name((sdpa_isa)-1), "unknown") == 0,
          "sdpa_isa_name");

    float x;
    sdpa_tensor a = sdpa_tensor_bhtd(&x, SDPA_F32, 3, 5, 7);
    CHECK(a.data == &x && a.stride_t == 7 && a.stride_h == 35 && a.stride_b == 105,
          "bhtd strides %lld %lld %lld", (long long)a.stride_b, (long long)a.stride_h,
          (long long)a.stride_t);
    sdpa_tensor c = sdpa_tensor_bthd(&x, SDPA_BF16, 3, 5, 7);
    CHECK(c.dtype == SDPA_BF16 && c.stride_h == 7 && c.stride_t == 21 && c.stride_b == 105,
          "bthd strides %lld %lld %lld", (long long)c.stride_b, (long long)c.stride_h,
          (long long)c.stride_t);
    sdpa_tensor big = sdpa_tensor_bhtd(&x, SDPA_F32, (int64_t)1 << 40, (int64_t)1 << 40, 64);
    CHECK(big.stride_b == INT64_MAX, "overflowing helper strides must saturate");
}

/* The ALiBi paper's reference code (Press et al. 2022, get_slopes), transcribed: for a
 * power of two n, start = 2^(-2^-(log2(n) - 3)) and slopes start^(i + 1); otherwise
 * the slopes of the closest power of two c below, then every other slope of 2c, the
 * first n - c of them. The base 2^-8 becomes 2^-max_bias as llama.cpp generalises it. */
static void paper_slopes(int n, double max_bias, double *out) {
    int c = 1;
    while (c * 2 <= n)
        c *= 2;
    const double start = exp2(-max_bias / c); /* 2^(-2^-(log2 c - 3)) when max_bias = 8 */
    for (int i = 0; i < c; i++)
        out[i] = pow(start, i + 1);
    if (c == n)
        return;
    double twice[128];
    paper_slopes(2 * c, max_bias, twice);
    for (int i = 0; i < n - c; i++)
        out[c + i] = twice[2 * i];
}

static void test_alibi_slopes(void) {
    static const int heads[] = {1, 2, 3, 6, 8, 12, 16, 32, 40, 64};
    static const float biases[] = {0.0f, 8.0f, 4.0f, 12.5f};
    for (size_t hi = 0; hi < sizeof heads / sizeof heads[0]; hi++)
        for (size_t bi = 0; bi < sizeof biases / sizeof biases[0]; bi++) {
            const int H = heads[hi];
            float got[64];
            double want[64];
            const sdpa_status st = sdpa_alibi_slopes(H, biases[bi], got);
            paper_slopes(H, biases[bi] == 0.0f ? 8.0 : (double)biases[bi], want);
            int ok = st == SDPA_OK;
            for (int h = 0; h < H && ok; h++) /* within an fp32 rounding of the exact value */
                ok = fabs((double)got[h] - want[h]) <= 0x1p-24 * want[h];
            CHECK(ok, "sdpa_alibi_slopes(%d, %g): status %d, slopes differ from the paper's rule",
                  H, (double)biases[bi], st);
        }
    /* H = 8 is exactly 1/2 .. 1/256; H = 12 adds 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 */
    float s8[8], s12[12];
    sdpa_alibi_slopes(8, 0.0f, s8);
    sdpa_alibi_slopes(12, 8.0f, s12);
    CHECK(s8[0] == 0.5f && s8[7] == 0x1p-8f && s12[7] == 0x1p-8f &&
              s12[8] == (float)exp2(-0.5) && s12[11] == (float)exp2(-3.5),
          "ALiBi slopes for 8 and 12 heads: %g .. %g, %g .. %g", (double)s8[0], (double)s8[7],
          (double)s12[8], (double)s12[11]);
    float keep[2] = {7.0f, 7.0f};
    CHECK(sdpa_alibi_slopes(0, 8.0f, keep) == SDPA_ERR_BAD_DIMENSION &&
              sdpa_alibi_slopes(2, -1.0f, keep) == SDPA_ERR_BAD_ARGUMENT &&
              sdpa_alibi_slopes(2, NAN, keep) == SDPA_ERR_BAD_ARGUMENT &&
              sdpa_alibi_slopes(2, 8.0f, NULL) == SDPA_ERR_NULL_POINTER &&
              sdpa_alibi_slopes(2, 8.0f, (float *)(void *)((char *)keep + 1)) ==
                  SDPA_ERR_MISALIGNED &&
              sdpa_alibi_slopes(2, 8.0f, (float *)(uintptr_t)(((uint64_t)1 << 56) - 4)) ==
                  SDPA_ERR_OVERFLOW &&
              keep[0] == 7.0f && keep[1] == 7.0f,
          "sdpa_alibi_slopes errors");
}

/* Known answers: the 16-bit conversions (IEEE-754 binary16 / bfloat16 encodings) and
 * Philox4x32-10 (the Random123 kat_vectors file, "philox4x32 10" lines: counter, key,
 * result). */
static void test_known_answers(void) {
    static const struct {
        uint16_t h;
        float f;
    } f16[] = {{0x3c00, 1.0f},        {0xc000, -2.0f},         {0x7bff, 65504.0f},
               {0x0400, 0x1p-14f},    {0x0001, 0x1p-24f},      {0x03ff, 0x3ffp-24f},
               {0x8000, -0.0f},       {0x7c00, INFINITY},      {0x3555, 0x1.554p-2f}};
    int ok = 1;
    for (int i = 0; i < (int)(sizeof f16 / sizeof f16[0]); i++) {
        ok &= sdpa_bits_from_f32(sdpa_f16_to_f32(f16[i].h)) == sdpa_bits_from_f32(f16[i].f);
        ok &= sdpa_f32_to_f16(f16[i].f) == f16[i].h;
    }
    CHECK(ok, "binary16 encodings");
    /* every binary16 pattern against the format's definition: 2^(e - 15) (1 + f / 2^10),
     * 2^-14 f / 2^10 for e = 0, inf, NaN with its payload moved up 13 bits and quietened */
    int bad16 = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const uint32_t e = (h >> 10) & 31u, f = h & 0x3ffu;
        uint32_t want = e == 31u ? 0x7f800000u | f << 13 | (f ? 0x400000u : 0u)
                                 : sdpa_bits_from_f32(ldexpf((float)(e ? 0x400u + f : f),
                                                             (e ? (int)e : 1) - 25));
        want |= (h & 0x8000u) << 16;
        bad16 += sdpa_bits_from_f32(sdpa_f16_to_f32((uint16_t)h)) != want;
        bad16 += sdpa_bits_from_f32(sdpa_f16_to_f32_lanes((uint16_t)h)) != want;
    }
    CHECK(bad16 == 0, "binary16 widening, both forms: %d wrong of 2 x 65536", bad16);
    /* rounding: ties to even, overflow to inf, below half the smallest subnormal to 0 */
    CHECK(sdpa_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00 && sdpa_f32_to_f16(1.0f + 0x3p-11f) == 0x3c02 &&
              sdpa_f32_to_f16(65520.0f) == 0x7c00 && sdpa_f32_to_f16(65519.0f) == 0x7bff &&
              sdpa_f32_to_f16(0x1p-25f) == 0 && sdpa_f32_to_f16(0x1.01p-25f) == 1 &&
              sdpa_f32_to_f16(0x3p-25f) == 2 && (sdpa_f32_to_f16(NAN) & 0x7e00) == 0x7e00,
          "binary16 rounding");
    CHECK(sdpa_bf16_to_f32(0x3f80) == 1.0f && sdpa_f32_to_bf16(1.0f) == 0x3f80 &&
              sdpa_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80 &&
              sdpa_f32_to_bf16(1.0f + 0x3p-8f) == 0x3f82 && sdpa_f32_to_bf16(-INFINITY) == 0xff80 &&
              (sdpa_f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0,
          "bfloat16 encodings and rounding");

    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        sdpa_philox4x32_10(kat[t], kat[t] + 4, out);
        CHECK(memcmp(out, kat[t] + 6, sizeof out) == 0,
              "Philox4x32-10 known-answer vector %d: %08x %08x %08x %08x", t, out[0], out[1],
              out[2], out[3]);
    }
}

void suite_api(void) {
    test_known_answers();
    test_validation();
    test_valid_and_isa();
    test_helpers();
    test_alibi_slopes();
    test_reference_isa();
}
