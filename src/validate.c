/*
 * validate.c - input validation shared by sdpa_forward and sdpa_reference.
 *
 * Every check that can fail runs before either entry point allocates or writes
 * anything, so an error leaves the outputs untouched. The checks are exact integer
 * arithmetic with explicit overflow tests (64-bit element offsets everywhere); nothing
 * here reads tensor data (only the small caller arrays: sequence lengths, and the
 * per-head ALiBi slopes and sinks, which must be finite). This file does not decide how
 * to compute, only whether the request is well formed.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

#define CHECK(cond, status)      \
    do {                         \
        if (!(cond))             \
            return (status);     \
    } while (0)

/* The highest address one past a view's last byte may reach. Any extent beyond it
 * cannot describe memory a caller owns, so it is refused like an int64 overflow instead
 * of being read. On 64-bit targets: 2^56, the top of the largest user address space
 * there is (x86-64 with 5-level paging: 57-bit virtual addresses, user half below 2^56,
 * Intel SDM vol. 3A 4.5; AArch64: at most 52-bit virtual addresses, Arm ARM D8.1). On
 * 32-bit targets the end must not wrap, which the addition below checks. */
#if UINTPTR_MAX > 0xffffffffu
#define ADDRESS_TOP ((uintptr_t)1 << 56)
#else
#define ADDRESS_TOP UINTPTR_MAX
#endif

sdpa_status sdpa_extent(const void *data, size_t esize, int ndims, const int64_t *n,
                        const int64_t *s, int64_t d, sdpa_span *out) {
    CHECK(data != NULL, SDPA_ERR_NULL_POINTER);
    CHECK((uintptr_t)data % esize == 0, SDPA_ERR_MISALIGNED);
    for (int i = 0; i < ndims; i++)
        CHECK(s[i] >= 0, SDPA_ERR_BAD_STRIDE);
    int64_t last = d - 1; /* offset of the last element, in elements */
    for (int i = 0; i < ndims; i++) {
        int64_t t;
        CHECK(!__builtin_mul_overflow(n[i] - 1, s[i], &t), SDPA_ERR_OVERFLOW);
        CHECK(!__builtin_add_overflow(last, t, &last), SDPA_ERR_OVERFLOW);
    }
    int64_t bytes;
    CHECK(!__builtin_add_overflow(last, (int64_t)1, &bytes), SDPA_ERR_OVERFLOW);
    CHECK(!__builtin_mul_overflow(bytes, (int64_t)esize, &bytes), SDPA_ERR_OVERFLOW);
    CHECK((uint64_t)bytes <= (uint64_t)PTRDIFF_MAX && (uint64_t)bytes <= (uint64_t)SIZE_MAX,
          SDPA_ERR_OVERFLOW);
    uintptr_t lo = (uintptr_t)data, hi;
    CHECK(!__builtin_add_overflow(lo, (uintptr_t)bytes, &hi) && hi <= ADDRESS_TOP,
          SDPA_ERR_OVERFLOW);
    out->lo = lo;
    out->hi = hi;
    return SDPA_OK;
}

#define TRY(call)                        \
    do {                                 \
        sdpa_status st_ = (call);        \
        if (st_ != SDPA_OK)              \
            return st_;                  \
    } while (0)

int sdpa_spans_overlap(sdpa_span a, sdpa_span b) { return a.lo < b.hi && b.lo < a.hi; }

/* An output view must map distinct elements to distinct addresses. Sufficient test:
 * order the dims of size > 1 by stride; each stride must reach past everything the
 * dims inside it cover. (It rejects a few exotic interleavings that do not alias;
 * libsdpa asks outputs to be laid out plainly.) */
