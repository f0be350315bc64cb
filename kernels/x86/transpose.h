/*
 * transpose.h - the in-register transpose of VL vectors of VL 32-bit lanes, written once
 * over an x86 vector layer (kernels/x86/vec_avx2.h, vec_avx512.h): tiles.h's pack_k
 * transposes K panels with it, and kernels/x86/bf16.h transposes panels of bf16 pairs
 * (each 32-bit lane a pair) with it.
 *
 * It is not a header in the usual sense: it defines a static inline function for the
 * vector layer included before it (whose -m flags are on), and names no instruction. The
 * shuffles only move 32-bit lanes, so any 32-bit payload (floats, pairs of bf16) goes
 * through bit for bit.
 */
#ifndef SDPA_X86_TRANSPOSE_H
#define SDPA_X86_TRANSPOSE_H

#ifndef SDPA_VEC_LAYER
#error "kernels/x86/transpose.h is compiled through an ISA file, after its vector layer"
#endif

/* A vector is LANES 128-bit lanes of 4 floats; the transposes and reduction trees cross
 * them in LANE_ROUNDS = log2 LANES rounds. */
enum { LANES = VL / 4, LANE_ROUNDS = LANES == 4 ? 2 : 1 };
_Static_assert(LANES == 2 || LANES == 4, "x86 vectors are 256 or 512 bits");

/* In-register VL x VL transpose: r[i] holds row i; afterwards r[c] holds column c. Within
 * each 128-bit lane, pairs of floats and then pairs of pairs, after which u[4g + c] holds
 * in its lane l rows 4g..4g+3 of column 4l + c; then, for each c, a transpose of the
 * LANES lanes of u[c], u[4 + c], ...: LANE_ROUNDS rounds of even and odd lanes. VL
 * shuffles per round: 4 rounds at VL = 16, 3 at VL = 8. */
ALWAYS_INLINE void transpose(vf r[VL]) {
    vf t[VL], u[VL];
    UNROLL_FULL
    for (int i = 0; i < VL / 2; i++) {
        t[2 * i] = v_unpacklo(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = v_unpackhi(r[2 * i], r[2 * i + 1]);
    }
    UNROLL_FULL
    for (int i = 0; i < VL / 4; i++) {
        u[4 * i + 0] = v_unpacklo2(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = v_unpackhi2(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = v_unpacklo2(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = v_unpackhi2(t[4 * i + 1], t[4 * i + 3]);
    }
    UNROLL_FULL
    for (int c = 0; c < 4; c++) {
        vf x[LANES], y[LANES];
        UNROLL_FULL
        for (int g = 0; g < LANES; g++)
            x[g] = u[4 * g + c];
        UNROLL_FULL
        for (int round = 0; round < LANE_ROUNDS; round++) {
            UNROLL_FULL
            for (int i = 0; i < LANES / 2; i++) {
                y[i] = v_lanes_even(x[2 * i], x[2 * i + 1]);
                y[i + LANES / 2] = v_lanes_odd(x[2 * i], x[2 * i + 1]);
            }
            UNROLL_FULL
            for (int g = 0; g < LANES; g++)
                x[g] = y[g];
        }
        UNROLL_FULL
        for (int l = 0; l < LANES; l++)
            r[4 * l + c] = x[l];
    }
}

#endif /* SDPA_X86_TRANSPOSE_H */
