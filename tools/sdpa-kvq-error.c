/*
 * sdpa-kvq-error - what quantizing K and V costs: the output error of attention over an
 * int8, fp8 or int4 cache against the same attention over the fp32 K/V it was written
 * from. It measures the quantization, not the kernels (they dequantize exactly; the
 * suite checks that against the reference): both calls run the fused path on the same
 * queries, the quantized one reading codes that sdpa_kv_write made from the fp32 rows.
 *
 * Two kinds of data, one decode-like shape (a few query rows against many keys, GQA):
 *   random     Q, K, V uniform in [-1, 1) (the suite's data)
 *   outliers   what LLM caches look like where quantizing them is hard: K with a few
 *              channels 20x larger than the rest (the "outlier channels" of keys
 *              reported for Llama-family models, KIVI, Liu et al. 2024), sharper
 *              attention (scores spread over ~+-10), V Gaussian-like; made from the
 *              same uniform stream by fixed transforms, so runs are reproducible.
 * For each format and scale granularity it prints the error of O relative to the largest
 * |O| of the fp32 run, as the max over elements and the root mean square.
 *
 *   sdpa-kvq-error [--tokens N] [--seed S]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/case.h"
#include "sdpa.h"

enum { HQ = 8, HKV = 2, TQ = 4, D = 128, OUTLIERS = 4 };

typedef struct fmt {
    const char *name;
    sdpa_dtype dt;
    int64_t group;     /* channels per scale (0 = the row); -1 = one scale per head */
    sdpa_dtype sdt;    /* the scales' dtype */
} fmt;

static const fmt fmts[] = {
    {"int8, per token", SDPA_I8, 0, SDPA_F32},
    {"int8, groups of 32", SDPA_I8, 32, SDPA_F32},
    {"fp8 e4m3, per token", SDPA_FP8_E4M3, 0, SDPA_F32},
    {"fp8 e4m3, per head", SDPA_FP8_E4M3, -1, SDPA_F32},
    {"fp8 e5m2, per head", SDPA_FP8_E5M2, -1, SDPA_F32},
    {"int4, groups of 32 (f16)", SDPA_I4, 32, SDPA_F16},
    {"int4, per token", SDPA_I4, 0, SDPA_F32},
};

/* The fp32 data: [1, H, T, D] contiguous, uniform from the case stream, or transformed
 * into the outlier model. which: 0 Q, 1 K, 2 V. */
static void fill(float *x, int64_t H, int64_t T, int which, int outliers, uint64_t *rng) {
    for (int64_t e = 0; e < H * T * D; e++) {
        float u = sc_rand_float(rng);
        if (outliers) {
            const int64_t d = e % D;
            if (which == 1 && d % (D / OUTLIERS) == 3)
                u *= 20.0f;                       /* K's outlier channels */
            else if (which == 0)
                u *= 4.0f;                        /* sharper scores */
            else if (which == 2)                  /* sum of uniforms: near-Gaussian */
                u = (u + sc_rand_float(rng) + sc_rand_float(rng)) * 0.6f;
        }
        x[e] = u;
    }
}

/* The cache of rows x ([1, HKV, T, D] fp32) in format f: codes into *codes, scales into
 * *scales (caller frees), and the scale view. */