static int output_self_overlaps(const int64_t n[3], const int64_t s[3], int64_t d) {
    int64_t dn[3], ds[3];
    int k = 0;
    for (int i = 0; i < 3; i++)
        if (n[i] > 1) {
            int j = k++;
            while (j > 0 && ds[j - 1] > s[i]) {
                dn[j] = dn[j - 1];
                ds[j] = ds[j - 1];
                j--;
            }
            dn[j] = n[i];
            ds[j] = s[i];
        }
    int64_t covered = d; /* elements spanned by the dims inside, as a max offset + 1 */
    for (int i = 0; i < k; i++) {
        if (ds[i] < covered)
            return 1;
        /* cannot overflow: sdpa_extent already bounded the whole extent */
        covered += (dn[i] - 1) * ds[i];
    }
    return 0;
}

/* A tensor view [n0, n1, n2, d]: its dtype, then the extent rule. */
static sdpa_status check_tensor(const sdpa_tensor *t, const int64_t n[3], int64_t d,
                                int is_output, sdpa_span *sp) {
    CHECK(t != NULL && t->data != NULL, SDPA_ERR_NULL_POINTER);
    const size_t es = sdpa_dtype_size(t->dtype);
    CHECK(es != 0, SDPA_ERR_BAD_DTYPE);
    const int64_t s[3] = {t->stride_b, t->stride_h, t->stride_t};
    sdpa_status st = sdpa_extent(t->data, es, 3, n, s, d, sp);
    if (st != SDPA_OK)
        return st;
    if (is_output)
        CHECK(!output_self_overlaps(n, s, d), SDPA_ERR_BAD_STRIDE);
    return SDPA_OK;
}

/* A K or V view [n0, n1, n2, d] (n0 the pages of the pool when paged, n2 the slots of a
 * page): any storage type, quantized ones only with scales. Byte-wide types are aligned
 * to a byte; SDPA_I4 counts half bytes, so its strides and rows must be even (rows start
 * on bytes) and its extent is that of the byte view. */
static sdpa_status check_kv(const sdpa_tensor *t, const sdpa_scales *sc, const int64_t n[3],
                            int64_t d, sdpa_span *sp) {
    CHECK(t != NULL && t->data != NULL, SDPA_ERR_NULL_POINTER);
    const int bits = sdpa_kv_bits(t->dtype);
    CHECK(bits != 0, SDPA_ERR_BAD_DTYPE);
    CHECK(sdpa_dtype_quantized(t->dtype) == (sc->data != NULL), SDPA_ERR_BAD_ARGUMENT);
    int64_t s[3] = {t->stride_b, t->stride_h, t->stride_t};
    if (bits >= 8)
        return sdpa_extent(t->data, (size_t)bits / 8, 3, n, s, d, sp);
    for (int i = 0; i < 3; i++) {
        CHECK(s[i] >= 0, SDPA_ERR_BAD_STRIDE);
        CHECK(s[i] % 2 == 0, SDPA_ERR_BAD_STRIDE);
        s[i] /= 2;
    }
    CHECK(d % 2 == 0, SDPA_ERR_BAD_DIMENSION);
    return sdpa_extent(t->data, 1, 3, n, s, d / 2, sp);
}

/* The scales of a quantized K or V with rows of d elements over [n0, n1, n2] (as the
 * operand's view): dtype, a group dividing d (even for SDPA_I4), then the extent rule on
 * [n0, n1, n2, d / group]. Nothing to check when the operand is not quantized. */
static sdpa_status check_scales(const sdpa_scales *sc, sdpa_dtype operand, const int64_t n[3],
                                int64_t d, int is_output, sdpa_span *sp) {
    sp->lo = sp->hi = 0;
    if (!sdpa_dtype_quantized(operand))
        return SDPA_OK;
    CHECK(sc->dtype == SDPA_F32 || sc->dtype == SDPA_F16, SDPA_ERR_BAD_DTYPE);
    const int64_t g = sc->group == 0 ? d : sc->group;
    CHECK(g >= 1 && g <= d && d % g == 0, SDPA_ERR_BAD_ARGUMENT);
    CHECK(operand != SDPA_I4 || g % 2 == 0, SDPA_ERR_BAD_ARGUMENT);
    const int64_t s[3] = {sc->stride_b, sc->stride_h, sc->stride_t};
    TRY(sdpa_extent(sc->data, sdpa_dtype_size(sc->dtype), 3, n, s, d / g, sp));
    if (is_output)
        CHECK(!output_self_overlaps(n, s, d / g), SDPA_ERR_BAD_STRIDE);
    return SDPA_OK;
}

