/*
 * test_seeds.c - numbers printed in the seed notebooks the project grew from (their
 * parameters and printed tables are in tests/data/seed_vectors.h), reproduced by the
 * fused path (and the reference) to the printed precision.
 *
 * Each test builds Q, K, V so that attention computes exactly what the notebook cell
 * computed, then compares with the printed table. Printed tables are rounded to 4
 * decimals, and where the inputs are themselves printed (rounded) values the notebook
 * computed from the unrounded ones: each test's tolerance adds both effects, derived at
 * the test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/seed_vectors.h"
#include "harness.h"
#include "suites.h"

/* half a unit of the 4th printed decimal, plus float rounding */
#define PRINTED_TOL (0.5e-4 + 1e-6)

/* Run fused (th_isa) and reference on contiguous [1, 1, T, D] tensors. */
static void run_both(const sdpa_desc *d0, const float *q, const float *k, const float *v,
                     float *o_fused, float *o_ref, float *lse_fused) {
    sdpa_desc d = *d0;
    d.isa = th_isa;
    const sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, 1, d.len_q, d.dim_qk);
    const sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, 1, d.len_kv, d.dim_qk);
    const sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, 1, d.len_kv, d.dim_v);
    const sdpa_tensor of = sdpa_tensor_bhtd(o_fused, SDPA_F32, 1, d.len_q, d.dim_v);
    const sdpa_tensor orf = sdpa_tensor_bhtd(o_ref, SDPA_F32, 1, d.len_q, d.dim_v);
    CHECK(sdpa_forward(&d, &tq, &tk, &tv, &of, lse_fused) == SDPA_OK, "fused call failed");
    CHECK(sdpa_reference(&d, &tq, &tk, &tv, &orf, NULL) == SDPA_OK, "reference call failed");
}

static int matches(const float *got, const float *printed, int n, double tol,
                   const char *what) {
    int bad = -1;
    for (int i = 0; i < n && bad < 0; i++)
        if (!(fabsf(got[i] - printed[i]) <= tol))
            bad = i;
    return CHECK(bad < 0, "%s: element %d is %.6f, the notebook printed %.4f", what, bad,
                 bad < 0 ? 0.0 : (double)got[bad], bad < 0 ? 0.0 : (double)printed[bad]);
}

/* Seed 001, "Method 3 Using softmax": with all scores equal, causal attention is the
 * running mean of V. Q = K = 0, V = the printed x = torch.randn(1, 4, 4) under
 * manual_seed(1337); the printed result is the running mean. */
