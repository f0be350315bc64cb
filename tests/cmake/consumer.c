/*
 * consumer.c - the CMake consumer's program: one attention through sdpa::sdpa, checked
 * against the reference, and a plan run on this thread. Prints "cmake consumer: ok".
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <sdpa.h>

int main(void) {
    enum { H = 2, T = 33, D = 16 };
    static float q[H * T * D], k[H * T * D], v[H * T * D], o[H * T * D], r[H * T * D];
    for (int i = 0; i < H * T * D; i++) {
        q[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
        k[i] = (float)((i * 53) % 103) / 103.0f - 0.5f;
        v[i] = (float)((i * 71) % 107) / 107.0f - 0.5f;
    }
    const sdpa_desc d = {.batch = 1, .heads_q = H, .heads_kv = H, .len_q = T, .len_kv = T,
                         .dim_qk = D, .dim_v = D, .causal = SDPA_CAUSAL_BOTTOM_RIGHT};
    const sdpa_tensor tq = sdpa_tensor_bhtd(q, SDPA_F32, H, T, D);
    const sdpa_tensor tk = sdpa_tensor_bhtd(k, SDPA_F32, H, T, D);
    const sdpa_tensor tv = sdpa_tensor_bhtd(v, SDPA_F32, H, T, D);
    const sdpa_tensor to = sdpa_tensor_bhtd(o, SDPA_F32, H, T, D);
    const sdpa_tensor tr = sdpa_tensor_bhtd(r, SDPA_F32, H, T, D);
    int ok = sdpa_reference(&d, &tq, &tk, &tv, &tr, NULL) == SDPA_OK;
    sdpa_plan *plan = NULL;
    ok &= sdpa_plan_create(&d, &tq, &tk, &tv, &to, NULL, &plan) == SDPA_OK;
    void *scratch = ok ? aligned_alloc(64, (sdpa_plan_scratch_size(plan) + 63) / 64 * 64) : NULL;
    for (int64_t u = 0; ok && u < sdpa_plan_units(plan); u++)
        ok &= sdpa_plan_run(plan, u, scratch) == SDPA_OK;
    for (int64_t f = 0; ok && f < sdpa_plan_finish_units(plan); f++)
        ok &= sdpa_plan_finish(plan, f, scratch) == SDPA_OK;
    free(scratch);
    sdpa_plan_destroy(plan);
    for (int i = 0; ok && i < H * T * D; i++)
        ok &= fabsf(o[i] - r[i]) <= 1e-5f + 1e-4f * fabsf(r[i]);
    printf("cmake consumer: libsdpa %s on %s: %s\n", sdpa_version(), sdpa_isa_name(sdpa_get_isa()),
           ok ? "ok" : "MISMATCH");
    return ok ? 0 : 1;
}
