/*
 * amx.c - the AMX kernel table: the bf16 compute mode's QK^T and P V (SDPA_COMPUTE_BF16;
 * pack_q_bf16, pack_k_bf16, qk_bf16, pack_v_bf16, pv_bf16 of kernels/ukernel.h) on Intel
 * AMX tiles: TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one in pair layout into a
 * 16 x 16 fp32 tile (8192 multiply-adds an instruction).
 *
 * It is not a complete table: it sets its ISA, its name, the bf16 alignments and the
 * five bf16 entries; the registry (src/dispatch.c) starts it from the avx512bf16 row's
 * table, so its fp32 tiles, softmax, Br = 96 and Bc = 64 are the avx512 row's. The
 * packing layouts and functions are kernels/x86/bf16.h's, shared with avx512bf16: a
 * 32-dim step of a 16-key strip of Kpb is a B tile (K^T in pair layout), 16 key pairs at
 * 16 dims of Vpb are a B tile, and the A tiles are Qb's rows in place and P's rows
 * rounded to bf16 on the stack.
 *
 * Built with -DSDPA_AMX_MODEL (`make AMX_MODEL=1`), the same source runs on the tile
 * model kernels/amx/amx_model.h instead of the instructions, on any host with
 * AVX512_BF16 (the code around the tiles, the packing and P's rounding, is AVX-512 with
 * vcvtne2ps2bf16): that build's amx row is usable there, and the suite tests this file.
 *
 * Tile state. Each call configures the tiles (LDTILECFG) on entry and releases them
 * (TILERELEASE) on return, and keeps nothing between calls. The tile registers and
 * their configuration are per thread and caller-saved (the x86-64 psABI's tile data
 * registers are volatile, and compilers reload a configuration after any call, which
 * may change it), so whatever runs on a thread between two calls (another table, a
 * caller's own AMX code) may change them, and nothing here relies on them; a released
 * thread also costs the OS no tile state to save at a context switch. The price is two
 * instructions a call, against the call's TDPBF16PS (96 of them for QK^T at Br = 96,
 * Bc = 64, Dk = 128); it is not measured here (no host of this project has AMX).
 *
 * Tiles (the same shapes for QK^T and P V; row blocks of 16 query rows, the last one
 * `rows1` rows):
 *     C (fp32, 16 x 16):  0 = (block a, cols 0-15), 1 = (a, 16-31),
 *                         2 = (block b, 0-15),     3 = (b, 16-31)
 *     A (bf16, rows x 32): 4 = block a, 5 = block b
 *     B (bf16 pairs, 16 x 16 x 2): 6 = cols 0-15, 7 = cols 16-31
 * so a step loads 2 A and 2 B tiles for 4 TDPBF16PS. Arithmetic is the instruction's:
 * bf16 subnormal inputs read as zero, subnormal fp32 results flush to zero (DAZ, FTZ),
 * which include/sdpa.h's error model allows. Every row of a C tile is its own sum, the
 * same instructions whatever m is, so a row's results are the same bits in any call.
 */
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512DQ__) ||        \
    !defined(__AVX512VL__) || !defined(__FMA__) || !defined(__F16C__) ||                \
    !defined(__AVX512BF16__)
#error "kernels/amx/ needs the avx512bf16 flags (sources.mk)"
#endif
/* gcc names the flags' macros __AMX_TILE__ and __AMX_BF16__, clang __AMXTILE__ and
 * __AMXBF16__ */
#if !defined(SDPA_AMX_MODEL) && !((defined(__AMX_TILE__) && defined(__AMX_BF16__)) ||      \
                                  (defined(__AMXTILE__) && defined(__AMXBF16__)))
#error "kernels/amx/ needs -mamx-tile -mamx-bf16, or -DSDPA_AMX_MODEL for the tile model"
#endif

#include <string.h>

#include "../x86/vec_avx512.h"
#include "../x86/bf16.h"
#ifdef SDPA_AMX_MODEL
#include "amx_model.h"
#endif

/* TDPBF16PS's shapes: 16 rows of 64 bytes (16 fp32, or 32 bf16, or 16 bf16 pairs). A
 * 32-dim step of a Kpb strip (16 pairs x 16 keys) is KSTEP elements, one pair row 64
 * bytes; a C tile stored to the stack is CTILE floats, rows 64 bytes apart. */
enum { TROWS = 16, TCOLSB = 64, KSTEP = 16 * 2 * KPB_KEYS, CTILE = TROWS * 16 };

/* The LDTILECFG operand, palette 1 (Intel SDM vol. 2, LDTILECFG): 64 bytes, colsb of
 * tile t at bytes 16 + 2t, rows at byte 48 + t, everything else zero. */
