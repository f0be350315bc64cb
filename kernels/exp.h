/*
 * exp.h - the vector exp of every SIMD table: its algorithm, its constants and its
 * measured error, in one place. kernels/x86/tiles.h (AVX2 and AVX-512, `exp_vec`) and
 * kernels/neon/neon.c (`exp_vec`) write the steps below with their own instructions.
 *
 * It holds constants only, no code and no instruction of any ISA. The scalar table does
 * not use it: it calls libm's expf, the ground truth the others are measured against.
 *
 * The algorithm, for a vector x:
 *   1. live = !(x < EXP_LO): lanes below EXP_LO (-inf included) end as +0; NaN fails
 *      the "less than" and propagates through every step.
 *   2. For arguments that may be positive (vexp), x = min(EXP_HI, x). Softmax skips it:
 *      its arguments (s - max, m_run - max) are never positive, or are NaN.
 *   3. n = round(x log2 e) to nearest even, r = x - n LN2_HI - n LN2_LO: Cody and Waite's
 *      range reduction ("Software Manual for the Elementary Functions", 1980, ch. 6),
 *      each product subtracted in one FMA. x - n LN2_HI is exact for the |n| <= 128 that
 *      reach the polynomial (x and n LN2_HI are multiples of 2^-25 whose difference is
 *      below 1/2), so r carries only LN2_LO's rounding; |r| <= ln2/2 + that rounding.
 *   4. p(r) = 1 + r + C2 r^2 + ... + C6 r^6 by Horner's rule, one FMA per coefficient
 *      (C6 first, then C5 .. C2, 1, 1), so exp(0) = 1 exactly.
 *   5. exp(x) = p(r) 2^n, zero where not live. Each ISA has its own exact scaling:
 *      AVX-512 vscalefps (exact for every n, rounds subnormal and overflowing results
 *      once); NEON two exact powers of two 2^(n - n/2) 2^(n/2) built in the exponent
 *      field (n = 128 and subnormal results need no special path, the second product
 *      rounds once); AVX2 rounds with EXP_SHIFTER, which leaves n + 127 in the low
 *      mantissa bits, and builds 2^n in the exponent field, which holds n <= 127 only:
 *      for the x in (88.38, 88.72] that round to n = 128 (and still have a finite exp)
 *      vexp uses 2^127 and 2 p(r) instead.
 * AVX-512 and NEON perform the same operations in the same order (n rounded from the
 * float product x log2 e), so they give the same bits for every input that is not NaN;
 * AVX2 rounds the exact product (FMA with the shifter), so a few x near the midpoints
 * between two n take the other n: 56 of the 2^32 floats, each one ulp away.
 *
 * Measured max relative error against double exp, over every one of the 2.24e9 floats
 * in [-104, 89] whose exp is a normal float: 1.004e-7 (0.84 ulp, at x = -70.3542175) for
 * AVX-512, AVX2 and NEON alike (NEON's bits are AVX-512's, checked for all 2^32 inputs
 * under qemu-aarch64); no range or special-value errors. tests/test_ukernel.c
 * re-measures it on 2^20 points of that range (about 1e-7).
 * The contract allows 2^-20 (tests/test_ukernel.c). Results below FLT_MIN flush to 0
 * (ukernel.h allows it), exp(x) = +inf above ln(FLT_MAX), exp(-inf) = +0, NaN stays NaN.
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
/* log2 e = 1 / ln 2 rounded to float. */
#define LOG2E 1.44269502162933349609375f
/* LN2_HI is ln 2 rounded to float (0x3f317218) and LN2_LO the float nearest
 * ln 2 - LN2_HI (0xb102e308); their sum is ln 2 within 9e-17 (both computed with mpmath
 * at 40 digits from ln 2 = 0.693147180559945309417232...). */
#define LN2_HI 0.693147182464599609375f
#define LN2_LO (-1.904654323148236e-09f)
/* 1.5 * 2^23 + 127: adding it to x log2 e rounds to an integer n (the float's unit is 1
 * there) and leaves n + 127, the biased exponent of 2^n, in the low mantissa bits (AVX2's
 * rounding and scaling). */
#define EXP_SHIFTER 12583039.0f

/* p(r) = 1 + r + C2 r^2 + ... + C6 r^6 ~ exp(r) on [-ln2/2, ln2/2]: the minimax fit for
 * relative error with the constant term fixed to 1 (so exp(0) = 1 exactly), computed by
 * a Remez exchange in mpmath at 40 digits; its error is 2.6e-9, 2.9e-8 once the
 * coefficients are rounded to float (the fitted linear coefficient, 1 + 5e-8, rounds to
 * exactly 1). Hexadecimal, so they are the exact floats used. */
#define EXP_C2 0x1.000002p-1f
#define EXP_C3 0x1.5553c2p-3f
#define EXP_C4 0x1.55515ep-5f
#define EXP_C5 0x1.12903ep-7f
#define EXP_C6 0x1.709b64p-10f

#endif /* SDPA_EXP_H */