/* A block table [B, ceil(len_kv / page_size)] of int32 page indices: its fields, its
 * extent, then every index a sequence uses inside the pool of num_pages pages: the
 * pages of keys [0, lens[b]) (or [0, len_kv)) that attention reads, or, for a writer
 * (add > 0), of the rows [pos[b], pos[b] + add) it writes (pos NULL: from 0). */
static sdpa_status check_pages(const sdpa_pages *pg, int64_t B, int64_t len_kv,
                               const int64_t *lens, const int64_t *pos, int64_t add,
                               sdpa_span *sp) {
    CHECK(pg->page_size >= 1 && pg->page_size <= SDPA_MAX_DIM, SDPA_ERR_BAD_ARGUMENT);
    CHECK(pg->num_pages >= 1 && pg->num_pages <= SDPA_MAX_DIM, SDPA_ERR_BAD_ARGUMENT);
    const int64_t per = (len_kv + pg->page_size - 1) / pg->page_size; /* len_kv <= 2^40 */
    const int64_t n[1] = {B}, s[1] = {pg->stride};
    TRY(sdpa_extent(pg->block_table, sizeof(int32_t), 1, n, s, per, sp));
    for (int64_t b = 0; b < B; b++) {
        /* the keys entry b reads (or writes: from pos[b], add of them) */
        const int64_t lo = pos ? pos[b] : 0;
        const int64_t hi = add ? lo + add : (lens ? lens[b] : len_kv);
        if (hi <= lo)
            continue;
        for (int64_t i = lo / pg->page_size; i <= (hi - 1) / pg->page_size; i++) {
            const int32_t page = pg->block_table[b * pg->stride + i];
            CHECK(page >= 0 && page < pg->num_pages, SDPA_ERR_BAD_ARGUMENT);
        }
    }
    return SDPA_OK;
}

/* A mask view [B, Hq, rows, keys] (rows, keys: the longest sequence's), its kind and
 * dtype. *sp is empty when the mask is off or no sequence has a row and a key. */
static sdpa_status check_mask(const sdpa_mask *mk, int64_t B, int64_t Hq, int64_t rows,
                              int64_t keys, sdpa_span *sp) {
    sp->lo = sp->hi = 0;
    if (mk->kind == SDPA_MASK_NONE)
        return SDPA_OK;
    CHECK(mk->kind != SDPA_MASK_BOOL || mk->dtype == SDPA_F32, SDPA_ERR_BAD_DTYPE);
    const size_t es = mk->kind == SDPA_MASK_BOOL ? 1 : sdpa_dtype_size(mk->dtype);
    CHECK(es != 0, SDPA_ERR_BAD_DTYPE);
    const int64_t s[3] = {mk->stride_b, mk->stride_h, mk->stride_q};
    if (rows == 0 || keys == 0) { /* nothing is read; the strides must still be sane */
        for (int i = 0; i < 3; i++)
            CHECK(s[i] >= 0, SDPA_ERR_BAD_STRIDE);
        CHECK((uintptr_t)mk->data % es == 0, SDPA_ERR_MISALIGNED);
        return SDPA_OK;
    }
    const int64_t n[3] = {B, Hq, rows};
    return sdpa_extent(mk->data, es, 3, n, s, keys, sp);
}

sdpa_status sdpa_check_array(const void *a, int64_t count, size_t esize, sdpa_span *sp) {
    const int64_t n[1] = {1}, s[1] = {0};
    return sdpa_extent(a, esize, 1, n, s, count, sp);
}

/* Sequence lengths: the arrays' extents first (nothing is read before), then
 * q_lens/kv_lens in range, or cu_seqlens starting at 0, non-decreasing and ending within
 * the views. *maxq / *maxkv get the longest sequence; spans[*nsp..] the arrays read. */
