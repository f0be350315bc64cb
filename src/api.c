/*
 * api.c - the small public helpers: status strings, the version, tensor-view builders.
 *
 * Nothing here computes attention or touches tensor data.
 */
#include <math.h>

#include "internal.h"

const char *sdpa_strerror(sdpa_status status) {
    switch (status) {
    case SDPA_OK:
        return "success";
    case SDPA_ERR_NULL_POINTER:
        return "a required pointer is NULL";
    case SDPA_ERR_BAD_DIMENSION:
        return "a dimension is out of range (<= 0 or above the documented maximum)";
    case SDPA_ERR_BAD_HEADS:
        return "heads_q is not a multiple of heads_kv";
    case SDPA_ERR_BAD_STRIDE:
        return "a stride is negative, or an output's strides map two elements to one address";
    case SDPA_ERR_OVERFLOW:
        return "an operand's extent overflows 64-bit offsets or the address space";
    case SDPA_ERR_OVERLAP:
        return "an output shares memory with an input or with the other output";
    case SDPA_ERR_BAD_DTYPE:
        return "unknown dtype, or one the operand does not accept";
    case SDPA_ERR_BAD_ARGUMENT:
        return "a descriptor field is out of range";
    case SDPA_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case SDPA_ERR_UNSUPPORTED_ISA:
        return "the requested ISA is not built in or not usable on this CPU";
    case SDPA_ERR_MISALIGNED:
        return "a data pointer is not aligned to its element size";
    case SDPA_ERR_BAD_LENGTHS:
        return "sequence lengths (q_lens, kv_lens, cu_seqlens) out of range or inconsistent";
    }
    return "unknown status";
}

const char *sdpa_version(void) { return SDPA_VERSION_STRING; }

/* Strides of a contiguous 4-d tensor; a product that overflows int64 saturates, so
 * validation reports SDPA_ERR_OVERFLOW rather than wrapping to a plausible stride. */
static int64_t mul_sat(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

sdpa_tensor sdpa_tensor_bhtd(const void *data, sdpa_dtype dtype, int64_t heads, int64_t len,
                             int64_t dim) {
    sdpa_tensor t = {.data = (void *)(uintptr_t)data, .dtype = dtype};
    t.stride_t = dim;
    t.stride_h = mul_sat(len, dim);
    t.stride_b = mul_sat(heads, t.stride_h);
    return t;
}

sdpa_tensor sdpa_tensor_bthd(const void *data, sdpa_dtype dtype, int64_t heads, int64_t len,
                             int64_t dim) {
    sdpa_tensor t = {.data = (void *)(uintptr_t)data, .dtype = dtype};
    t.stride_h = dim;
    t.stride_t = mul_sat(heads, dim);
    t.stride_b = mul_sat(len, t.stride_t);
    return t;
}

sdpa_status sdpa_alibi_slopes(int64_t heads, float max_bias, float *slopes) {
    if (heads < 1 || heads > SDPA_MAX_DIM)
        return SDPA_ERR_BAD_DIMENSION;
    if (!isfinite(max_bias) || max_bias < 0.0f)
        return SDPA_ERR_BAD_ARGUMENT;
    sdpa_span sp;
    const sdpa_status st = sdpa_check_array(slopes, heads, sizeof(float), &sp);
    if (st != SDPA_OK)
        return st;
    const double b = max_bias == 0.0f ? 8.0 : (double)max_bias;
    int64_t n = 1; /* the largest power of two <= heads */
    while (n <= heads / 2)
        n *= 2;
    /* exp2 of a double exponent, then one rounding to float: the exponents are exact
     * (b (h + 1) and n are exact in double up to 2^53) up to the division's rounding */
    for (int64_t h = 0; h < heads; h++)
        slopes[h] = (float)(h < n ? exp2(-b * (double)(h + 1) / (double)n)
                                  : exp2(-b * (double)(2 * (h - n) + 1) / (double)(2 * n)));
    return SDPA_OK;
}
