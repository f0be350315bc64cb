/*
 * amx_model.h - a software model of the Intel AMX tile instructions the AMX kernel table
 * uses, so the same kernel source runs (and is tested) on every x86 host: compiled with
 * SDPA_AMX_MODEL defined, kernels/amx/amx.c includes this header instead of using the
 * AMX intrinsics of <immintrin.h>, and the calls below act on eight tiles of memory.
 *
 * What is modelled, from the Intel 64 and IA-32 Architectures Software Developer's
 * Manual, vol. 2 (LDTILECFG, TILELOADD, TILESTORED, TILEZERO, TDPBF16PS, TILERELEASE):
 *   - a tile configuration of palette 1: eight tiles, each of `rows` rows (<= 16) of
 *     `colsb` bytes (<= 64), loaded from the 64-byte LDTILECFG layout (palette byte 0,
 *     start_row byte 1, colsb as 16-bit values at bytes 16-31, rows as bytes 48-55);
 *     loading it zeroes every tile, TILERELEASE returns to the unconfigured state;
 *   - TILELOADD / TILESTORED: rows of colsb bytes, `stride` bytes apart; the bytes of a
 *     tile past its rows and colsb read as zero;
 *   - TILEZERO;
 *   - TDPBF16PS C[M][N] += A[M][K] B[K][N], B in the pair layout ([K][N][2] bf16), as
 *     the manual's pseudocode writes it: for each row m, fresh fp32 accumulators for the
 *     even and the odd elements of each pair,
 *         for k (pairs of A's row), for n:
 *             even[n] = fma(a[m][2k],     b[k][2n],     even[n])
 *             odd[n]  = fma(a[m][2k + 1], b[k][2n + 1], odd[n])
 *     then c[m][n] = c[m][n] + (even[n] + odd[n]); every operation rounded to nearest
 *     even with DAZ and FTZ whatever MXCSR says (sdpa_amx_fma below);
 *   - the faults a kernel bug would hit on hardware (vol. 2A, 2.10, the AMX exception
 *     classes): an invalid configuration (#GP), a tile instruction while unconfigured or
 *     on an unconfigured tile, TDPBF16PS shapes that do not match, or the same tile twice
 *     (#UD): the model prints which and aborts. It also refuses what the kernels never
 *     do though the hardware allows it (palette 0, a nonzero start_row).
 * The tile state is thread-local, as the architectural tile registers are per thread.
 * It is not a fast path: a tile product costs some 8000 scalar multiply-adds. Only the
 * calls the kernels use are here.
 */
#ifndef SDPA_AMX_MODEL_H
#define SDPA_AMX_MODEL_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sdpa_amx_tile {
    int rows, colsb;
    uint8_t data[16][64];
} sdpa_amx_tile;

static _Thread_local sdpa_amx_tile sdpa_amx_tiles[8];
static _Thread_local int sdpa_amx_configured;

/* What the hardware would fault on: a kernel bug, never a data condition. */
static inline void sdpa_amx_fault(const char *what) {
    fprintf(stderr, "AMX model: %s\n", what);
    abort();
}

static inline void sdpa_amx_check(int ok, const char *what) {
    if (!ok)
        sdpa_amx_fault(what);
}

/* LDTILECFG with its validity rules for palette 1 (#GP otherwise): reserved bytes 2-15,
 * tiles 8-15 and bytes 56-63 zero, each tile either unused (rows = colsb = 0) or
 * rows <= 16 and colsb <= 64; and palette 1 with start_row 0, the kernels' only use. */
static inline void sdpa_amx_loadconfig(const void *cfg) {
    const uint8_t *c = cfg;
    sdpa_amx_check(c[0] == 1 && c[1] == 0, "LDTILECFG: the kernels use palette 1, start_row 0");
    for (int i = 2; i < 64; i++) {
        const int reserved = i < 16 || (i >= 32 && i < 48) || i >= 56;
        sdpa_amx_check(!reserved || c[i] == 0, "LDTILECFG: a reserved byte is not zero");
    }
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, c + 16 + 2 * t, sizeof colsb);
        const int rows = c[48 + t];
        sdpa_amx_check((rows == 0) == (colsb == 0) && rows <= 16 && colsb <= 64,
                       "LDTILECFG: a tile's rows/colsb are out of range");
        sdpa_amx_tiles[t].colsb = colsb;
        sdpa_amx_tiles[t].rows = rows;
        memset(sdpa_amx_tiles[t].data, 0, sizeof sdpa_amx_tiles[t].data);
    }
    sdpa_amx_configured = 1;
}

static inline void sdpa_amx_release(void) {
    memset(sdpa_amx_tiles, 0, sizeof sdpa_amx_tiles);
    sdpa_amx_configured = 0;
}

static inline sdpa_amx_tile *sdpa_amx_use(int t) {
    sdpa_amx_check(sdpa_amx_configured, "tile instruction without a tile configuration");
    sdpa_amx_check(t >= 0 && t < 8 && sdpa_amx_tiles[t].rows > 0,
                   "tile instruction on an unconfigured tile");
    return &sdpa_amx_tiles[t];
}

static inline void sdpa_amx_zero(int t) {
    sdpa_amx_tile *x = sdpa_amx_use(t);
    memset(x->data, 0, sizeof x->data);
}

