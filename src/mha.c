/*
 * mha.c - the multi-head attention layer of the seeds' notebooks, on top of the fused
 * attention: Q/K/V projections, heads split by strides (no copy), sdpa, heads merged in
 * place, output projection (sdpa.h, sdpa_mha_desc).
 *
 * It only orchestrates: the projections are sdpa_linear_with (the kernel table's QK^T
 * microkernel), the attention is the fused driver, both on the table chosen once per
 * call. It is not a training layer: forward only, no gradients, no KV cache management.
 *
 * Head split without copies: a projection writes [B, T, H * Dh] row-major, which is the
 * [B, T, H, Dh] tensor PyTorch's .view() makes, i.e. sdpa_tensor_bthd; the fused path
 * writes its output in the same layout, so merging heads (transpose + reshape in the
 * seeds) is also free.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Floats of one workspace array, rounded to a 64-byte line. */
static size_t line_floats(int64_t n) { return ((size_t)n + 15) / 16 * 16; }

typedef struct mha_shape {
    int64_t B, T, Tkv, din, dkv, Hq, Hkv, Dh, dout, dq, dk; /* dq = Hq Dh, dk = Hkv Dh */
    int has_wo;
} mha_shape;

/* Checks the descriptor's shape and parameter pointers (not the data). */
static sdpa_status mha_shape_of(const sdpa_mha_desc *d, int cross, mha_shape *s) {
    if (!d)
        return SDPA_ERR_NULL_POINTER;
    s->B = d->batch;
    s->T = d->len_q;
    s->Tkv = d->len_kv ? d->len_kv : d->len_q;
    s->din = d->d_in;
    s->dkv = d->d_kv ? d->d_kv : d->d_in;
    s->Hq = d->heads_q;
    s->Hkv = d->heads_kv ? d->heads_kv : d->heads_q;
    s->Dh = d->head_dim;
    s->has_wo = d->wo.weight != NULL;
    const int64_t dims[8] = {s->B, s->T, s->Tkv, s->din, s->dkv, s->Hq, s->Hkv, s->Dh};
    for (int i = 0; i < 8; i++)
        if (dims[i] < 1 || dims[i] > SDPA_MAX_DIM)
            return SDPA_ERR_BAD_DIMENSION;
    if (s->Dh > SDPA_MAX_HEAD_DIM)
        return SDPA_ERR_BAD_DIMENSION;
    if (s->Hq % s->Hkv != 0)
        return SDPA_ERR_BAD_HEADS;
    if (__builtin_mul_overflow(s->Hq, s->Dh, &s->dq) || __builtin_mul_overflow(s->Hkv, s->Dh, &s->dk))
        return SDPA_ERR_OVERFLOW;
    s->dout = s->has_wo ? d->d_out : s->dq;
    if (s->dout < 1 || s->dout > SDPA_MAX_DIM)
        return SDPA_ERR_BAD_DIMENSION;
    /* self-attention reads K/V from x: the same rows and features */
    if (!cross && (s->Tkv != s->T || s->dkv != s->din))
        return SDPA_ERR_BAD_ARGUMENT;
    if (d->in_proj_weight) { /* packed: the separate projections stay unset */
        if (d->wq.weight || d->wk.weight || d->wv.weight || d->wq.bias || d->wk.bias ||
            d->wv.bias || s->dkv != s->din)
            return SDPA_ERR_BAD_ARGUMENT;
    } else {
        if (d->in_proj_bias)
            return SDPA_ERR_BAD_ARGUMENT;
        if (!d->wq.weight || !d->wk.weight || !d->wv.weight)
            return SDPA_ERR_NULL_POINTER;
    }
    /* the layer sets the attention's shape; the caller sets only its options */
    const sdpa_desc *a = &d->attn;
    if (a->batch || a->heads_q || a->heads_kv || a->len_q || a->len_kv || a->dim_qk ||
        a->dim_v || a->cu_seqlens_q || a->cu_seqlens_kv)
        return SDPA_ERR_BAD_ARGUMENT;
    /* the layer's K and V are its own fp32 projections: no cache storage */
    if (a->k_scales.data || a->v_scales.data || a->pages.block_table)
        return SDPA_ERR_BAD_ARGUMENT;
    return SDPA_OK;
}