static void seed001_running_mean(void) {
    static const float x[16] = {0.1808f,  -0.0700f, -0.3596f, -0.9152f, 0.6258f,  0.0255f,
                                0.9545f,  0.0643f,  0.3612f,  1.1679f,  -1.3499f, -0.5102f,
                                0.2360f,  -0.2398f, -0.9211f, 1.5433f};
    static const float printed[16] = {0.1808f, -0.0700f, -0.3596f, -0.9152f, 0.4033f, -0.0222f,
                                      0.2974f, -0.4254f, 0.3892f,  0.3745f,  -0.2517f, -0.4537f,
                                      0.3509f, 0.2209f,  -0.4190f, 0.0456f};
    float zeros[16] = {0}, of[16], orf[16], lse[4];
    const sdpa_desc d = {.batch = 1, .heads_q = 1, .heads_kv = 1, .len_q = 4, .len_kv = 4,
                         .dim_qk = 4, .dim_v = 4, .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    run_both(&d, zeros, zeros, x, of, orf, lse);
    /* a mean of inputs each rounded by <= 0.5e-4 moves by <= 0.5e-4, then printed */
    matches(of, printed, 16, PRINTED_TOL + 0.5e-4, "seed 001 running mean (fused)");
    matches(orf, printed, 16, PRINTED_TOL + 0.5e-4, "seed 001 running mean (reference)");
    /* all scores 0: lse of row i is log(i + 1) */
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok &= fabsf(lse[i] - logf((float)(i + 1))) <= 1e-6f;
    CHECK(ok, "seed 001: lse of uniform rows must be log(visible keys)");
}

/* Seed 001, "Method 2": the causal average of the printed b = randint(0, 10, (4, 4))
 * under manual_seed(35) is the printed c. */
static void seed001_causal_average(void) {
    static const float b[16] = {7, 9, 8, 7, 1, 8, 7, 6, 3, 8, 5, 3, 6, 2, 7, 3};
    static const float printed[16] = {7.0000f, 9.0000f, 8.0000f, 7.0000f, 4.0000f, 8.5000f,
                                      7.5000f, 6.5000f, 3.6667f, 8.3333f, 6.6667f, 5.3333f,
                                      4.2500f, 6.7500f, 6.7500f, 4.7500f};
    float zeros[4] = {0}, of[16], orf[16], lse[4];
    /* Dk = 1 with zero Q and K: every visible score is 0 */
    const sdpa_desc d = {.batch = 1, .heads_q = 1, .heads_kv = 1, .len_q = 4, .len_kv = 4,
                         .dim_qk = 1, .dim_v = 4, .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    run_both(&d, zeros, zeros, b, of, orf, lse);
    /* integer inputs are exact: only the printing rounds */
    matches(of, printed, 16, PRINTED_TOL, "seed 001 causal average (fused)");
    matches(orf, printed, 16, PRINTED_TOL, "seed 001 causal average (reference)");
}

/* Seed 000, cells 13-16: softmax(masked_attn_scores / sqrt(3)) of the printed causal
 * scores is the printed masked_attn_wt_soft. Q row i holds score row i, K = V = I6, so
 * Q K^T = the scores and P V = P. The masked (upper) entries of Q hold 1e4: a mask that
 * leaked would show at once. */
static void seed000_masked_softmax(void) {
    static const float scores[6][6] = {
        {-0.2382f, 0, 0, 0, 0, 0},
        {-0.3270f, -0.3568f, 0, 0, 0, 0},
        {-0.3218f, -0.3506f, -0.3384f, 0, 0, 0},
        {-0.1822f, -0.2026f, -0.1975f, -0.1128f, 0, 0},
        {-0.1385f, -0.1401f, -0.1312f, -0.0915f, 0.0668f, 0},
        {-0.2439f, -0.2754f, -0.2699f, -0.1499f, -0.0948f, -0.2134f}};
    static const float printed[36] = {
        1.0000f, 0.0000f, 0.0000f, 0.0000f, 0.0000f, 0.0000f, 0.5043f, 0.4957f, 0.0000f,
        0.0000f, 0.0000f, 0.0000f, 0.3362f, 0.3307f, 0.3330f, 0.0000f, 0.0000f, 0.0000f,
        0.2487f, 0.2458f, 0.2465f, 0.2589f, 0.0000f, 0.0000f, 0.1939f, 0.1937f, 0.1947f,
        0.1993f, 0.2183f, 0.0000f, 0.1631f, 0.1602f, 0.1607f, 0.1722f, 0.1778f, 0.1660f};
    float q[36], eye[36] = {0}, of[36], orf[36], lse[6];
    for (int i = 0; i < 6; i++) {
        eye[i * 6 + i] = 1.0f;
        for (int j = 0; j < 6; j++)
            q[i * 6 + j] = j <= i ? scores[i][j] : 1e4f;
    }
    const sdpa_desc d = {.batch = 1, .heads_q = 1, .heads_kv = 1, .len_q = 6, .len_kv = 6,
                         .dim_qk = 6, .dim_v = 6, .scale = (float)(1.0 / sqrt(3.0)),
                         .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    run_both(&d, q, eye, eye, of, orf, lse);
    /* scores rounded by <= 0.5e-4, scaled by 1/sqrt(3): logits off by e <= 2.9e-5, and
     * dw_j = w_j ((1 - w_j) ds_j - sum_{k != j} w_k ds_k) is at most
     * 2 w_j (1 - w_j) e <= e / 2 = 1.45e-5 */
    matches(of, printed, 36, PRINTED_TOL + 1.5e-5, "seed 000 masked softmax (fused)");
    matches(orf, printed, 36, PRINTED_TOL + 1.5e-5, "seed 000 masked softmax (reference)");
}

/* ---- the seeds' layers, through sdpa_mha_forward ---------------------------------- */

/* One layer of a notebook: its input, parameters and PyTorch's outputs (the generated
 * tests/data/seed_vectors.h), and the notebook's printed tables. */
typedef struct seed_layer {
    const char *name;
    int64_t B, T, din, H, Dh, dout;
    int causal;
    const float *x;
    const float *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
    const float *torch_y, *torch_w;     /* PyTorch's outputs (full precision), or NULL */
    const float *printed_y, *printed_w; /* the notebook's tables (4 decimals), or NULL */
    int64_t printed_y_rows;             /* leading rows of y printed (batch 0 only) */
} seed_layer;

static void run_seed_layer(const seed_layer *sl) {
    const int64_t B = sl->B, T = sl->T, dq = sl->H * sl->Dh, dout = sl->wo ? sl->dout : dq;
    float *x = malloc((size_t)(B * T * sl->din) * sizeof(float));
    for (int64_t b = 0; b < B; b++) /* the notebooks stack the same sentence B times */
        memcpy(x + b * T * sl->din, sl->x, (size_t)(T * sl->din) * sizeof(float));
    float *y = malloc((size_t)(B * T * dout) * sizeof(float));
    float *w = malloc((size_t)(B * sl->H * T * T) * sizeof(float));
    sdpa_mha_desc d = {.batch = B, .len_q = T, .d_in = sl->din, .heads_q = sl->H,
                       .head_dim = sl->Dh, .d_out = sl->dout, .wq = {sl->wq, sl->bq},
                       .wk = {sl->wk, sl->bk}, .wv = {sl->wv, sl->bv}, .wo = {sl->wo, sl->bo},
                       .attn = {.causal = sl->causal, .isa = th_isa}};
    const sdpa_status st = sdpa_mha_forward(&d, x, NULL, y, w, NULL);
    if (!CHECK(st == SDPA_OK, "%s: %s", sl->name, sdpa_strerror(st)))
        goto out;
    /* against PyTorch: the same fp32 computation in another order */
    int bad = 0;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t i = 0; sl->torch_y && i < T * dout; i++)
            bad |= !(fabsf(y[b * T * dout + i] - sl->torch_y[i % (T * dout)]) <=
                     1e-5f + 1e-4f * fabsf(sl->torch_y[i]));
        for (int64_t i = 0; sl->torch_w && i < sl->H * T * T; i++)
            bad |= !(fabsf(w[b * sl->H * T * T + i] - sl->torch_w[i]) <= 1e-5f + 1e-4f * sl->torch_w[i]);
    }
    CHECK(!bad, "%s: libsdpa differs from PyTorch's outputs", sl->name);
    char what[96];
    if (sl->printed_y) {
        snprintf(what, sizeof what, "%s context vectors", sl->name);
        matches(y, sl->printed_y, (int)(sl->printed_y_rows * dout), PRINTED_TOL, what);
    }
    if (sl->printed_w) {
        snprintf(what, sizeof what, "%s attention weights", sl->name);
        matches(w, sl->printed_w, (int)(sl->H * T * T), PRINTED_TOL, what);
    }
out:
    free(x);
    free(y);
    free(w);
}

static void seed_layers(void) {
    static const float s003_sa_y[12] = {-0.0739f, 0.0713f, -0.0748f, 0.0703f, -0.0749f, 0.0702f,
                                        -0.0760f, 0.0685f, -0.0763f, 0.0679f, -0.0754f, 0.0693f};
    static const float s003_sa_w[36] = {
        0.1921f, 0.1646f, 0.1652f, 0.1550f, 0.1721f, 0.1510f, 0.2041f, 0.1659f, 0.1662f,
        0.1496f, 0.1665f, 0.1477f, 0.2036f, 0.1659f, 0.1662f, 0.1498f, 0.1664f, 0.1480f,
        0.1869f, 0.1667f, 0.1668f, 0.1571f, 0.1661f, 0.1564f, 0.1830f, 0.1669f, 0.1670f,
        0.1588f, 0.1658f, 0.1585f, 0.1935f, 0.1663f, 0.1666f, 0.1542f, 0.1666f, 0.1529f};
    static const float s003_causal_w[36] = {
        1.0000f, 0, 0, 0, 0, 0, 0.5517f, 0.4483f, 0, 0, 0, 0, 0.3800f, 0.3097f, 0.3103f, 0, 0, 0,
        0.2758f, 0.2460f, 0.2462f, 0.2319f, 0, 0, 0.2175f, 0.1983f, 0.1984f, 0.1888f, 0.1971f, 0,
        0.1935f, 0.1663f, 0.1666f, 0.1542f, 0.1666f, 0.1529f};
    static const float s003_wrap_y[24] = {
        -0.4519f, 0.2216f,  0.4772f, 0.1063f, -0.5874f, 0.0058f,  0.5891f, 0.3257f,
        -0.6300f, -0.0632f, 0.6202f, 0.3860f, -0.5675f, -0.0843f, 0.5478f, 0.3589f,
        -0.5526f, -0.0981f, 0.5321f, 0.3428f, -0.5299f, -0.1081f, 0.5077f, 0.3493f};
    static const float s003_mha_y[12] = {0.3190f, 0.4858f, 0.2943f, 0.3897f, 0.2856f, 0.3593f,
                                         0.2693f, 0.3873f, 0.2639f, 0.3928f, 0.2575f, 0.4028f};
    static const float s000_w[36] = {
        0.1607f, 0.1599f, 0.1613f, 0.1679f, 0.1971f, 0.1531f, 0.1606f, 0.1579f, 0.1590f,
        0.1721f, 0.1907f, 0.1597f, 0.1606f, 0.1580f, 0.1591f, 0.1720f, 0.1907f, 0.1595f,
        0.1637f, 0.1618f, 0.1623f, 0.1704f, 0.1767f, 0.1650f, 0.1631f, 0.1629f, 0.1638f,
        0.1676f, 0.1836f, 0.1590f, 0.1631f, 0.1602f, 0.1607f, 0.1722f, 0.1778f, 0.1660f};
    static const float s000_causal_w[36] = {
        1.0000f, 0, 0, 0, 0, 0, 0.5043f, 0.4957f, 0, 0, 0, 0, 0.3362f, 0.3307f, 0.3330f, 0, 0, 0,
        0.2487f, 0.2458f, 0.2465f, 0.2589f, 0, 0, 0.1939f, 0.1937f, 0.1947f, 0.1993f, 0.2183f, 0,
        0.1631f, 0.1602f, 0.1607f, 0.1722f, 0.1778f, 0.1660f};
    static const float s000_causal_y[18] = {0.3253f, -0.5116f, -0.1020f, 0.4499f, -0.5958f,
                                            -0.0050f, 0.4909f, -0.6204f, 0.0269f, 0.4473f,
                                            -0.5584f, 0.0417f, 0.4247f, -0.4955f, 0.0352f,
                                            0.4166f, -0.4996f, 0.0483f};
    static const float s004_rand_w[18] = {0.3297f, 0.3297f, 0.3406f, 0.3209f, 0.3352f, 0.3439f,
                                          0.3286f, 0.3308f, 0.3406f, 0.3601f, 0.2791f, 0.3608f,
                                          0.3198f, 0.3448f, 0.3354f, 0.3501f, 0.3008f, 0.3492f};
    static const float s004_cats_w[18] = {0.1895f, 0.1881f, 0.6225f, 0.2294f, 0.3782f, 0.3925f,
                                          0.3702f, 0.4393f, 0.1906f, 0.4134f, 0.3067f, 0.2798f,
                                          0.2474f, 0.3777f, 0.3750f, 0.3383f, 0.3749f, 0.2868f};
    const seed_layer layers[] = {
        {"seed 003 SelfAttention_v2", 1, 6, 3, 1, 2, 0, 0, seed_sentence, s003_sa_q_w, s003_sa_k_w,
         s003_sa_v_w, NULL, NULL, NULL, NULL, NULL, s003_sa_context, s003_sa_weights, s003_sa_y,
         s003_sa_w, 6},
        {"seed 003 causal weights", 1, 6, 3, 1, 2, 0, 1, seed_sentence, s003_sa_q_w, s003_sa_k_w,
         s003_sa_v_w, NULL, NULL, NULL, NULL, NULL, NULL, s003_sa_causal_weights, NULL,
         s003_causal_w, 0},
        {"seed 003 MultiHeadAttentionWrapper", 2, 6, 3, 2, 2, 0, 1, seed_sentence, s003_wrap_q_w,
         s003_wrap_k_w, s003_wrap_v_w, NULL, NULL, NULL, NULL, NULL, s003_wrap_context, NULL,
         s003_wrap_y, NULL, 6},
        {"seed 003 MultiHeadAttention", 2, 6, 3, 2, 1, 2, 1, seed_sentence, s003_mha_q_w,
         s003_mha_k_w, s003_mha_v_w, s003_mha_o_w, NULL, NULL, NULL, s003_mha_o_b,
         s003_mha_context, NULL, s003_mha_y, NULL, 6},
        {"seed 000 SelfAttention", 1, 6, 3, 1, 3, 0, 0, seed_sentence, s000_q_w, s000_k_w, s000_v_w,
         NULL, NULL, NULL, NULL, NULL, NULL, s000_weights, NULL, s000_w, 0},
        {"seed 000 CausalSelfAttention", 2, 6, 3, 1, 3, 0, 1, seed_sentence, s000_q_w, s000_k_w,
         s000_v_w, NULL, NULL, NULL, NULL, NULL, s000_causal_context, s000_causal_weights,
         s000_causal_y, s000_causal_w, 6},
        {"seed 004 MultiHeadAttention (rand)", 1, 3, 8, 2, 4, 8, 0, s004_rand_x, s004_rand_q_w,
         s004_rand_k_w, s004_rand_v_w, s004_rand_o_w, s004_rand_q_b, s004_rand_k_b, s004_rand_v_b,
         s004_rand_o_b, s004_rand_output, s004_rand_weights, NULL, s004_rand_w, 0},
        {"seed 004 she loves cats", 1, 3, 8, 2, 4, 8, 0, s004_cats_x, s004_cats_q_w, s004_cats_k_w,
         s004_cats_v_w, s004_cats_o_w, s004_cats_q_b, s004_cats_k_b, s004_cats_v_b, s004_cats_o_b,
         s004_cats_output, s004_cats_weights, NULL, s004_cats_w, 0},
    };
    for (int i = 0; i < (int)(sizeof layers / sizeof layers[0]); i++)
        run_seed_layer(&layers[i]);
}

void suite_seeds(void) {
    seed001_running_mean();
    seed001_causal_average();
    seed000_masked_softmax();
    seed_layers();
}
