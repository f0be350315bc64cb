/*
 * peak_amx.c - the AMX-BF16 tile peak loop (see peak.h): TDPBF16PS on full tiles, the
 * instruction of the amx table's bf16 tiles, whose rate that table's bf16-compute rows
 * divide by. Compiled with the Makefile's ISAFLAGS_amx and only called when the library's
 * registry says amx is usable (peak.c), which includes the process's permission to use
 * the tile state (src/dispatch.c, usable_amx). Not a kernel: libsdpa never links it.
 */
/* gcc spells the feature macros __AMX_TILE__, clang __AMXTILE__ */
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_BF16__) || defined(__AMXBF16__))
#error "peak_amx.c needs -mamx-tile -mamx-bf16 (Makefile: ISAFLAGS_amx)"
#endif

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "peak.h"

/* The LDTILECFG layout (Intel SDM vol. 2, LDTILECFG): palette 1, then per tile its bytes
 * per row (16-bit, from byte 16) and its rows (byte 48 on). */
typedef struct tilecfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* Tiles 0-3 accumulate C (16 x 16 fp32), tile 4 is A (16 x 32 bf16), tiles 5-6 B (16
 * pairs x 16 x 2 bf16): four independent accumulators cover TDPBF16PS's latency (16
 * cycles on Sapphire Rapids, issued every 16 cycles per the Intel optimization manual's
 * AMX chapter, so one chain per unit suffices and four are margin). Each instruction
 * does 16 x 16 x 32 multiply-adds. A and B hold bf16 2^-10, so C grows by 2^-15 per
 * round: no overflow, nothing subnormal. */
double sb_peak_loop_amx(int64_t iters, float *sink) {
    static _Alignas(64) uint16_t ab[16 * 32];
    static _Alignas(64) float c[16 * 16];
    for (int i = 0; i < 16 * 32; i++)
        ab[i] = 0x3a80; /* bf16 2^-10 */
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 7; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ab, 64);
    _tile_loadd(5, ab, 64);
    _tile_loadd(6, ab, 64);
    for (int64_t i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 5);
        _tile_dpbf16ps(1, 4, 6);
        _tile_dpbf16ps(2, 4, 5);
        _tile_dpbf16ps(3, 4, 6);
    }
    float s = 0;
    _tile_stored(0, c, 64);
    s += c[0];
    _tile_stored(3, c, 64);
    s += c[255];
    _tile_release();
    *sink = s;
    return (double)iters * 4.0 * 16.0 * 16.0 * 32.0 * 2.0; /* tiles x M x N x K x 2 */
}