/* Workspace layout: Q, K, V, C (merged heads), lse. */
static size_t mha_floats(const mha_shape *s, size_t off[5]) {
    const int64_t n[5] = {s->B * s->T * s->dq, s->B * s->Tkv * s->dk, s->B * s->Tkv * s->dk,
                          s->B * s->T * s->dq, s->B * s->Hq * s->T};
    size_t total = 0;
    for (int i = 0; i < 5; i++) {
        off[i] = total;
        total += line_floats(n[i]);
    }
    return total;
}

size_t sdpa_mha_workspace_size(const sdpa_mha_desc *d) {
    mha_shape s;
    size_t off[5];
    /* the cross-attention shape bounds the self-attention one */
    if (mha_shape_of(d, 1, &s) != SDPA_OK)
        return 0;
    /* in double from the factors up: B T alone can pass int64 (each is up to 2^40) */
    const double B = (double)s.B;
    double bytes = 4.0 * (B * (double)s.T * 2.0 * (double)s.dq +
                          2.0 * B * (double)s.Tkv * (double)s.dk + B * (double)s.Hq * (double)s.T);
    if (bytes > (double)PTRDIFF_MAX / 2)
        return 0;
    return mha_floats(&s, off) * sizeof(float);
}

/* *bytes = a b c d floats in bytes; 0 when that overflows int64 (each factor may be up to
 * 2^40, so the product must be checked, not just computed). */
static int float_bytes(size_t *bytes, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t n;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_mul_overflow(n, d, &n) || __builtin_mul_overflow(n, (int64_t)sizeof(float), &n))
        return 0;
    *bytes = (size_t)n;
    return 1;
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t al = (uintptr_t)a, bl = (uintptr_t)b;
    return a && b && al < bl + bn && bl < al + an;
}