static int quantize(const fmt *f, const float *x, int64_t T, void **codes, float **scales,
                    sdpa_scales *sv, sdpa_tensor *view) {
    const int bits = f->dt == SDPA_I4 ? 4 : 8;
    const size_t bytes = (size_t)(HKV * T * D) * (size_t)bits / 8;
    const int64_t ng = f->group > 0 ? D / f->group : 1;
    *codes = malloc(bytes);
    *scales = malloc((size_t)(HKV * T * ng) * sizeof(float)); /* f32 or f16: enough */
    if (!*codes || !*scales)
        return -1;
    *sv = (sdpa_scales){.data = *scales, .dtype = f->sdt, .group = f->group > 0 ? f->group : 0};
    int compute = 1;
    if (f->group < 0) { /* per head, calibrated: the head's largest |x| over the format's max */
        compute = 0;
        sv->stride_h = 1;
        const float qmax = f->dt == SDPA_FP8_E4M3 ? 448.0f : 57344.0f;
        for (int64_t h = 0; h < HKV; h++) {
            float amax = 0.0f;
            for (int64_t e = 0; e < T * D; e++)
                amax = fmaxf(amax, fabsf(x[h * T * D + e]));
            (*scales)[h] = amax / qmax;
        }
    } else {
        sv->stride_t = ng;
        sv->stride_h = T * ng;
    }
    *view = sdpa_tensor_bhtd(*codes, f->dt, HKV, T, D);
    const sdpa_kv_write_desc w = {.batch = 1, .heads = HKV, .len = T, .dim = D, .len_kv = T,
                                  .scales = *sv, .compute_scales = compute};
    const sdpa_tensor src = sdpa_tensor_bhtd(x, SDPA_F32, HKV, T, D);
    return sdpa_kv_write(&w, &src, view) == SDPA_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    int64_t T = 4096;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            T = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: sdpa-kvq-error [--tokens N] [--seed S]\n");
            return 2;
        }
    }
    if (T < 1 || T > ((int64_t)1 << 24)) {
        fprintf(stderr, "sdpa-kvq-error: --tokens must be in 1 .. 2^24\n");
        return 2;
    }
    float *q = malloc((size_t)(HQ * TQ * D) * sizeof(float));
    float *k = malloc((size_t)(HKV * T * D) * sizeof(float));
    float *v = malloc((size_t)(HKV * T * D) * sizeof(float));
    float *o32 = malloc((size_t)(HQ * TQ * D) * sizeof(float));
    float *o = malloc((size_t)(HQ * TQ * D) * sizeof(float));
    if (!q || !k || !v || !o32 || !o)
        return 1;
    printf("O error of attention over a quantized cache against the fp32 one, relative to "
           "max |O|\n(Hq %d, Hkv %d, Tq %d, Tkv %lld, D %d, bottom-right causal; max / rms "
           "over elements)\n\n",
           HQ, HKV, TQ, (long long)T, D);
    printf("%-28s %22s %22s\n", "K and V stored as", "random", "outlier channels");
    const sdpa_desc base = {.batch = 1, .heads_q = HQ, .heads_kv = HKV, .len_q = TQ, .len_kv = T,
                            .dim_qk = D, .dim_v = D, .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    const sdpa_tensor qv = sdpa_tensor_bhtd(q, SDPA_F32, HQ, TQ, D);
    const sdpa_tensor ov32 = sdpa_tensor_bhtd(o32, SDPA_F32, HQ, TQ, D);
    const sdpa_tensor ov = sdpa_tensor_bhtd(o, SDPA_F32, HQ, TQ, D);
    double err[sizeof fmts / sizeof fmts[0]][2][2];
    for (int data = 0; data < 2; data++) {
        uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
        fill(q, HQ, TQ, 0, data, &rng);
        fill(k, HKV, T, 1, data, &rng);
        fill(v, HKV, T, 2, data, &rng);
        const sdpa_tensor kv = sdpa_tensor_bhtd(k, SDPA_F32, HKV, T, D);
        const sdpa_tensor vv = sdpa_tensor_bhtd(v, SDPA_F32, HKV, T, D);
        if (sdpa_forward(&base, &qv, &kv, &vv, &ov32, NULL) != SDPA_OK)
            return 1;
        double omax = 0.0;
        for (int64_t e = 0; e < HQ * TQ * D; e++)
            omax = fmax(omax, fabs((double)o32[e]));
        for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
            void *kc, *vc;
            float *ks, *vs;
            sdpa_desc d = base;
            sdpa_tensor kq, vq;
            if (quantize(&fmts[f], k, T, &kc, &ks, &d.k_scales, &kq) != 0 ||
                quantize(&fmts[f], v, T, &vc, &vs, &d.v_scales, &vq) != 0 ||
                sdpa_forward(&d, &qv, &kq, &vq, &ov, NULL) != SDPA_OK) {
                fprintf(stderr, "sdpa-kvq-error: %s failed\n", fmts[f].name);
                return 1;
            }
            double mx = 0.0, ss = 0.0;
            for (int64_t e = 0; e < HQ * TQ * D; e++) {
                const double r = fabs((double)o[e] - (double)o32[e]) / omax;
                mx = fmax(mx, r);
                ss += r * r;
            }
            err[f][data][0] = mx;
            err[f][data][1] = sqrt(ss / (double)(HQ * TQ * D));
            free(kc);
            free(vc);
            free(ks);
            free(vs);
        }
    }
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++)
        printf("%-28s %10.2e / %-9.2e %10.2e / %-9.2e\n", fmts[f].name, err[f][0][0],
               err[f][0][1], err[f][1][0], err[f][1][1]);
    free(q);
    free(k);
    free(v);
    free(o32);
    free(o);
    return 0;
}