typedef struct {
    uint8_t palette, start_row, reserved0[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_cfg;
_Static_assert(sizeof(tile_cfg) == 64, "LDTILECFG reads 64 bytes");

/* Makes the stores to *p before it complete before the tile instruction after it.
 * gcc's AMX intrinsics are asm statements that declare no memory read (TILELOADD) or
 * only the first 8 bytes (LDTILECFG), so without this the compiler may sink or drop
 * stores a tile load reads; clang's are builtins that know, and the model is C. */
static inline void tile_reads(const void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

/* Configures the eight tiles above, block b's (C 2 and 3, A 5) with rows1 rows. */
static void tile_config(int rows1) {
    _Alignas(64) tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.colsb[t] = TCOLSB;
        c.rows[t] = TROWS;
    }
    c.rows[2] = c.rows[3] = c.rows[5] = (uint8_t)rows1;
    tile_reads(&c);
    _tile_loadconfig(&c);
}

/* The row blocks of m rows, two at a time: blocks blk and blk + 1 of 16 rows each, the
 * last one m % 16 when that is not 0. A pair is blocks a and b; a lone last block is
 * block a when it has 16 rows, block b (whose rows the configuration sets) when fewer.
 * Returns the pair, and reconfigures the tiles when block b's rows differ from *cfg's. */
typedef struct {
    int a, b;          /* block a / block b present */
    int row_a, row_b;  /* their first rows */
    int rows_b;        /* rows of block b */
} row_pair;

static row_pair pair_of(int m, int blk, int *cfg) {
    const int nblk = (m + TROWS - 1) / TROWS, nfull = m / TROWS;
    row_pair g;
    if (blk + 1 < nblk) {
        g = (row_pair){1, 1, blk * TROWS, (blk + 1) * TROWS, blk + 1 < nfull ? TROWS : m % TROWS};
    } else if (blk < nfull) {
        g = (row_pair){1, 0, blk * TROWS, 0, TROWS};
    } else {
        g = (row_pair){0, 1, 0, blk * TROWS, m % TROWS};
    }
    if (*cfg != g.rows_b) {
        tile_config(g.rows_b);
        *cfg = g.rows_b;
    }
    return g;
}

/* ---- qk_bf16 --------------------------------------------------------------------- */

/* S tiles of blocks a (A) and b (B) by key strips 0 and, when S1, 1: C = sum over the
 * 32-dim steps of Qb rows (A tiles, in place) times the strips' steps (B tiles, Kpb's
 * 16 pairs x 16 keys, 64 bytes a row), stored to S unscaled. Tile numbers are literals:
 * the intrinsics take them as immediates. */
ALWAYS_INLINE void qk_group(const int A, const int B, const int S1, int ksteps,
                            const uint16_t *qa, const uint16_t *qb, int ldq, const uint16_t *k0,
                            size_t kstride, float *sa, float *sb, int lds) {
    const long ldqb = 2L * ldq, ldsb = 4L * lds;
    if (A) {
        _tile_zero(0);
        if (S1)
            _tile_zero(1);
    }
    if (B) {
        _tile_zero(2);
        if (S1)
            _tile_zero(3);
    }
    for (int t = 0; t < ksteps; t++) {
        if (A)
            _tile_loadd(4, qa + 32 * t, ldqb);
        if (B)
            _tile_loadd(5, qb + 32 * t, ldqb);
        _tile_loadd(6, k0 + (size_t)t * KSTEP, TCOLSB);
        if (S1)
            _tile_loadd(7, k0 + kstride + (size_t)t * KSTEP, TCOLSB);
        if (A) {
            _tile_dpbf16ps(0, 4, 6);
            if (S1)
                _tile_dpbf16ps(1, 4, 7);
        }
        if (B) {
            _tile_dpbf16ps(2, 5, 6);
            if (S1)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    if (A) {
        _tile_stored(0, sa, ldsb);
        if (S1)
            _tile_stored(1, sa + KPB_KEYS, ldsb);
    }
    if (B) {
        _tile_stored(2, sb, ldsb);
        if (S1)
            _tile_stored(3, sb + KPB_KEYS, ldsb);
    }
}

/* S = scale Qb Kb^T: per pair of row blocks and pair of 16-key strips, ceil(dk / 32)
 * steps of 2 A and 2 B tile loads and 4 TDPBF16PS (Qb and Kpb are zero from dk to the
 * next 32); then S's rows times scale, in place, over round_up(n, 16) columns (the
 * contract lets qk_bf16 write up to round_up(n, kpb_align)). */
static void amx_qk_bf16(int m, int n, int dk, float scale, const uint16_t *q, int ldq,
                        const uint16_t *kp, float *s, int lds) {
    const int ksteps = (dk + 31) / 32, nstrip = (n + KPB_KEYS - 1) / KPB_KEYS;
    const size_t kstride = (size_t)KSTEP * (size_t)ksteps;
    int cfg = -1;
    for (int blk = 0; blk * TROWS < m; blk += 2) {
        const row_pair g = pair_of(m, blk, &cfg);
        const uint16_t *qa = q + (size_t)g.row_a * (size_t)ldq;
        const uint16_t *qb = q + (size_t)g.row_b * (size_t)ldq;
        for (int st = 0; st < nstrip; st += 2) {
            const uint16_t *k0 = kp + (size_t)st * kstride;
            float *sa = s + (size_t)g.row_a * (size_t)lds + KPB_KEYS * st;
            float *sb = s + (size_t)g.row_b * (size_t)lds + KPB_KEYS * st;
            const int s1 = st + 1 < nstrip;
            if (g.a && g.b && s1)
                qk_group(1, 1, 1, ksteps, qa, qb, ldq, k0, kstride, sa, sb, lds);
            else if (g.a && g.b)
                qk_group(1, 1, 0, ksteps, qa, qb, ldq, k0, kstride, sa, sb, lds);
            else if (g.a && s1)
                qk_group(1, 0, 1, ksteps, qa, qb, ldq, k0, kstride, sa, sb, lds);
            else if (g.a)
                qk_group(1, 0, 0, ksteps, qa, qb, ldq, k0, kstride, sa, sb, lds);
            else if (s1)
                qk_group(0, 1, 1, ksteps, qa, qb, ldq, k0, kstride, sa, sb, lds);
            else
                qk_group(0, 1, 0, ksteps, qa, qb, ldq, k0, kstride, sa, sb, lds);
        }
    }
    _tile_release();
    const vf vs = v_set1(scale);
    for (int r = 0; r < m; r++)
        for (int j = 0; j < nstrip * KPB_KEYS; j += VL) {
            float *x = s + (size_t)r * (size_t)lds + j;
            v_storeu(x, v_loadu(x) * vs);
        }
}

/* ---- pv_bf16 --------------------------------------------------------------------- */

/* P V tiles of blocks a and b by 16-dim column blocks 0 and, when D1, 1: C = sum over
 * the 32-key steps of P's bf16 rows (A tiles from pb, rows KC elements apart) times
 * Vpb's 16 key pairs at the blocks' dims (B tiles, rows 2 dvs elements apart), stored
 * to acc (tile i at acc + CTILE i, rows 16 floats apart). */
ALWAYS_INLINE void pv_group(const int A, const int B, const int D1, int ksteps,
                            const uint16_t *pa, const uint16_t *pbb, long ldpb, const uint16_t *v0,
                            size_t vstride, float *acc) {
    const long ldvb = 2L * (long)vstride;
    if (A) {
        _tile_zero(0);
        if (D1)
            _tile_zero(1);
    }
    if (B) {
        _tile_zero(2);
        if (D1)
            _tile_zero(3);
    }
    for (int t = 0; t < ksteps; t++) {
        const uint16_t *vt = v0 + (size_t)t * TROWS * vstride;
        if (A)
            _tile_loadd(4, pa + 32 * t, ldpb);
        if (B)
            _tile_loadd(5, pbb + 32 * t, ldpb);
        _tile_loadd(6, vt, ldvb);
        if (D1)
            _tile_loadd(7, vt + 2 * 16, ldvb);
        if (A) {
            _tile_dpbf16ps(0, 4, 6);
            if (D1)
                _tile_dpbf16ps(1, 4, 7);
        }
        if (B) {
            _tile_dpbf16ps(2, 5, 6);
            if (D1)
                _tile_dpbf16ps(3, 5, 7);
        }
    }
    if (A) {
        _tile_stored(0, acc, TCOLSB);
        if (D1)
            _tile_stored(1, acc + CTILE, TCOLSB);
    }
    if (B) {
        _tile_stored(2, acc + 2 * CTILE, TCOLSB);
        if (D1)
            _tile_stored(3, acc + 3 * CTILE, TCOLSB);
    }
}

/* O[r][d0 + 0..cols) = alpha O + the tile's row r (alpha NULL: O + it), one rounding
 * (an FMA), for r < rows; O's other columns are neither read nor written. */
static inline void pv_finish(int rows, int cols, const float *acc, const float *alpha, float *o,
                             int ldo) {
    const vtail t = v_tail(cols);
    for (int r = 0; r < rows; r++) {
        float *orow = o + (size_t)r * (size_t)ldo;
        const vf x = v_load_part(orow, t), c = v_loadu(acc + VL * r);
        if (alpha)
            v_store_part(orow, t, v_fmadd(v_set1(alpha[r]), x, c));
        else
            v_store_part(orow, t, x + c);
    }
}

/* O = alpha O + bf16(P) Vb: per pair of row blocks, P's rows rounded to bf16 pairs KC
 * keys at a time into a stack buffer (zero past n), then per pair of 16-dim column
 * blocks ceil(keys / 32) steps of 2 A and 2 B tile loads and 4 TDPBF16PS into zeroed C
 * tiles, which pv_finish adds to O. A row's sum is its keys' tile products, then O
 * (alpha applied with the first KC keys), whatever the other rows. */
static void amx_pv_bf16(int m, int n, int dv, const float *p, int ldp, const uint16_t *vp,
                        const float *alpha, float *o, int ldo) {
    enum { KC = 128 }; /* keys per pass: pb is 2 blocks x 16 rows x KC bf16 = 8 KiB */
    _Alignas(64) uint16_t pb[2 * TROWS * KC];
    _Alignas(64) float acc[4 * CTILE];
    const int dvs = round_up_int(dv, 16), ndb = dvs / 16;
    const size_t vstride = 2 * (size_t)dvs;
    int cfg = -1;
    for (int blk = 0; blk * TROWS < m; blk += 2) {
        const row_pair g = pair_of(m, blk, &cfg);
        const int rows_a = TROWS, rows_b = g.rows_b;
        for (int j0 = 0; j0 < n; j0 += KC) {
            const int kc = min_int(KC, n - j0), kcp = round_up_int(kc, 32);
            if (g.a)
                p_rows_bf16(rows_a, kc, kcp, p + (size_t)g.row_a * (size_t)ldp + j0, ldp, pb, KC);
            if (g.b)
                p_rows_bf16(rows_b, kc, kcp, p + (size_t)g.row_b * (size_t)ldp + j0, ldp,
                            pb + TROWS * KC, KC);
            tile_reads(pb);
            const float *al = j0 == 0 ? alpha : NULL;
            for (int db = 0; db < ndb; db += 2) {
                const uint16_t *v0 = vp + (size_t)j0 * (size_t)dvs + 2 * 16 * (size_t)db;
                const int d1 = db + 1 < ndb, ksteps = kcp / 32;
                if (g.a && g.b && d1)
                    pv_group(1, 1, 1, ksteps, pb, pb + TROWS * KC, 2 * KC, v0, vstride, acc);
                else if (g.a && g.b)
                    pv_group(1, 1, 0, ksteps, pb, pb + TROWS * KC, 2 * KC, v0, vstride, acc);
                else if (g.a && d1)
                    pv_group(1, 0, 1, ksteps, pb, pb + TROWS * KC, 2 * KC, v0, vstride, acc);
                else if (g.a)
                    pv_group(1, 0, 0, ksteps, pb, pb + TROWS * KC, 2 * KC, v0, vstride, acc);
                else if (d1)
                    pv_group(0, 1, 1, ksteps, pb, pb + TROWS * KC, 2 * KC, v0, vstride, acc);
                else
                    pv_group(0, 1, 0, ksteps, pb, pb + TROWS * KC, 2 * KC, v0, vstride, acc);
                for (int h = 0; h < 1 + d1; h++) {
                    const int d0 = 16 * (db + h), cols = min_int(16, dv - d0);
                    if (g.a)
                        pv_finish(rows_a, cols, acc + CTILE * h, al ? al + g.row_a : NULL,
                                  o + (size_t)g.row_a * (size_t)ldo + d0, ldo);
                    if (g.b)
                        pv_finish(rows_b, cols, acc + CTILE * (2 + h), al ? al + g.row_b : NULL,
                                  o + (size_t)g.row_b * (size_t)ldo + d0, ldo);
                }
            }
        }
    }
    _tile_release();
}

/* Only the bf16 entries; everything else is the avx512bf16 row's (the avx512 row's). */
const sdpa_kernels sdpa_kernels_amx = {
    .isa = SDPA_ISA_AMX, .name = "amx",
    .kpb_align = KPB_KEYS, .vpb_align = VPB_KEYS,
    .pack_q_bf16 = x86_pack_q_bf16, .pack_k_bf16 = x86_pack_k_bf16, .qk_bf16 = amx_qk_bf16,
    .pack_v_bf16 = x86_pack_v_bf16, .pv_bf16 = amx_pv_bf16,
};
