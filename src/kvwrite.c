/*
 * kvwrite.c - sdpa_kv_write: new K or V rows into an engine's cache (plain or paged, any
 * storage type), encoded exactly as the kernels decode them (kernels/kvq.h, the formats
 * in include/sdpa.h). It is the quantizer of the library, not part of attention: nothing
 * here is read by sdpa_forward.
 *
 * Per (entry b, head h, new row t), with row = pos[b] + t of the cache:
 *     scale_g = amax_g / Q  (computed, stored, then read back: codes use the stored value;
 *                            int8's fp32 scales rounded up to 17 significant bits)
 *     c_d     = sat(rne(x_d / scale_{d / G}))
 * where amax_g is the largest finite |x| of group g, Q the format's largest code
 * magnitude (int8 127, int4 7, e4m3 448, e5m2 57344) and sat clamps to it. Every step is
 * one correctly rounded fp32 operation or an exact bit manipulation, so the bytes do not
 * depend on the compiler, the ISA or the thread count. The loops are plain C over fixed
 * chunks (the compiler vectorises them at the baseline ISA).
 */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../kernels/convert.h"
#include "driver.h"

/* Largest code magnitude of a format (OCP 8-bit floating point v1.0 for fp8). */
static float qmax(sdpa_dtype t) {
    switch (t) {
    case SDPA_I8: return 127.0f;
    case SDPA_I4: return 7.0f;
    case SDPA_FP8_E4M3: return 448.0f;
    default: return 57344.0f; /* SDPA_FP8_E5M2 */
    }
}

/* fp32 -> fp8, round to nearest even, saturating to +-max (inf too), NaN to NaN.
 * mbits mantissa bits, bias; the fp32 exponent of the format's smallest normal is
 * 1 - bias, below it the codes are multiples of 2^(1 - bias - mbits). */
static uint8_t enc_fp8(float y, int mbits, int bias, uint8_t maxcode, uint8_t nancode) {
    const uint32_t u = sdpa_bits_from_f32(y), a = u & 0x7fffffffu;
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (a > 0x7f800000u)
        return sign | nancode;
    const float mx = (mbits == 3) ? 448.0f : 57344.0f;
    if (sdpa_f32_from_bits(a) >= mx)
        return sign | maxcode;
    if (a < (uint32_t)(127 + 1 - bias) << 23) { /* below the smallest normal: exact scaling */
        const float t = sdpa_f32_from_bits(a) * ldexpf(1.0f, bias - 1 + mbits);
        return sign | (uint8_t)nearbyintf(t); /* may round up to the smallest normal code */
    }
    const int drop = 23 - mbits; /* RNE on the dropped fraction bits, then rebias */
    const uint32_t r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
    uint32_t code = r - ((uint32_t)(127 - bias) << mbits);
    if (code > maxcode)
        code = maxcode;
    return sign | (uint8_t)code;
}

static int8_t enc_int(float y, float q) {
    if (y != y)
        return 0;
    const float r = nearbyintf(y); /* +-inf stays, then saturates */
    return (int8_t)(r > q ? q : (r < -q ? -q : r));
}

/* n elements of x (one group), codes for scale s, into the row at element offset d0. */
static void encode(sdpa_dtype t, const float *x, int n, float s, unsigned char *row, int64_t d0) {
    const int inv_ok = s != 0.0f && isfinite(s);
    for (int d = 0; d < n; d++) {
        const float y = inv_ok ? x[d] / s : 0.0f;
        const int64_t e = d0 + d;
        switch (t) {
        case SDPA_I8:
            ((int8_t *)row)[e] = enc_int(y, 127.0f);
            break;
        case SDPA_I4: {
            const uint8_t c = (uint8_t)enc_int(y, 7.0f) & 15u;
            unsigned char *bp = row + e / 2;
            *bp = (e % 2) ? (unsigned char)((*bp & 0x0fu) | (c << 4))
                          : (unsigned char)((*bp & 0xf0u) | c);
            break;
        }
        case SDPA_FP8_E4M3:
            row[e] = enc_fp8(y, 3, 7, 0x7e, 0x7f);
            break;
        default: /* SDPA_FP8_E5M2 */
            row[e] = enc_fp8(y, 2, 15, 0x7b, 0x7e);
            break;
        }
    }
}

