/*
 * kvload.h - loading K and V elements into fp32 vectors, for every x86 vector width: the
 * 16-bit types widened, the quantized types decoded (kernels/kvq.h) and scaled, and the
 * scales of a quantized row read. Shared by the fp32 tiles (kernels/x86/tiles.h, through
 * avx2.c and avx512.c) and avx512bf16.c's decode pair, which rounds what it loads to bf16,
 * so both see the values `dequant` gives.
 *
 * It is not a header in the usual sense: it defines static functions, is included by an
 * ISA file (or tiles.h) after its vector layer (kernels/x86/vec_avx2.h, vec_avx512.h),
 * and holds no arithmetic of the tiles.
 */
#ifndef SDPA_X86_KVLOAD_H
#define SDPA_X86_KVLOAD_H

#ifndef SDPA_VEC_LAYER
#error "kernels/x86/kvload.h is compiled through an ISA file, after its vector layer"
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../convert.h"
#include "../kvq.h"

/* The lanes t of a row stored as dt from element i, widened exactly to fp32 (lanes
 * outside t are neither read nor faulted on: 0). */
ALWAYS_INLINE vf load_dt(const void *row, int i, sdpa_dtype dt, vtail t) {
    if (dt == SDPA_F16)
        return v_widen_f16(v_load_u16((const uint16_t *)row + i, t));
    if (dt == SDPA_BF16)
        return v_widen_bf16(v_load_u16((const uint16_t *)row + i, t));
    return v_load_tail((const float *)row + i, t);
}

/* 1 for the quantized storage types (a compile-time constant wherever dt is one). */
ALWAYS_INLINE int dt_quant(sdpa_dtype dt) {
    return dt == SDPA_I8 || dt == SDPA_I4 || dt == SDPA_FP8_E4M3 || dt == SDPA_FP8_E5M2;
}

/* Bytes of n elements stored as dt (n even for SDPA_I4, two codes per byte). */
ALWAYS_INLINE size_t dt_bytes(sdpa_dtype dt, size_t n) {
    if (dt == SDPA_I4)
        return n / 2;
    return dt_quant(dt) ? n : n * elem_bytes(dt);
}

/* The lanes t, the first nt of them, of a row stored as dt from element i, as fp32: the
 * 16-bit and fp32 types widened (load_dt), a quantized type decoded (kvq.h) and
 * multiplied by its scale sv, fl(value(code) * scale) as `dequant` gives it. Lanes
 * outside t are 0, also when the scale is inf or NaN. With fold (e4m3_fold) an e4m3
 * code's value comes without its 2^8 and sv carries it. */
ALWAYS_INLINE vf load_kv(const char *row, int i, sdpa_dtype dt, vtail t, int nt, vf sv,
                         int fold) {
    if (!dt_quant(dt))
        return load_dt(row, i, dt, t);
    const int raw = dt == SDPA_FP8_E4M3 && fold;
    if (nt < VL)
        return v_keep(t, (vf)kvq_codes_part(dt, (const unsigned char *)row, i, nt, raw) * sv);
    return (vf)kvq_codes_x(dt, (const unsigned char *)row, i, raw) * sv;
}

/* Scale i of a quantized row's scales at sp (bytes), fp32 or, where f16, binary16, in
 * every lane. */
ALWAYS_INLINE vf scale_at(const char *sp, int64_t i, int f16) {
    return f16 ? v_bcast_f16((const uint16_t *)(const void *)sp + i)
               : v_bcast((const float *)(const void *)sp + i);
}

/* The scale at sp as fp32 (binary16 where f16). */
ALWAYS_INLINE float scale_f32(const char *sp, int f16) {
    uint16_t h;
    float f;
    if (f16) {
        memcpy(&h, sp, sizeof h);
        return _cvtsh_ss(h);
    }
    memcpy(&f, sp, sizeof f);
    return f;
}

#endif /* SDPA_X86_KVLOAD_H */
