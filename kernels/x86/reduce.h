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

/* The rounds of the tree below: log2 VL, each halving the vectors. */
enum { TREE_ROUNDS = 2 + LANE_ROUNDS };

/* Round `round` of the tree on v[0..2 n): v[i] for i < n becomes the combination of
 * v[2 i] and v[2 i + 1] (round 0: lane pairs, [A0 B0 A1 B1] per 128-bit lane; 1: [A B
 * C D] per 128-bit lane; then across the 128-bit lanes). */
ALWAYS_INLINE void tree_round(vf *v, const int n, const int round, const int is_max) {
    UNROLL_FULL
    for (int i = 0; i < n; i++) {
        const vf a = v[2 * i], b = v[2 * i + 1];
        if (round == 0)
            v[i] = combine(v_unpacklo(a, b), v_unpackhi(a, b), is_max);
        else if (round == 1)
            v[i] = combine(v_unpacklo2(a, b), v_unpackhi2(a, b), is_max);
        else
            v[i] = combine(v_lanes_even(a, b), v_lanes_odd(a, b), is_max);
    }
}

/* Rounds [r0, r1) of the tree on v[0 .. 2^(r1 - r0)), into v[0]: a group of adjacent
 * vectors gives in any rounds what it gives inside the whole tree, so a caller can run
 * the first rounds on each group as its vectors are made and the rest on the results. */
ALWAYS_INLINE void tree_rounds(vf *v, const int r0, const int r1, const int is_max) {
    UNROLL_FULL
    for (int round = r0; round < r1; round++)
        tree_round(v, 1 << (r1 - round - 1), round, is_max);
}

/* v[0..VL) -> one vector whose lane i is the sum (max) of v[i]'s lanes: a transposing
 * reduction tree, VL - 1 combining steps of two shuffles and one op for VL vectors
 * instead of VL separate horizontal reductions. Every lane's result is the same tree
 * over its vector's lanes ((0+2)+(1+3) within each 128-bit lane, then across the lanes
 * pairwise), so lane i depends on v[i] alone, not on which vectors share the call
 * (softmax's rows, qk_rows' row-by-key products). */
ALWAYS_INLINE vf reduce_tree(const vf v[VL], const int is_max) {
    vf w[VL];
    UNROLL_FULL
    for (int i = 0; i < VL; i++)
        w[i] = v[i];
    tree_rounds(w, 0, TREE_ROUNDS, is_max);
    return w[0];
}

#endif