sdpa_status sdpa_mha_forward(const sdpa_mha_desc *d, const float *x, const float *kv, float *y,
                             float *weights, void *workspace) {
    mha_shape s;
    sdpa_status st = mha_shape_of(d, kv != NULL, &s);
    if (st != SDPA_OK)
        return st;
    if (!x || !y)
        return SDPA_ERR_NULL_POINTER;
    if ((uintptr_t)workspace % 64)
        return SDPA_ERR_MISALIGNED;
    if (sdpa_mha_workspace_size(d) == 0)
        return SDPA_ERR_OVERFLOW;
    size_t xb, kvb, yb, wb = 0;
    if (!float_bytes(&xb, s.B, s.T, s.din, 1) || !float_bytes(&kvb, s.B, s.Tkv, s.dkv, 1) ||
        !float_bytes(&yb, s.B, s.T, s.dout, 1) ||
        (weights && !float_bytes(&wb, s.B, s.Hq, s.T, s.Tkv)))
        return SDPA_ERR_OVERFLOW;
    if (overlaps(y, yb, x, xb) || overlaps(y, yb, kv, kvb) || overlaps(y, yb, weights, wb) ||
        overlaps(weights, wb, x, xb) || overlaps(weights, wb, kv, kvb))
        return SDPA_ERR_OVERLAP;

    /* the attention, validated before any work so a bad option writes nothing */
    size_t off[5];
    const size_t total = mha_floats(&s, off);
    float *ws = workspace;
    float *own = NULL;
    if (!ws) {
        ws = own = sdpa_alloc(total * sizeof(float));
        if (!ws)
            return SDPA_ERR_OUT_OF_MEMORY;
    }
    float *Q = ws + off[0], *K = ws + off[1], *V = ws + off[2], *C = ws + off[3], *lse = ws + off[4];
    sdpa_desc a = d->attn;
    a.batch = s.B;
    a.heads_q = s.Hq;
    a.heads_kv = s.Hkv;
    a.len_q = s.T;
    a.len_kv = s.Tkv;
    a.dim_qk = s.Dh;
    a.dim_v = s.Dh;
    const sdpa_tensor tq = sdpa_tensor_bthd(Q, SDPA_F32, s.Hq, s.T, s.Dh);
    const sdpa_tensor tk = sdpa_tensor_bthd(K, SDPA_F32, s.Hkv, s.Tkv, s.Dh);
    const sdpa_tensor tv = sdpa_tensor_bthd(V, SDPA_F32, s.Hkv, s.Tkv, s.Dh);
    const sdpa_tensor tc = sdpa_tensor_bthd(C, SDPA_F32, s.Hq, s.T, s.Dh);
    sdpa_problem p, pw;
    const sdpa_kernels *kt = NULL;
    st = sdpa_validate(&a, &tq, &tk, &tv, &tc, lse, &p);
    if (st == SDPA_OK && weights)
        st = sdpa_validate_weights(&a, &tq, &tk, lse, weights, &pw);
    if (st == SDPA_OK && !(kt = sdpa_dispatch_table((sdpa_isa)a.isa, a.compute)))
        st = SDPA_ERR_UNSUPPORTED_ISA;
    if (st != SDPA_OK) {
        sdpa_free(own);
        return st;
    }

    const float *in = kv ? kv : x;
    const float *wq = d->wq.weight, *wk = d->wk.weight, *wv = d->wv.weight;
    const float *bq = d->wq.bias, *bk = d->wk.bias, *bv = d->wv.bias;
    if (d->in_proj_weight) {
        wq = d->in_proj_weight;
        wk = wq + s.dq * s.din;
        wv = wk + s.dk * s.din;
        if (d->in_proj_bias) {
            bq = d->in_proj_bias;
            bk = bq + s.dq;
            bv = bk + s.dk;
        }
    }
    const int nt = a.num_threads;
    /* everything up to the attention writes only the workspace */
    st = sdpa_linear_with(kt, s.B * s.T, s.dq, s.din, x, s.din, wq, s.din, bq, Q, s.dq, nt, NULL);
    if (st == SDPA_OK)
        st = sdpa_linear_with(kt, s.B * s.Tkv, s.dk, s.dkv, in, s.dkv, wk, s.dkv, bk, K, s.dk, nt,
                              NULL);
    if (st == SDPA_OK)
        st = sdpa_linear_with(kt, s.B * s.Tkv, s.dk, s.dkv, in, s.dkv, wv, s.dkv, bv, V, s.dk, nt,
                              NULL);
    if (st == SDPA_OK)
        st = sdpa_forward_with(kt, &p, a.stats);
    /* the two steps that write outputs (weights, y) share one scratch buffer allocated
     * before either runs, so running out of memory leaves both untouched */
    char *scr = NULL;
    if (st == SDPA_OK) {
        size_t need = weights ? sdpa_weights_scratch(kt, &pw) : 0;
        if (s.has_wo) {
            const size_t lin = sdpa_linear_scratch(kt, s.B * s.T, s.dout, s.dq, nt);
            need = lin > need ? lin : need;
        }
        if (!(scr = sdpa_alloc(need)))
            st = SDPA_ERR_OUT_OF_MEMORY;
    }
    if (st == SDPA_OK && weights)
        st = sdpa_weights_with(kt, &pw, weights, scr);
    if (st == SDPA_OK) {
        if (s.has_wo)
            st = sdpa_linear_with(kt, s.B * s.T, s.dout, s.dq, C, s.dq, d->wo.weight, s.dq,
                                  d->wo.bias, y, s.dout, nt, scr);
        else
            memcpy(y, C, yb);
    }
    sdpa_free(scr);
    sdpa_free(own);
    return st;
}
