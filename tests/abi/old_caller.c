/*
 * old_caller.c - a program written against the previous release's header
 * (tests/abi/sdpa-0.1.0.h, the 0.1.0 include/sdpa.h kept verbatim), built against it and
 * run against the current shared library: the ABI check of `make abi-test`.
 *
 * It uses every entry point whose descriptor layout changed since 0.1.0 (sdpa_forward
 * and sdpa_reference with work counters, sdpa_attention_weights, sdpa_mha_workspace_size
 * and sdpa_mha_forward) and checks the results make sense (the fused output against the
 * reference within the 0.1.0 tolerance, weights rows summing to 1, the layer's output
 * against the composed calls) and that nothing is written past the 0.1.0-sized
 * sdpa_stats (a canary after it). Ends with "abi level 1 caller: N checks, N failed".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa-0.1.0.h"

static int checks, failed;

static void check(int ok, const char *what) {
    checks++;
    if (!ok) {
        failed++;
        printf("FAIL %s\n", what);
    }
}

int main(void) {
    enum { B = 2, H = 4, HKV = 2, T = 37, D = 16 };
    float *q = malloc(sizeof(float) * B * H * T * D), *k = malloc(sizeof(float) * B * HKV * T * D);
    float *v = malloc(sizeof(float) * B * HKV * T * D), *o = malloc(sizeof(float) * B * H * T * D);
    float *r = malloc(sizeof(float) * B * H * T * D), *lse = malloc(sizeof(float) * B * H * T);
    float *lr = malloc(sizeof(float) * B * H * T), *w = malloc(sizeof(float) * B * H * T * T);
    for (int i = 0; i < B * H * T * D; i++)
        q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int i = 0; i < B * HKV * T * D; i++) {
        k[i] = (float)((i * 53) % 103) / 103.0f - 0.5f;
        v[i] = (float)((i * 71) % 107) / 107.0f - 0.5f;
    }
    struct {
        sdpa_stats s;
        unsigned char canary[64];
    } st;
    memset(&st, 0xC5, sizeof st);
    sdpa_desc d = {.batch = B, .heads_q = H, .heads_kv = HKV, .len_q = T, .len_kv = T,
                   .dim_qk = D, .dim_v = D, .causal = SDPA_CAUSAL_BOTTOM_RIGHT, .stats = &st.s};
    sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, H, T, D), tk = sdpa_tensor_bhtd(k, SDPA_F32, HKV, T, D);
    sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, HKV, T, D), to = sdpa_tensor_bhtd(o, SDPA_F32, H, T, D);
    sdpa_tensor tr = sdpa_tensor_bhtd(r, SDPA_F32, H, T, D);
    check(sdpa_forward(&d, &tq, &tk, &tv, &to, lse) == SDPA_OK, "sdpa_forward");
    int canary = 1;
    for (size_t i = 0; i < sizeof st.canary; i++)
        canary &= st.canary[i] == 0xC5;
    check(canary, "nothing written past the 0.1.0 sdpa_stats");
    check(st.s.threads >= 1 && st.s.blocks_computed + st.s.blocks_skipped == st.s.blocks_total &&
              st.s.blocks_computed > 0 && st.s.isa == sdpa_get_isa(),
          "work counters of sdpa_forward");
    check(sdpa_reference(&d, &tq, &tk, &tv, &tr, lr) == SDPA_OK, "sdpa_reference");
    int close = 1;
    for (int i = 0; i < B * H * T * D; i++)
        close &= fabsf(o[i] - r[i]) <= 1e-5f + 1e-4f * fabsf(r[i]);
    for (int i = 0; i < B * H * T; i++)
        close &= fabsf(lse[i] - lr[i]) <= 1e-5f + 1e-4f * fabsf(lr[i]);
    check(close, "fused within 1e-5 + 1e-4 |r| of the reference");
    check(sdpa_attention_weights(&d, &tq, &tk, lse, w) == SDPA_OK, "sdpa_attention_weights");
    int rows_one = 1;
    for (int row = 0; row < B * H * T; row++) {
        double sum = 0.0;
        for (int j = 0; j < T; j++)
            sum += w[row * T + j];
        rows_one &= fabs(sum - 1.0) < 1e-4;
    }
    check(rows_one, "every weight row sums to 1");

    /* the layer: Q = K = V projections of x with identity weights give attention of x */
    enum { DM = H * D };
    float *x = malloc(sizeof(float) * B * T * DM), *y = malloc(sizeof(float) * B * T * DM);
    float *eye = calloc((size_t)DM * DM, sizeof(float));
    for (int i = 0; i < DM; i++)
        eye[i * DM + i] = 1.0f;
    for (int i = 0; i < B * T * DM; i++)
        x[i] = (float)((i * 29) % 97) / 97.0f - 0.5f;
    memset(&st, 0xC5, sizeof st);
    sdpa_mha_desc m = {.batch = B, .len_q = T, .d_in = DM, .heads_q = H, .head_dim = D,
                       .wq = {eye, NULL}, .wk = {eye, NULL}, .wv = {eye, NULL}};
    m.attn.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    m.attn.stats = &st.s;
    check(sdpa_mha_workspace_size(&m) > 0, "sdpa_mha_workspace_size");
    check(sdpa_mha_forward(&m, x, NULL, y, NULL, NULL) == SDPA_OK, "sdpa_mha_forward");
    canary = 1;
    for (size_t i = 0; i < sizeof st.canary; i++)
        canary &= st.canary[i] == 0xC5;
    check(canary && st.s.blocks_computed > 0, "the layer's counters, nothing past them");
    /* the same attention through sdpa_reference on x viewed as [B, T, H, D] */
    sdpa_desc dx = {.batch = B, .heads_q = H, .heads_kv = H, .len_q = T, .len_kv = T,
                    .dim_qk = D, .dim_v = D, .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    sdpa_tensor tx = sdpa_tensor_bthd(x, SDPA_F32, H, T, D);
    float *yr = malloc(sizeof(float) * B * T * DM);
    sdpa_tensor ty = sdpa_tensor_bthd(yr, SDPA_F32, H, T, D);
    check(sdpa_reference(&dx, &tx, &tx, &tx, &ty, NULL) == SDPA_OK, "reference of the layer");
    close = 1;
    for (int i = 0; i < B * T * DM; i++)
        close &= fabsf(y[i] - yr[i]) <= 1e-5f + 1e-4f * fabsf(yr[i]);
    check(close, "the layer with identity projections equals attention of x");

    printf("abi level 1 caller (built against 0.1.0's header, run against libsdpa %s): "
           "%d checks, %d failed\n", sdpa_version(), checks, failed);
    free(q), free(k), free(v), free(o), free(r), free(lse), free(lr), free(w);
    free(x), free(y), free(eye), free(yr);
    return failed ? 1 : 0;
}