static inline void sdpa_amx_loadd(int t, const void *base, long stride) {
    sdpa_amx_tile *x = sdpa_amx_use(t);
    for (int r = 0; r < 16; r++) {
        memset(x->data[r], 0, 64);
        if (r < x->rows)
            memcpy(x->data[r], (const char *)base + (long)r * stride, (size_t)x->colsb);
    }
}

static inline void sdpa_amx_stored(int t, void *base, long stride) {
    const sdpa_amx_tile *x = sdpa_amx_use(t);
    for (int r = 0; r < x->rows; r++)
        memcpy((char *)base + (long)r * stride, x->data[r], (size_t)x->colsb);
}

/* DAZ: an fp32 whose exponent field is 0 (zero or subnormal) reads as a signed 0. */
static inline float sdpa_amx_daz(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* bf16 -> fp32 (the top half of a binary32), with DAZ. */
static inline float sdpa_amx_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return sdpa_amx_daz(f);
}

/* a b + c, fp32, rounded once to nearest even, with DAZ and FTZ: subnormal inputs read
 * as zero, and a tiny result is written as zero of its sign. Tiny is the manual's
 * underflow condition (vol. 1, 4.9.1.5): the result rounded to 24 bits with an
 * unbounded exponent is nonzero and below 2^-126. fmaf rounds a result below 2^-126 to
 * the subnormal grid instead, which agrees on every result but those whose magnitude
 * comes out exactly 2^-126: those are tiny when the exact value lies below
 * 2^-126 - 2^-151 (the midpoint under which 24-bit rounding stays in the binade
 * below), which the exact sum decides: a b is exact in double (24-bit significands),
 * and a Knuth two-sum gives the rounding error e of s = a b + c exactly. */
static inline float sdpa_amx_fma(float a, float b, float c) {
    a = sdpa_amx_daz(a);
    b = sdpa_amx_daz(b);
    c = sdpa_amx_daz(c);
    const float r = fmaf(a, b, c);
    if (!(fabsf(r) <= FLT_MIN)) /* normal, inf or NaN */
        return r;
    if (fabsf(r) < FLT_MIN) /* zero, or tiny whichever way it is rounded */
        return copysignf(0.0f, r);
    const double p = (double)a * (double)b, s = p + (double)c;
    const double bb = s - p, e = (p - (s - bb)) + ((double)c - bb);
    const double lim = 0x1.ffffffp-127; /* 2^-126 - 2^-151 */
    const int tiny = fabs(s) < lim || (fabs(s) == lim && e != 0 && (e < 0) != (s < 0));
    return tiny ? copysignf(0.0f, r) : r;
}

/* TDPBF16PS with its shape rules (#UD otherwise, class AMX-E4): three different tiles,
 * colsb multiples of 4, C.rows = A.rows, A.colsb / 4 = B.rows, C.colsb = B.colsb. */
static inline void sdpa_amx_dpbf16ps(int tc, int ta, int tb) {
    sdpa_amx_tile *c = sdpa_amx_use(tc);
    const sdpa_amx_tile *a = sdpa_amx_use(ta), *b = sdpa_amx_use(tb);
    sdpa_amx_check(tc != ta && tc != tb && ta != tb, "TDPBF16PS: the tiles must differ");
    sdpa_amx_check(c->colsb % 4 == 0 && a->colsb % 4 == 0 && b->colsb % 4 == 0 &&
                       c->rows == a->rows && a->colsb / 4 == b->rows && c->colsb == b->colsb,
                   "TDPBF16PS: tile shapes do not match");
    const int M = c->rows, N = c->colsb / 4, K = a->colsb / 4;
    for (int m = 0; m < M; m++) {
        float even[16] = {0}, odd[16] = {0}, acc[16];
        memcpy(acc, c->data[m], (size_t)N * sizeof(float));
        for (int k = 0; k < K; k++) {
            uint16_t a2[2];
            memcpy(a2, &a->data[m][4 * k], sizeof a2);
            const float a0 = sdpa_amx_bf16(a2[0]), a1 = sdpa_amx_bf16(a2[1]);
            for (int n = 0; n < N; n++) {
                uint16_t b2[2];
                memcpy(b2, &b->data[k][4 * n], sizeof b2);
                even[n] = sdpa_amx_fma(a0, sdpa_amx_bf16(b2[0]), even[n]);
                odd[n] = sdpa_amx_fma(a1, sdpa_amx_bf16(b2[1]), odd[n]);
            }
        }
        for (int n = 0; n < N; n++)
            acc[n] = sdpa_amx_fma(1.0f, acc[n], sdpa_amx_fma(1.0f, even[n], odd[n]));
        memset(c->data[m], 0, 64);
        memcpy(c->data[m], acc, (size_t)N * sizeof(float));
    }
}

/* The intrinsics' names (tile numbers as the first arguments, as constants there). gcc's
 * <immintrin.h> defines some of them as macros whatever the -m flags: replaced. */
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbf16ps
#define _tile_loadconfig(cfg) sdpa_amx_loadconfig(cfg)
#define _tile_release() sdpa_amx_release()
#define _tile_zero(t) sdpa_amx_zero(t)
#define _tile_loadd(t, base, stride) sdpa_amx_loadd((t), (base), (long)(stride))
#define _tile_stored(t, base, stride) sdpa_amx_stored((t), (base), (long)(stride))
#define _tile_dpbf16ps(c, a, b) sdpa_amx_dpbf16ps((c), (a), (b))

#endif /* SDPA_AMX_MODEL_H */
