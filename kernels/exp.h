/*
 * exp.h - the vector exp of every SIMD table: its algorithm, its constants and its
 * measured error, in one place. kernels/x86/tiles.h (AVX2 and AVX-512, `exp_vec`) and
 * kernels/neon/neon.c (`exp_vec`) write the steps below with their own instructions.
 *
 * It holds constants only, no code and no instruction of any ISA. The scalar table does
 * not use it: it calls libm's expf, the ground truth the others are measured against.
 *
 * The algorithm, for a vector x:
 *   1. Lanes below ln(FLT_MIN) end as +0 or as the subnormal result rounded once, -inf
 *      included, and NaN propagates through every step. AVX-512 and NEON clamp:
 *      x = max(EXP_FLOOR, x), whose exp rounds to +0 by the scaling in step 5, so no
 *      lane mask is formed (on AMD Zen 4 a comparison into a mask takes a slot of the
 *      FMA pipes, a max does not: docs/PERFORMANCE.md, "The exp in seven operations").
 *      AVX2, whose scaling cannot reach below 2^-126, masks: live = !(x < EXP_LO),
 *      dead lanes end as +0 (results below FLT_MIN flush).
 *   2. For arguments that may be positive (vexp), x = min(EXP_HI, x). Softmax skips it:
 *      its arguments (s - max, m_run - max) are never positive, or are NaN.
 *   3. n = round(x log2 e) to nearest even, r = x - n LN2 in one FMA: a one-constant
 *      reduction (Cody and Waite's has a second constant for ln 2 - LN2; "Software
 *      Manual for the Elementary Functions", 1980, ch. 6). The FMA rounds x - n LN2 once,
 *      and the constant's own error, |ln 2 - LN2| < 1.91e-9, leaves r off by at most
 *      |n| 1.91e-9: 2.4e-7 at the |n| = 126 of the smallest normal results, 0 at n = 0.
 *   4. p(r) = 1 + r + C2 r^2 + ... + C5 r^5 by Horner's rule, one FMA per coefficient
 *      (C5 first, then C4 .. C2, 1, 1), so exp(0) = 1 exactly.
 *   5. exp(x) = p(r) 2^n. Each ISA has its own exact scaling: AVX-512 vscalefps (exact
 *      for every n, rounds subnormal and overflowing results once); NEON two exact powers
 *      of two 2^(n - n/2) 2^(n/2) built in the exponent field (n = 128 and subnormal
 *      results need no special path, the second product rounds once); AVX2 rounds with
 *      EXP_SHIFTER, which leaves n + 127 in the low mantissa bits, and builds 2^n in the
 *      exponent field, which holds n <= 127 only: for the x in (88.38, 88.72] that round
 *      to n = 128 (and still have a finite exp) vexp uses 2^127 and 2 p(r) instead.
 * Seven vector operations on AVX-512's FMA pipes (the multiply by log2 e, one reduction
 * FMA, five polynomial FMAs; the clamps, the rounding and the scaling run beside them).
 * AVX-512 and NEON perform the same operations in the same order (n rounded from the
 * float product x log2 e), so they give the same bits for every input that is not NaN;
 * AVX2 rounds the exact product (FMA with the shifter), so a few x near the midpoints
 * between two n take the other n, and it flushes results below FLT_MIN.
 *
 * Measured max relative error against double exp, over every one of the 2.24e9 floats
 * in [-104, 89] whose exp is a normal float (docs/PERFORMANCE.md, "The exp in seven
 * operations"): 4.004e-7 (3.4 ulp of 2^-23, at x = -87.0579071, where the reduction's
 * 126 x 1.91e-9 dominates) for AVX-512 and AVX2, and NEON, whose bits are AVX-512's on
 * every one of those floats (qemu-aarch64); within [-16, 16] 2.07e-7; no range or
 * special-value errors. tests/test_ukernel.c re-measures
 * it on 2^20 points of that range. The contract allows 2^-20 = 9.5e-7
 * (tests/test_ukernel.c). Results below FLT_MIN are the subnormal rounded once or 0
 * (ukernel.h allows either), exp(x) = +inf above ln(FLT_MAX), exp(-inf) = +0, NaN stays
 * NaN.
 * Its cost per vector: docs/PERFORMANCE.md, "Kernel measurements".
 */
#ifndef SDPA_EXP_H
#define SDPA_EXP_H

/* ln(FLT_MIN) = -87.33654475...; EXP_LO is the smallest float at or above it
 * (0xc2aeac4f), so every input whose exp is a normal float is computed and only results
 * below FLT_MIN are flushed. */
#define EXP_LO (-87.33654022216797f)
/* Any input above ln(FLT_MAX) = 88.7228 overflows to +inf; clamping to 89 keeps +inf
 * from becoming inf - inf = NaN in the reduction while still giving +inf (n = 128). */
#define EXP_HI 89.0f
/* The clamp of step 1 (AVX-512, NEON): round(-150 log2 e) = -216, and p(r) 2^-216 < 2^-150,
 * half the smallest subnormal, rounds to +0, so every x at or below -150 (-inf included)
 * gives exactly +0; exp(-150) is 7e-66, below every subnormal as well, so the clamp
 * changes no result. */
#define EXP_FLOOR (-150.0f)
/* log2 e = 1 / ln 2 rounded to float. */
#define LOG2E 1.44269502162933349609375f
/* LN2 is ln 2 rounded to float (0x3f317218): ln 2 - LN2 = -1.9046543e-9 (mpmath, 40
 * digits, from ln 2 = 0.693147180559945309417232...). */
#define LN2 0.693147182464599609375f
/* 1.5 * 2^23 + 127: adding it to x log2 e rounds to an integer n (the float's unit is 1
 * there) and leaves n + 127, the biased exponent of 2^n, in the low mantissa bits (AVX2's
 * rounding and scaling). */
#define EXP_SHIFTER 12583039.0f

/* p(r) = 1 + r + C2 r^2 + ... + C5 r^5 ~ exp(r) on [-ln2/2, ln2/2]: the minimax fit for
 * relative error with the constant and linear terms fixed to 1 (so exp(0) = 1 exactly,
 * and the last two Horner steps add 1), computed by Lawson's iteratively reweighted
 * least squares in double on 4001 Chebyshev points; its error is 1.05e-7 before the
 * coefficients are rounded to float. Hexadecimal, so they are the exact floats used. */
#define EXP_C2 0x1.fffdfcp-2f
#define EXP_C3 0x1.5557aep-3f
#define EXP_C4 0x1.572a02p-5f
#define EXP_C5 0x1.10627cp-7f

#endif /* SDPA_EXP_H */