static sdpa_status check_lengths(const sdpa_desc *d, int64_t *maxq, int64_t *maxkv,
                                 sdpa_span *spans, int *nsp) {
    const int64_t B = d->batch;
    const int varlen = d->cu_seqlens_q || d->cu_seqlens_kv;
    if (varlen) {
        CHECK(d->cu_seqlens_q && d->cu_seqlens_kv, SDPA_ERR_BAD_LENGTHS);
        CHECK(!d->q_lens && !d->kv_lens, SDPA_ERR_BAD_LENGTHS);
    }
    const int64_t *arrs[2] = {varlen ? d->cu_seqlens_q : d->q_lens,
                              varlen ? d->cu_seqlens_kv : d->kv_lens};
    for (int i = 0; i < 2; i++)
        if (arrs[i]) {
            /* B <= 2^40, so B + 1 cannot overflow */
            sdpa_status st = sdpa_check_array(arrs[i], B + varlen, sizeof(int64_t),
                                              &spans[(*nsp)++]);
            if (st != SDPA_OK)
                return st;
        }
    *maxq = d->len_q;
    *maxkv = d->len_kv;
    if (varlen) {
        const int64_t len[2] = {d->len_q, d->len_kv};
        int64_t *mx[2] = {maxq, maxkv};
        for (int t = 0; t < 2; t++) {
            const int64_t *cu = arrs[t];
            CHECK(cu[0] == 0 && cu[B] <= len[t], SDPA_ERR_BAD_LENGTHS);
            *mx[t] = 0;
            for (int64_t b = 0; b < B; b++) {
                CHECK(cu[b + 1] >= cu[b], SDPA_ERR_BAD_LENGTHS);
                if (cu[b + 1] - cu[b] > *mx[t])
                    *mx[t] = cu[b + 1] - cu[b];
            }
        }
        return SDPA_OK;
    }
    for (int64_t b = 0; b < B; b++) {
        CHECK(!d->q_lens || (d->q_lens[b] >= 0 && d->q_lens[b] <= d->len_q), SDPA_ERR_BAD_LENGTHS);
        CHECK(!d->kv_lens || (d->kv_lens[b] >= 0 && d->kv_lens[b] <= d->len_kv),
              SDPA_ERR_BAD_LENGTHS);
    }
    return SDPA_OK;
}

/* The per-head arrays (ALiBi slopes, sinks): their extents, then their values. They are
 * arguments like scale, not data: a NaN or infinite slope turns the scores it touches
 * into NaN (inf * 0 on the diagonal) and a NaN or +inf sink every row of its head, so
 * they are refused like a non-finite scale. A sink of -inf is allowed: it is the sink
 * switched off for that head. */
static sdpa_status check_heads(const sdpa_desc *d, sdpa_span *spans, int *nsp) {
    const float *harr[2] = {d->alibi_slopes, d->sinks};
    for (int i = 0; i < 2; i++)
        if (harr[i]) {
            sdpa_status st = sdpa_check_array(harr[i], d->heads_q, sizeof(float), &spans[(*nsp)++]);
            if (st != SDPA_OK)
                return st;
        }
    for (int64_t h = 0; h < d->heads_q; h++) {
        CHECK(!d->alibi_slopes || isfinite(d->alibi_slopes[h]), SDPA_ERR_BAD_ARGUMENT);
        CHECK(!d->sinks || isfinite(d->sinks[h]) || d->sinks[h] == -INFINITY,
              SDPA_ERR_BAD_ARGUMENT);
    }
    return SDPA_OK;
}

/* Both entry points: attention (v, o, optional output lse; weights NULL) or attention
 * weights (weights non-NULL: v and o unused, lse a required input). Order: pointers,
 * dimensions, scalar fields, then every view and caller array through its kind's check
 * (tensors, mask, lengths, per-head arrays, lse, weights), then overlaps. */
