/*
 * test_seeds.c - numbers printed in the notebooks of ../shared/seeds, reproduced by the
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
#include <string.h>

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

void suite_seeds(void) {
    seed001_running_mean();
    seed001_causal_average();
    seed000_masked_softmax();
}
