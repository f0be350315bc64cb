/*
 * reduce.h - the transposing reduction tree of the x86 tiles: VL vectors reduced to one
 * vector of their VL sums (or maxima), lane i from vector i alone. kernels/x86/tiles.h
 * uses it for qk_rows' scores and softmax's rows, the AVX512-BF16 table
 * (kernels/avx512bf16/avx512bf16.c) for its decode scores.
 *
 * It is not a header in the usual sense: it defines always-inline functions on the
 * including ISA file's vector layer (kernels/x86/vec_avx2.h, vec_avx512.h), which it
 * follows, and names no instruction.
 */
#ifndef SDPA_X86_REDUCE_H
#define SDPA_X86_REDUCE_H

#ifndef SDPA_VEC_LAYER
#error "kernels/x86/reduce.h is compiled through an ISA file, after its vector layer"
#endif

#include "transpose.h" /* LANES, LANE_ROUNDS */

/* a + b, or max(a, b) when is_max (a compile-time constant). */
ALWAYS_INLINE vf combine(vf a, vf b, const int is_max) {
    if (is_max)
        return v_max(a, b);
    return a + b;
}

/* v[0..VL) -> one vector whose lane i is the sum (max) of v[i]'s lanes: a transposing
 * reduction tree, VL - 1 combining steps of two shuffles and one op for VL vectors
 * instead of VL separate horizontal reductions. Every lane's result is the same tree
 * over its vector's lanes ((0+2)+(1+3) within each 128-bit lane, then across the lanes
 * pairwise), so lane i depends on v[i] alone, not on which vectors share the call
 * (softmax's rows, qk_rows' row-by-key products). */
ALWAYS_INLINE vf reduce_tree(const vf v[VL], const int is_max) {
    vf a[VL / 2], b[LANES];
    UNROLL_FULL /* lane pairs: [A0 B0 A1 B1] per 128-bit lane */
    for (int i = 0; i < VL / 2; i++)
        a[i] = combine(v_unpacklo(v[2 * i], v[2 * i + 1]), v_unpackhi(v[2 * i], v[2 * i + 1]),
                       is_max);
    UNROLL_FULL /* [A B C D] per 128-bit lane */
    for (int i = 0; i < VL / 4; i++)
        b[i] = combine(v_unpacklo2(a[2 * i], a[2 * i + 1]), v_unpackhi2(a[2 * i], a[2 * i + 1]),
                       is_max);
    /* then across the 128-bit lanes, halving the vectors each round (a constant inner
     * bound and a test, which every gcc option set unrolls in full) */
    UNROLL_FULL
    for (int round = 0; round < LANE_ROUNDS; round++)
        UNROLL_FULL
        for (int i = 0; i < LANES / 2; i++)
            if (i < (LANES >> round) / 2)
                b[i] = combine(v_lanes_even(b[2 * i], b[2 * i + 1]),
                               v_lanes_odd(b[2 * i], b[2 * i + 1]), is_max);
    return b[0];
}

#endif