static sdpa_status validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                            const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                            const float *weights, sdpa_problem *p) {
    const int wmode = weights != NULL;
    CHECK(desc != NULL && q != NULL && k != NULL, SDPA_ERR_NULL_POINTER);
    CHECK(wmode ? lse != NULL : (v != NULL && o != NULL), SDPA_ERR_NULL_POINTER);
    CHECK(q->data != NULL && k->data != NULL, SDPA_ERR_NULL_POINTER);
    CHECK(wmode || (v->data != NULL && o->data != NULL), SDPA_ERR_NULL_POINTER);

    const int64_t dims[5] = {desc->batch, desc->heads_q, desc->heads_kv, desc->len_q,
                             desc->len_kv};
    for (int i = 0; i < 5; i++)
        CHECK(dims[i] >= 1 && dims[i] <= SDPA_MAX_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->dim_qk >= 1 && desc->dim_qk <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->dim_v >= 1 && desc->dim_v <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(desc->heads_q % desc->heads_kv == 0, SDPA_ERR_BAD_HEADS);

    CHECK(isfinite(desc->scale), SDPA_ERR_BAD_ARGUMENT);
    CHECK(isfinite(desc->softcap) && desc->softcap >= 0.0f, SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->num_threads >= 0, SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->causal == SDPA_CAUSAL_NONE || desc->causal == SDPA_CAUSAL_BOTTOM_RIGHT ||
              desc->causal == SDPA_CAUSAL_TOP_LEFT,
          SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->isa >= SDPA_ISA_AUTO && desc->isa < SDPA_ISA_COUNT_, SDPA_ERR_BAD_ARGUMENT);
    CHECK(desc->compute == SDPA_COMPUTE_F32 || desc->compute == SDPA_COMPUTE_BF16,
          SDPA_ERR_BAD_ARGUMENT);
    if (desc->window)
        CHECK(desc->window_left >= 0 && desc->window_left <= SDPA_MAX_DIM &&
                  desc->window_right >= 0 && desc->window_right <= SDPA_MAX_DIM,
              SDPA_ERR_BAD_ARGUMENT);

    if (desc->dropout_p != 0.0f) {
        /* !(p < 1) also rejects NaN; the counter words hold b, h, i, j / 4 (philox.h) */
        CHECK(desc->dropout_p > 0.0f && desc->dropout_p < 1.0f, SDPA_ERR_BAD_ARGUMENT);
        const int64_t lim = (int64_t)1 << 32;
        CHECK(desc->batch < lim && desc->heads_q < lim && desc->len_q < lim &&
                  desc->len_kv < 4 * lim,
              SDPA_ERR_BAD_ARGUMENT);
    }

    const sdpa_mask *mk = &desc->mask;
    CHECK(mk->kind == SDPA_MASK_NONE || mk->kind == SDPA_MASK_ADDITIVE ||
              mk->kind == SDPA_MASK_BOOL,
          SDPA_ERR_BAD_ARGUMENT);
    CHECK((mk->kind == SDPA_MASK_NONE) == (mk->data == NULL), SDPA_ERR_BAD_ARGUMENT);

    /* every caller array the call reads, to check that no output overlaps it */
    sdpa_span in[16];
    int nin = 0;
    int64_t maxq, maxkv;
    TRY(check_lengths(desc, &maxq, &maxkv, in, &nin));

    const int varlen = desc->cu_seqlens_q != NULL;
    const int64_t B = desc->batch, Hq = desc->heads_q, Hkv = desc->heads_kv;
    const int64_t Tq = desc->len_q, Tkv = desc->len_kv;
    /* under packed varlen the views are one batch entry of the total rows */
    const int64_t VB = varlen ? 1 : B;
    const sdpa_pages *pg = &desc->pages;
    const int paged = pg->block_table != NULL;
    CHECK(!paged || !varlen, SDPA_ERR_BAD_ARGUMENT);
    if (paged) {
        TRY(check_pages(pg, B, Tkv, desc->kv_lens, NULL, 0, &in[nin++]));
    }
    const int64_t nq[3] = {VB, Hq, Tq};
    const int64_t nkv[3] = {paged ? pg->num_pages : VB, Hkv, paged ? pg->page_size : Tkv};
    sdpa_span so, sl = {0, 0};
    TRY(check_tensor(q, nq, desc->dim_qk, 0, &in[nin++]));
    TRY(check_kv(k, &desc->k_scales, nkv, desc->dim_qk, &in[nin++]));
    TRY(check_scales(&desc->k_scales, k->dtype, nkv, desc->dim_qk, 0, &in[nin]));
    nin += in[nin].hi > in[nin].lo;
    if (wmode) {
        /* the weights: [VB, Hq, Tq, Tkv] contiguous floats */
        int64_t n = VB;
        CHECK(!__builtin_mul_overflow(n, Hq, &n) && !__builtin_mul_overflow(n, Tq, &n) &&
                  !__builtin_mul_overflow(n, Tkv, &n),
              SDPA_ERR_OVERFLOW);
        TRY(sdpa_check_array(weights, n, sizeof(float), &so));
    } else {
        TRY(check_kv(v, &desc->v_scales, nkv, desc->dim_v, &in[nin++]));
        TRY(check_scales(&desc->v_scales, v->dtype, nkv, desc->dim_v, 0, &in[nin]));
        nin += in[nin].hi > in[nin].lo;
        TRY(check_tensor(o, nq, desc->dim_v, 1, &so));
    }
    TRY(check_mask(mk, B, Hq, maxq, maxkv, &in[nin]));
    nin += in[nin].hi > in[nin].lo;
    TRY(check_heads(desc, in, &nin));
    /* lse: [VB, Hq, Tq] contiguous floats; VB Hq Tq cannot overflow: it is at most o's
     * elements (an output never broadcasts) or the weights' (checked above) */
    if (lse)
        TRY(sdpa_check_array(lse, VB * Hq * Tq, sizeof(float), wmode ? &in[nin++] : &sl));
    for (int i = 0; i < nin; i++)
        CHECK(!sdpa_spans_overlap(so, in[i]), SDPA_ERR_OVERLAP);
    if (lse && !wmode) {
        for (int i = 0; i < nin; i++)
            CHECK(!sdpa_spans_overlap(sl, in[i]), SDPA_ERR_OVERLAP);
        CHECK(!sdpa_spans_overlap(sl, so), SDPA_ERR_OVERLAP);
    }

    p->B = B;
    p->Hq = Hq;
    p->Hkv = Hkv;
    p->Tq = Tq;
    p->Tkv = Tkv;
    p->Dk = desc->dim_qk;
    p->Dv = desc->dim_v;
    p->group = Hq / Hkv;
    p->scale = desc->scale != 0.0f ? desc->scale : (float)(1.0 / sqrt((double)desc->dim_qk));
    p->causal = desc->causal;
    p->num_threads = desc->num_threads;
    p->isa = desc->isa;
    p->compute = desc->compute;
    p->q = q->data;
    p->k = k->data;
    p->v = wmode ? NULL : v->data;
    p->o = wmode ? NULL : o->data;
    p->lse = (float *)(uintptr_t)lse;
    p->qt = q->dtype;
    p->kt = k->dtype;
    p->vt = wmode ? SDPA_F32 : v->dtype;
    p->ot = wmode ? SDPA_F32 : o->dtype;
    memset(p->vs, 0, sizeof p->vs);
    memset(p->os, 0, sizeof p->os);
    const sdpa_tensor *views[4] = {q, k, v, o};
    int64_t *strides[4] = {p->qs, p->ks, p->vs, p->os};
    for (int i = 0; i < (wmode ? 2 : 4); i++) {
        strides[i][0] = varlen ? 0 : views[i]->stride_b;
        strides[i][1] = views[i]->stride_h;
        strides[i][2] = views[i]->stride_t;
    }
    p->lse_sb = varlen ? 0 : Hq * Tq;
    p->lse_sh = Tq;
    p->mask = *mk;
    p->window = desc->window != 0;
    p->window_left = p->window ? desc->window_left : 0;
    p->window_right = p->window ? desc->window_right : 0;
    p->softcap = desc->softcap;
    p->alibi = desc->alibi_slopes;
    p->sinks = desc->sinks;
    p->q_lens = varlen ? NULL : desc->q_lens;
    p->kv_lens = varlen ? NULL : desc->kv_lens;
    p->cu_q = varlen ? desc->cu_seqlens_q : NULL;
    p->cu_kv = varlen ? desc->cu_seqlens_kv : NULL;
    p->dropout_p = desc->dropout_p;
    p->dropout_threshold = 0;
    p->dropout_scale = 1.0f;
    p->dropout_seed = desc->dropout_seed;
    p->ksc = desc->k_scales;
    p->vsc = wmode ? (sdpa_scales){0} : desc->v_scales;
    if (varlen) /* one batch entry of all rows, as for the views: stride_b is ignored */
        p->ksc.stride_b = p->vsc.stride_b = 0;
    if (p->ksc.data && p->ksc.group == 0)
        p->ksc.group = p->Dk;
    if (p->vsc.data && p->vsc.group == 0)
        p->vsc.group = p->Dv;
    p->pages = *pg;
    if (desc->dropout_p != 0.0f) {
        /* p in (0, 1): p 2^32 rounds into [1, 2^32 - 1] except within 2^-33 of 1 */
        const double t = nearbyint((double)desc->dropout_p * 4294967296.0);
        p->dropout_threshold = t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
        p->dropout_scale = (float)(1.0 / (1.0 - (double)desc->dropout_p));
    }
    return SDPA_OK;
}

sdpa_status sdpa_validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                          sdpa_problem *p) {
    return validate(desc, q, k, v, o, lse, NULL, p);
}