/* One source row (fp32 in x) into cache row `dst`; scales at element offset se. */
static void write_row(const sdpa_kv_write_desc *d, sdpa_dtype ct, const float *x, char *dst,
                      int64_t se) {
    if (!sdpa_dtype_quantized(ct)) {
        for (int64_t i = 0; i < d->dim; i++) {
            if (ct == SDPA_F32)
                ((float *)(void *)dst)[i] = x[i];
            else if (ct == SDPA_F16)
                ((uint16_t *)(void *)dst)[i] = sdpa_f32_to_f16(x[i]);
            else
                ((uint16_t *)(void *)dst)[i] = sdpa_f32_to_bf16(x[i]);
        }
        return;
    }
    const sdpa_scales *sc = &d->scales;
    const int64_t G = sc->group ? sc->group : d->dim;
    for (int64_t g = 0; g * G < d->dim; g++) {
        const float *xg = x + g * G;
        float s;
        if (d->compute_scales) {
            float amax = 0.0f;
            for (int64_t i = 0; i < G; i++) {
                const float a = fabsf(xg[i]);
                amax = (isfinite(a) && a > amax) ? a : amax;
            }
            s = amax / qmax(ct);
            if (sc->dtype == SDPA_F16) {
                uint16_t h = sdpa_f32_to_f16(s);
                if ((h & 0x7c00u) == 0x7c00u)
                    h = 0x7bffu; /* the largest finite f16: a scale stays finite */
                ((uint16_t *)(uintptr_t)sc->data)[se + g] = h;
            } else {
                if (ct == SDPA_I8) /* exact products with every code (convert.h) */
                    s = sdpa_i8_scale_round(s);
                ((float *)(uintptr_t)sc->data)[se + g] = s;
            }
        }
        s = sdpa_load_as_f32(sc->data, se + g, sc->dtype);
        encode(ct, xg, (int)G, s, (unsigned char *)dst, g * G);
    }
}

sdpa_status sdpa_kv_write(const sdpa_kv_write_desc *d, const sdpa_tensor *src,
                          const sdpa_tensor *cache) {
    sdpa_status st = sdpa_validate_kv_write(d, src, cache);
    if (st != SDPA_OK)
        return st;
    float *buf = NULL;
    int nt = 1;
#ifdef _OPENMP
    if (d->batch * d->len * d->heads * d->dim >= ((int64_t)1 << 18) &&
        !(omp_in_parallel() && d->num_threads == 0))
        nt = d->num_threads > 0 ? d->num_threads : omp_get_max_threads();
    if ((int64_t)nt > d->heads)
        nt = (int)d->heads;
#endif
    buf = sdpa_alloc((size_t)nt * round_up((size_t)d->dim * sizeof(float), 64));
    if (!buf)
        return SDPA_ERR_OUT_OF_MEMORY;
    const sdpa_dtype ct = cache->dtype;
    const int bits = sdpa_kv_bits(ct);
    const size_t ses = sdpa_dtype_size(src->dtype);
    const sdpa_pages *pg = &d->pages;
    const sdpa_scales *sc = &d->scales;
    /* heads in parallel: two heads never share a cache element (validated), while two
     * entries may share a page, so each head's rows go in the fixed order b, t */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
#endif
    for (int64_t h = 0; h < d->heads; h++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        float *x = buf + (size_t)tid * round_up((size_t)d->dim, 16);
        for (int64_t b = 0; b < d->batch; b++)
            for (int64_t t = 0; t < d->len; t++) {
                const char *srow = (const char *)src->data +
                                   (size_t)(b * src->stride_b + h * src->stride_h +
                                            t * src->stride_t) * ses;
                for (int64_t i = 0; i < d->dim; i++)
                    x[i] = sdpa_load_as_f32(srow, i, src->dtype);
                const int64_t row = (d->pos ? d->pos[b] : 0) + t;
                int64_t pb = b, slot = row;
                if (pg->block_table) {
                    pb = pg->block_table[b * pg->stride + row / pg->page_size];
                    slot = row % pg->page_size;
                }
                const int64_t e = pb * cache->stride_b + h * cache->stride_h + slot * cache->stride_t;
                const int64_t se = pb * sc->stride_b + h * sc->stride_h + slot * sc->stride_t;
                write_row(d, ct, x, (char *)cache->data + e * bits / 8, se);
            }
    }
    sdpa_free(buf);
    return SDPA_OK;
}