sdpa_status sdpa_validate_weights(const sdpa_desc *desc, const sdpa_tensor *q,
                                  const sdpa_tensor *k, const float *lse, const float *weights,
                                  sdpa_problem *p) {
    CHECK(weights != NULL, SDPA_ERR_NULL_POINTER);
    return validate(desc, q, k, NULL, NULL, lse, weights, p);
}

/* The merge's views: n parts [B, H, T, D] (inputs) with their lse arrays, the output view
 * and its optional lse. The output may be exactly the first part (same data, dtype and
 * strides) and its lse exactly the first part's lse: engines merge in place, and each
 * output element is written only after the parts' elements at that position are read.
 * Any other overlap of an output with a part is refused. */
sdpa_status sdpa_validate_merge(const sdpa_merge_desc *d, const sdpa_tensor *parts,
                                const float *const *lses, const sdpa_tensor *o,
                                const float *lse) {
    CHECK(d != NULL && parts != NULL && lses != NULL && o != NULL, SDPA_ERR_NULL_POINTER);
    const int64_t dims[3] = {d->batch, d->heads, d->len};
    for (int i = 0; i < 3; i++)
        CHECK(dims[i] >= 1 && dims[i] <= SDPA_MAX_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(d->dim >= 1 && d->dim <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(d->parts >= 1 && d->parts <= SDPA_MAX_MERGE_PARTS, SDPA_ERR_BAD_DIMENSION);
    CHECK(d->num_threads >= 0, SDPA_ERR_BAD_ARGUMENT);
    sdpa_span so, sl = {0, 0};
    TRY(check_tensor(o, dims, d->dim, 1, &so));
    /* B H T fits int64: o's extent covers B H T distinct rows */
    const int64_t rows = d->batch * d->heads * d->len;
    if (lse)
        TRY(sdpa_check_array(lse, rows, sizeof(float), &sl));
    CHECK(!lse || !sdpa_spans_overlap(sl, so), SDPA_ERR_OVERLAP);
    for (int i = 0; i < d->parts; i++) {
        sdpa_span sp, slp;
        TRY(check_tensor(&parts[i], dims, d->dim, 0, &sp));
        CHECK(lses[i] != NULL, SDPA_ERR_NULL_POINTER);
        TRY(sdpa_check_array(lses[i], rows, sizeof(float), &slp));
        const int same_o = i == 0 && parts[0].data == o->data && parts[0].dtype == o->dtype &&
                           parts[0].stride_b == o->stride_b && parts[0].stride_h == o->stride_h &&
                           parts[0].stride_t == o->stride_t;
        const int same_lse = i == 0 && lse == lses[0];
        CHECK(same_o || !sdpa_spans_overlap(so, sp), SDPA_ERR_OVERLAP);
        CHECK(!sdpa_spans_overlap(so, slp), SDPA_ERR_OVERLAP);
        CHECK(!lse || !sdpa_spans_overlap(sl, sp), SDPA_ERR_OVERLAP);
        CHECK(!lse || same_lse || !sdpa_spans_overlap(sl, slp), SDPA_ERR_OVERLAP);
    }
    return SDPA_OK;
}

/* sdpa_kv_write's arguments: dimensions, the positions, the source view, the cache (an
 * output K/V view over the pool or [B, H, len_kv]), the block table, the scales (an
 * output when computed), then overlaps between what is written and what is read. */
sdpa_status sdpa_validate_kv_write(const sdpa_kv_write_desc *d, const sdpa_tensor *src,
                                   const sdpa_tensor *cache) {
    CHECK(d != NULL && src != NULL && cache != NULL, SDPA_ERR_NULL_POINTER);
    const int64_t dims[4] = {d->batch, d->heads, d->len, d->len_kv};
    for (int i = 0; i < 4; i++)
        CHECK(dims[i] >= 1 && dims[i] <= SDPA_MAX_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(d->dim >= 1 && d->dim <= SDPA_MAX_HEAD_DIM, SDPA_ERR_BAD_DIMENSION);
    CHECK(d->num_threads >= 0, SDPA_ERR_BAD_ARGUMENT);
    CHECK(d->compute_scales == 0 || d->compute_scales == 1, SDPA_ERR_BAD_ARGUMENT);
    CHECK(!d->compute_scales || sdpa_dtype_quantized(cache->dtype), SDPA_ERR_BAD_ARGUMENT);
    sdpa_span rd[4], sc_sp, cs;
    int nrd = 0;
    if (d->pos) {
        TRY(sdpa_check_array(d->pos, d->batch, sizeof(int64_t), &rd[nrd++]));
        for (int64_t b = 0; b < d->batch; b++) /* len <= 2^40: no overflow */
            CHECK(d->pos[b] >= 0 && d->pos[b] <= d->len_kv - d->len, SDPA_ERR_BAD_ARGUMENT);
    } else {
        CHECK(d->len <= d->len_kv, SDPA_ERR_BAD_ARGUMENT);
    }
    const int64_t ns[3] = {d->batch, d->heads, d->len};
    TRY(check_tensor(src, ns, d->dim, 0, &rd[nrd++]));
    const sdpa_pages *pg = &d->pages;
    const int paged = pg->block_table != NULL;
    if (paged)
        TRY(check_pages(pg, d->batch, d->len_kv, NULL, d->pos, d->len,
                        &rd[nrd++]));
    const int64_t nc[3] = {paged ? pg->num_pages : d->batch, d->heads,
                           paged ? pg->page_size : d->len_kv};
    TRY(check_kv(cache, &d->scales, nc, d->dim, &cs));
    {   /* distinct elements to distinct addresses (bytes, for SDPA_I4's pairs) */
        const int half = cache->dtype == SDPA_I4;
        const int64_t s[3] = {cache->stride_b >> half, cache->stride_h >> half,
                              cache->stride_t >> half};
        CHECK(!output_self_overlaps(nc, s, d->dim >> half), SDPA_ERR_BAD_STRIDE);
    }
    TRY(check_scales(&d->scales, cache->dtype, nc, d->dim, d->compute_scales, &sc_sp));
    for (int i = 0; i < nrd; i++) {
        CHECK(!sdpa_spans_overlap(cs, rd[i]), SDPA_ERR_OVERLAP);
        CHECK(!sdpa_spans_overlap(sc_sp, rd[i]), SDPA_ERR_OVERLAP);
    }
    CHECK(!sdpa_spans_overlap(sc_sp, cs), SDPA_ERR_OVERLAP);
    return SDPA_OK;
}
