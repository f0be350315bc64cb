/*
 * case.c - the case library (see case.h): the data stream, fp16/bf16 storage, guarded
 * buffers, building a case, and the tolerance rule with its comparison.
 */
#include "case.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- deterministic data ------------------------------------------------------------ */

uint64_t sc_rand_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float sc_rand_float(uint64_t *s) {
    return (float)((double)(sc_rand_u64(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* ---- elements: IEEE binary16 and bfloat16 (the top half of a binary32) ------------ */

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint16_t f32_to_f16(float f) {
    const uint32_t x = bits(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* NaN: quiet, with the top of its payload */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) /* from 65520 = halfway above the largest f16 (65504): inf */
        return sign | 0x7c00u;
    if (ax < 0x38800000u) /* below 2^-14: an f16 subnormal, in units of 2^-24 */
        return sign | (uint16_t)nearbyintf(from_bits(ax) * 0x1p24f); /* exact, RNE */
    uint32_t m = ax - (112u << 23);  /* exponent bias 127 -> 15 */
    m += 0xfffu + ((m >> 13) & 1u); /* round the 13 dropped bits to nearest even */
    return sign | (uint16_t)(m >> 13);
}

static float f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) { /* zero or subnormal: m x 2^-24, exact in fp32 */
        const float f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    if (e == 31) /* inf, or NaN quietened with its payload */
        return from_bits(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    return from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

static uint16_t f32_to_bf16(float f) {
    const uint32_t x = bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN (quiet) */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static int quantized(sdpa_dtype t) { return t >= SDPA_I8 && t <= SDPA_I4; }

size_t sc_dtype_size(sdpa_dtype t) {
    return t == SDPA_F32 ? 4 : t == SDPA_I4 ? 0 : quantized(t) ? 1 : 2;
}

void sc_store(void *buf, size_t i, sdpa_dtype t, float x) {
    if (t == SDPA_F16)
        ((uint16_t *)buf)[i] = f32_to_f16(x);
    else if (t == SDPA_BF16)
        ((uint16_t *)buf)[i] = f32_to_bf16(x);
    else
        memcpy((char *)buf + 4 * i, &x, 4);
}

float sc_load(const void *buf, size_t i, sdpa_dtype t) {
    if (t == SDPA_F16)
        return f16_to_f32(((const uint16_t *)buf)[i]);
    if (t == SDPA_BF16)
        return from_bits((uint32_t)((const uint16_t *)buf)[i] << 16);
    float x;
    memcpy(&x, (const char *)buf + 4 * i, 4);
    return x;
}

/* ---- buffers ----------------------------------------------------------------------- */

/* Every live buffer: the pointer handed out, and its mapping (len 0: heap memory). */
typedef struct mapping {
    void *user, *base;
    size_t len;
} mapping;
static mapping *maps;
static size_t nmaps, capmaps;
/* the tests allocate from concurrent host threads */
static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;

static int remember(void *user, void *base, size_t len) {
    pthread_mutex_lock(&maps_lock);
    int ok = 1;
    if (nmaps == capmaps) {
        const size_t cap = capmaps ? 2 * capmaps : 64;
        mapping *m = realloc(maps, cap * sizeof *m);
        if (m) {
            maps = m;
            capmaps = cap;
        }
        ok = m != NULL;
    }
    if (ok)
        maps[nmaps++] = (mapping){user, base, len};
    pthread_mutex_unlock(&maps_lock);
    return ok;
}

/* SC_GUARD_HUGE's buffer: bytes rounded up to whole huge pages, at a huge-page boundary
 * inside a mapping one huge page longer; NULL where the OS has no MADV_HUGEPAGE or the
 * mapping fails (the caller falls back to the heap). The advice takes effect on first
 * touch, so nothing is written here; a kernel with THP set to never ignores it. */
static void *huge_alloc(size_t bytes) {
#ifdef MADV_HUGEPAGE
    if (bytes > SIZE_MAX - 2 * SC_HUGE_PAGE)
        return NULL;
    const size_t data = (bytes + SC_HUGE_PAGE - 1) / SC_HUGE_PAGE * SC_HUGE_PAGE;
    const size_t len = data + SC_HUGE_PAGE;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    char *user = base + (SC_HUGE_PAGE - (uintptr_t)base % SC_HUGE_PAGE) % SC_HUGE_PAGE;
    madvise(user, data, MADV_HUGEPAGE); /* advice: refused, the buffer is still usable */
    if (!remember(user, base, len)) {
        munmap(base, len);
        return NULL;
    }
    return user;
#else
    (void)bytes;
    return NULL;
#endif
}

void *sc_alloc(size_t bytes, int guard) {
    if (guard == SC_GUARD_HUGE && bytes >= SC_HUGE_PAGE) {
        void *p = huge_alloc(bytes);
        if (p)
            return p;
    }
    if (guard == SC_GUARD_NONE || guard == SC_GUARD_HUGE) {
        void *p = aligned_alloc(64, (bytes + 63) / 64 * 64 + 64 * (bytes == 0));
        if (p && !remember(p, p, 0)) {
            free(p);
            p = NULL;
        }
        return p;
    }
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes > SIZE_MAX - 2 * pg)
        return NULL;
    const size_t data = (bytes + pg - 1) / pg * pg, len = data + pg;
    char *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    char *user;
    if (guard == SC_GUARD_BEFORE) {
        mprotect(base, pg, PROT_NONE);
        user = base + pg;
    } else {
        mprotect(base + data, pg, PROT_NONE);
        user = base + data - bytes;
    }
    if (!remember(user, base, len)) {
        munmap(base, len);
        return NULL;
    }
    return user;
}

void sc_free(void *p) {
    if (!p)
        return;
    pthread_mutex_lock(&maps_lock);
    for (size_t i = 0; i < nmaps; i++)
        if (maps[i].user == p) {
            const mapping m = maps[i];
            maps[i] = maps[--nmaps];
            pthread_mutex_unlock(&maps_lock);
            if (m.len)
                munmap(m.base, m.len);
            else
                free(m.base);
            return;
        }
    fprintf(stderr, "sc_free: a pointer sc_alloc did not return\n");
    abort();
}

/* ---- a case ------------------------------------------------------------------------ */

static int64_t max_offset(const sdpa_tensor *t, int64_t B, int64_t H, int64_t T, int64_t D) {
    return (B - 1) * t->stride_b + (H - 1) * t->stride_h + (T - 1) * t->stride_t + D - 1;
}

static sdpa_tensor make_view(int layout, sdpa_dtype dt, int64_t H, int64_t T, int64_t D) {
    sdpa_tensor v;
    switch (layout) {
    case SC_BTHD:
        v = sdpa_tensor_bthd(NULL, dt, H, T, D);
        break;
    case SC_PADDED: /* odd gaps between rows, heads and batch entries */
        v = (sdpa_tensor){.dtype = dt, .stride_t = D + 3};
        v.stride_h = T * v.stride_t + 5;
        v.stride_b = H * v.stride_h + 7;
        break;
    default:
        v = sdpa_tensor_bhtd(NULL, dt, H, T, D);
        break;
    }
    return v;
}

float *sc_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i) {
    return (float *)t->data + b * t->stride_b + h * t->stride_h + i * t->stride_t;
}

float sc_get(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i, int64_t d) {
    return sc_load(t->data, (size_t)(b * t->stride_b + h * t->stride_h + i * t->stride_t + d),
                   t->dtype);
}

sdpa_tensor sc_view_at(const sdpa_tensor *t, int64_t b, int64_t h, int64_t i) {
    sdpa_tensor v = *t;
    const int64_t e = b * t->stride_b + h * t->stride_h + i * t->stride_t;
    /* int4: two elements per byte, e even wherever a view's strides are (validate.c) */
    v.data = (char *)t->data +
             (t->dtype == SDPA_I4 ? (size_t)e / 2 : (size_t)e * sc_dtype_size(t->dtype));
    return v;
}

/* Sequence lengths of a case (drawn from their own stream, so both tensor sets of a case
 * get the same): *tq_view / *tkv_view are the views' rows. */
static int make_lengths(sc_tensors *t, const sc_case *c, int64_t *tq_view, int64_t *tkv_view) {
    uint64_t rng = c->seed ^ 0x1e9e3779u;
    const size_t nb = (size_t)c->B * sizeof(int64_t);
    *tq_view = c->Tq;
    *tkv_view = c->Tkv;
    if (c->kv_lens) {
        if (!(t->kvlens = malloc(nb)))
            return -1;
        memcpy(t->kvlens, c->kv_lens, nb);
        t->desc.kv_lens = t->kvlens;
    }
    if (c->lens == SC_LENS_NONE)
        return 0;
    int64_t *ql = malloc(nb), *kl = malloc(nb);
    if (!ql || !kl) {
        free(ql);
        free(kl);
        return -1;
    }
    for (int64_t b = 0; b < c->B; b++) {
        /* entry 0 full, entry 1 with no keys, the rest anywhere in [0, T] */
        ql[b] = b == 0 ? c->Tq : (int64_t)(sc_rand_u64(&rng) % (uint64_t)(c->Tq + 1));
        kl[b] = b == 0   ? c->Tkv
                : b == 1 ? 0
                         : (int64_t)(sc_rand_u64(&rng) % (uint64_t)(c->Tkv + 1));
        if (b >= 2 && b % 2 == 0) /* and some with the full query length */
            ql[b] = c->Tq;
    }
    if (c->lens == SC_LENS_VARLEN) {
        t->cuq = malloc(nb + sizeof(int64_t));
        t->cukv = malloc(nb + sizeof(int64_t));
        if (t->cuq && t->cukv) {
            t->cuq[0] = t->cukv[0] = 0;
            for (int64_t b = 0; b < c->B; b++) {
                t->cuq[b + 1] = t->cuq[b] + ql[b];
                t->cukv[b + 1] = t->cukv[b] + kl[b];
            }
            /* a few rows and keys that no sequence owns */
            *tq_view = t->cuq[c->B] + 3;
            *tkv_view = t->cukv[c->B] + 2;
            t->desc.cu_seqlens_q = t->cuq;
            t->desc.cu_seqlens_kv = t->cukv;
        }
        free(ql);
        free(kl);
        return t->cuq && t->cukv ? 0 : -1;
    }
    if (c->lens == SC_LENS_PADDED) {
        t->qlens = ql;
        t->desc.q_lens = ql;
    } else {
        free(ql);
    }
    free(t->kvlens); /* a mode's lengths take the place of given ones */
    t->kvlens = kl;
    t->desc.kv_lens = kl;
    return 0;
}

/* The mask of a case: [B or 1, Hq or 1, Tq or 1, Tkv] with padded rows. */
static int make_mask(sc_tensors *t, const sc_case *c) {
    if (c->mask == SDPA_MASK_NONE)
        return 0;
    uint64_t rng = c->seed ^ 0x3a5c0ffeu;
    const int isbool = c->mask == SDPA_MASK_BOOL;
    const sdpa_dtype dt = isbool ? SDPA_F32 : c->mask_dt;
    const size_t es = isbool ? 1 : sc_dtype_size(dt);
    const int64_t rows = (c->mask_bcast & SC_BCAST_ROWS) ? 1 : c->Tq;
    const int64_t heads = (c->mask_bcast & SC_BCAST_H) ? 1 : c->Hq;
    const int64_t bs = (c->mask_bcast & SC_BCAST_B) ? 1 : c->B;
    sdpa_mask m = {.kind = c->mask, .dtype = dt};
    m.stride_q = (c->mask_bcast & SC_BCAST_ROWS) ? 0 : c->Tkv + 3;
    m.stride_h = (c->mask_bcast & SC_BCAST_H) ? 0 : rows * (c->Tkv + 3);
    m.stride_b = (c->mask_bcast & SC_BCAST_B) ? 0 : heads * rows * (c->Tkv + 3);
    const size_t n = (size_t)(bs * heads * rows * (c->Tkv + 3));
    if (!(t->mask = sc_alloc(n * es, c->guard)))
        return -1;
    for (int64_t b = 0; b < bs; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = 0; j < c->Tkv + 3; j++) {
                    const size_t e = (size_t)(b * m.stride_b + h * m.stride_h + i * m.stride_q + j);
                    const int hide = i == 3 || (double)(sc_rand_u64(&rng) >> 11) * 0x1p-53 <
                                                   (double)c->mask_hidden;
                    if (isbool)
                        ((uint8_t *)t->mask)[e] = hide ? 0 : (uint8_t)(1 + (j % 7));
                    else
                        sc_store(t->mask, e, dt, hide ? -INFINITY : 2.0f * sc_rand_float(&rng));
                }
    m.data = t->mask;
    t->desc.mask = m;
    return 0;
}

static int make_heads(sc_tensors *t, const sc_case *c) {
    if (!c->alibi && !c->sinks)
        return 0;
    uint64_t rng = c->seed ^ 0x51ce5u;
    t->slopes = malloc((size_t)c->Hq * sizeof(float));
    t->sinks = malloc((size_t)c->Hq * sizeof(float));
    if (!t->slopes || !t->sinks || sdpa_alibi_slopes(c->Hq, 8.0f, t->slopes) != SDPA_OK)
        return -1;
    for (int64_t h = 0; h < c->Hq; h++)
        t->sinks[h] = h == 1 ? -INFINITY : 1.0f + 2.0f * sc_rand_float(&rng);
    t->desc.alibi_slopes = c->alibi ? t->slopes : NULL;
    t->desc.sinks = c->sinks ? t->sinks : NULL;
    return 0;
}

/* Largest code magnitude of a quantized format (sdpa_kv_write's Q). */
static float code_max(sdpa_dtype t) {
    return t == SDPA_I8 ? 127.0f : t == SDPA_I4 ? 7.0f : t == SDPA_FP8_E4M3 ? 448.0f : 57344.0f;
}

/* K (i = 1) or V (i = 2) as a cache: the contiguous source view *v (Tkv rows per entry)
 * written by sdpa_kv_write into a pool of shuffled pages (c->page) or a contiguous cache,
 * stored as c->dt[i] with scales as c->qscale says; *v becomes the cache's view. Every
 * byte no row is written to holds 0xff (NaN for the float types and fp8; the scales of
 * unwritten rows are NaN too), so a read of a wrong page or slot shows. */
static int make_cache(sc_tensors *t, const sc_case *c, int i, int64_t Tkv, sdpa_tensor *v) {
    const sdpa_dtype cdt = c->dt[i];
    const int64_t H = c->Hkv, D = i == 1 ? c->Dk : c->Dv, VB = t->VB;
    const int64_t P = c->page > 0 ? c->page : Tkv, per = (Tkv + P - 1) / P;
    const int64_t n0 = c->page > 0 ? VB * per + 2 : VB; /* pages, two of them never used */
    const int bits = quantized(cdt) ? (cdt == SDPA_I4 ? 4 : 8) : 8 * (int)sc_dtype_size(cdt);
    if (c->page > 0 && !t->table) {
        uint64_t rng = c->seed ^ 0x9a9e5u;
        int32_t *perm = malloc((size_t)n0 * sizeof(int32_t));
        t->table = malloc((size_t)(VB * per) * sizeof(int32_t));
        if (!perm || !t->table) {
            free(perm);
            return -1;
        }
        for (int64_t p = 0; p < n0; p++)
            perm[p] = (int32_t)p;
        for (int64_t p = n0 - 1; p > 0; p--) { /* Fisher-Yates */
            const int64_t q = (int64_t)(sc_rand_u64(&rng) % (uint64_t)(p + 1));
            const int32_t x = perm[p];
            perm[p] = perm[q];
            perm[q] = x;
        }
        for (int64_t b = 0; b < VB; b++) /* pages past an entry's length: not pages */
            for (int64_t p = 0; p < per; p++) {
                const int64_t len = t->desc.kv_lens ? t->desc.kv_lens[b] : Tkv;
                t->table[b * per + p] = p * P < len ? perm[b * per + p] : -1;
            }
        free(perm);
        t->desc.pages = (sdpa_pages){t->table, per, P, n0};
    }
    /* the cache's view: [n0, Hkv, P, D] or, for SC_BTHD, [n0, P, Hkv, D]; padded gaps
     * even, so an int4 row still starts on a byte */
    const int64_t gap = c->layout == SC_PADDED ? 2 : 0;
    sdpa_tensor cv = {.dtype = cdt};
    if (c->layout == SC_BTHD) {
        cv.stride_h = D;
        cv.stride_t = H * D;
        cv.stride_b = P * H * D;
    } else {
        cv.stride_t = D + gap;
        cv.stride_h = P * cv.stride_t + 2 * gap;
        cv.stride_b = H * cv.stride_h + 3 * gap;
    }
    const size_t elems = (size_t)max_offset(&cv, n0, H, P, D) + 1;
    const size_t bytes = (elems * (size_t)bits + 7) / 8;
    if (!(t->cache[i - 1] = sc_alloc(bytes, c->guard)))
        return -1;
    t->cache_bytes[i - 1] = bytes;
    memset(t->cache[i - 1], 0xff, bytes);
    cv.data = t->cache[i - 1];

    sdpa_scales sc = {0};
    int computed = 0;
    if (quantized(cdt)) {
        const int64_t G = c->qscale == SC_QS_ROW && c->qgroup ? c->qgroup : D, ng = D / G;
        const size_t ses = sc_dtype_size(c->qscale_dt);
        size_t n = 1;
        sc = (sdpa_scales){.dtype = c->qscale_dt, .group = c->qscale == SC_QS_ROW ? c->qgroup : 0};
        if (c->qscale == SC_QS_ROW) {
            sc.stride_t = ng;
            sc.stride_h = P * ng;
            sc.stride_b = H * P * ng;
            n = (size_t)(n0 * H * P * ng);
            computed = 1;
        } else if (c->qscale == SC_QS_HEAD) {
            sc.stride_h = 1;
            n = (size_t)H;
        }
        if (!(t->scales[i - 1] = sc_alloc(n * ses, c->guard)))
            return -1;
        memset(t->scales[i - 1], 0xff, n * ses);
        sc.data = t->scales[i - 1];
        if (!computed) /* largest |x| of the head (or the tensor) over Q, nonzero */
            for (int64_t h = 0; h < (int64_t)n; h++) {
                float amax = 0.0f;
                const int64_t h0 = c->qscale == SC_QS_TENSOR ? 0 : h;
                const int64_t h1 = c->qscale == SC_QS_TENSOR ? H : h + 1;
                for (int64_t b = 0; b < VB; b++)
                    for (int64_t hh = h0; hh < h1; hh++)
                        for (int64_t r = 0; r < Tkv; r++)
                            for (int64_t d = 0; d < D; d++)
                                amax = fmaxf(amax, fabsf(sc_get(v, b, hh, r, d)));
                sc_store(t->scales[i - 1], (size_t)h, c->qscale_dt,
                         (amax > 0.0f ? amax : 1.0f) / code_max(cdt));
            }
    }
    for (int64_t b = 0; b < VB; b++) {
        const int64_t len = t->desc.kv_lens ? t->desc.kv_lens[b] : Tkv;
        if (len == 0)
            continue;
        sdpa_kv_write_desc wd = {.batch = 1, .heads = H, .len = len, .dim = D, .len_kv = Tkv,
                                 .scales = sc, .compute_scales = computed};
        sdpa_tensor dst = cv;
        if (c->page > 0) {
            wd.pages = t->desc.pages;
            wd.pages.block_table = t->table + b * per;
        } else {
            dst.data = (char *)cv.data + (size_t)(b * cv.stride_b) * (size_t)bits / 8;
            if (sc.data)
                wd.scales.data = (const char *)sc.data +
                                 (size_t)(b * sc.stride_b) * sc_dtype_size(sc.dtype);
        }
        const sdpa_tensor src = sc_view_at(v, b, 0, 0);
        if (sdpa_kv_write(&wd, &src, &dst) != SDPA_OK)
            return -1;
    }
    *v = cv;
    if (i == 1)
        t->desc.k_scales = sc;
    else
        t->desc.v_scales = sc;
    return 0;
}

sdpa_desc sc_desc(const sc_case *c) {
    return (sdpa_desc){.batch = c->B, .heads_q = c->Hq, .heads_kv = c->Hkv, .len_q = c->Tq,
                       .len_kv = c->Tkv, .dim_qk = c->Dk, .dim_v = c->Dv, .scale = c->scale,
                       .causal = c->causal, .num_threads = c->threads, .window = c->window,
                       .window_left = c->wl, .window_right = c->wr, .softcap = c->softcap,
                       .dropout_p = c->dropout, .kv_lens = c->kv_lens,
                       .dropout_seed = c->seed * 0x9e3779b97f4a7c15ull, .compute = c->compute};
}

int sc_tensors_make(sc_tensors *t, const sc_case *c) {
    memset(t, 0, sizeof *t);
    /* Sizes from a command line can be anything: refuse, in floating point, what no
     * buffer can hold before an integer product overflows (a padded layout adds a few
     * elements per row, head and batch entry). */
    const double rows = fmax((double)c->Hq * (double)c->Tq, (double)c->Hkv * (double)c->Tkv),
                 cols = (double)(c->Dk > c->Dv ? c->Dk : c->Dv) + 8.0,
                 mask = c->mask == SDPA_MASK_NONE ? 0.0 : (double)c->Hq * (double)c->Tq *
                                                              ((double)c->Tkv + 3.0);
    if ((double)c->B * fmax(rows * cols, mask) > (double)(SIZE_MAX / 16))
        return -1;
    t->desc = sc_desc(c);
    int64_t Tq, Tkv;
    if (make_lengths(t, c, &Tq, &Tkv) != 0 || make_mask(t, c) != 0 || make_heads(t, c) != 0) {
        sc_tensors_free(t);
        return -1;
    }
    t->desc.len_q = Tq;
    t->desc.len_kv = Tkv;
    t->VB = c->lens == SC_LENS_VARLEN ? 1 : c->B;

    sdpa_tensor *views[4] = {&t->q, &t->k, &t->v, &t->o};
    const int64_t H[4] = {c->Hq, c->Hkv, c->Hkv, c->Hq};
    const int64_t T[4] = {Tq, Tkv, Tkv, Tq};
    const int64_t D[4] = {c->Dk, c->Dk, c->Dv, c->Dv};
    uint64_t rng = c->seed;
    const float amp = c->amplitude != 0.0f ? c->amplitude : 1.0f;
    if (c->page > 0 && c->lens == SC_LENS_VARLEN) {
        sc_tensors_free(t);
        return -1;
    }
    for (int i = 0; i < 4; i++) {
        if (i == 2 && c->v_in_k) { /* V: the first Dv columns of K, the same memory */
            *views[2] = *views[1];
            views[2]->dtype = c->dt[1];
            continue;
        }
        /* a quantized operand's source rows are fp32 */
        const sdpa_dtype sdt = quantized(c->dt[i]) ? SDPA_F32 : c->dt[i];
        *views[i] = make_view(c->layout, sdt, H[i], T[i], D[i]);
        t->elems[i] = (size_t)max_offset(views[i], t->VB, H[i], T[i], D[i]) + 1;
        const size_t es = sc_dtype_size(sdt);
        const size_t shift = c->guard == SC_GUARD_BEFORE ? (size_t)c->misalign : 0;
        char *buf = sc_alloc((t->elems[i] + shift) * es, c->guard);
        if (!buf) {
            sc_tensors_free(t);
            return -1;
        }
        t->bufs[i] = buf;
        views[i]->data = buf + shift * es;
        if (i < 3) {
            for (size_t e = 0; e < t->elems[i]; e++)
                sc_store(views[i]->data, e, sdt, amp * sc_rand_float(&rng));
            if ((i == 1 || i == 2) && (c->page > 0 || quantized(c->dt[i])) &&
                make_cache(t, c, i, Tkv, views[i]) != 0) {
                sc_tensors_free(t);
                return -1;
            }
        } else if (es == 4) {
            const uint32_t s = SC_SENTINEL_F32;
            for (size_t e = 0; e < t->elems[i]; e++)
                memcpy((char *)views[i]->data + 4 * e, &s, sizeof s);
        } else {
            for (size_t e = 0; e < t->elems[i]; e++)
                ((uint16_t *)views[i]->data)[e] = SC_SENTINEL_16;
        }
    }
    t->elems[4] = (size_t)(t->VB * c->Hq * Tq);
    if (!(t->lse = sc_alloc(t->elems[4] * sizeof(float), c->guard))) {
        sc_tensors_free(t);
        return -1;
    }
    t->bufs[4] = t->lse;
    const uint32_t s = SC_SENTINEL_F32;
    for (size_t e = 0; e < t->elems[4]; e++)
        memcpy(&t->lse[e], &s, sizeof s);
    return 0;
}

void sc_tensors_free(sc_tensors *t) {
    for (int i = 0; i < 5; i++)
        sc_free(t->bufs[i]);
    sc_free(t->mask);
    free(t->slopes);
    free(t->sinks);
    free(t->qlens);
    free(t->kvlens);
    free(t->cuq);
    free(t->cukv);
    for (int i = 0; i < 2; i++) {
        sc_free(t->cache[i]);
        sc_free(t->scales[i]);
    }
    free(t->table);
    memset(t, 0, sizeof *t);
}

const char *sc_case_str(const sc_case *c, char *buf, size_t n) {
    static const char *layouts[] = {"bhtd", "bthd", "padded"};
    static const char *dts[] = {"f32", "f16", "bf16", "i8", "e4m3", "e5m2", "i4"};
    static const char *lens[] = {"none", "padded", "kv", "varlen"};
    static const char *guards[] = {"after", "before", "none"};
    int k = snprintf(buf, n,
                     "B=%lld Hq=%lld Hkv=%lld Tq=%lld Tkv=%lld Dk=%lld Dv=%lld causal=%d "
                     "threads=%d layout=%s guard=%s misalign=%d scale=%g amp=%g seed=%llu",
                     (long long)c->B, (long long)c->Hq, (long long)c->Hkv, (long long)c->Tq,
                     (long long)c->Tkv, (long long)c->Dk, (long long)c->Dv, c->causal,
                     c->threads, layouts[c->layout], guards[c->guard], c->misalign,
                     (double)c->scale, (double)c->amplitude, (unsigned long long)c->seed);
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k,
                 " dt=%s/%s/%s/%s window=%d(%lld,%lld) softcap=%g alibi=%d sinks=%d mask=%d/%s/"
                 "bcast%d/%.2f lens=%s%s dropout=%g%s",
                 dts[c->dt[0]], dts[c->dt[1]], dts[c->dt[2]], dts[c->dt[3]], c->window,
                 (long long)c->wl, (long long)c->wr, (double)c->softcap, c->alibi, c->sinks,
                 c->mask, dts[c->mask_dt], c->mask_bcast, (double)c->mask_hidden,
                 lens[c->lens], c->kv_lens ? "+given kv_lens" : "", (double)c->dropout,
                 c->compute == SDPA_COMPUTE_BF16 ? " compute=bf16" : "");
    k = (int)strlen(buf);
    if ((c->page > 0 || quantized(c->dt[1]) || quantized(c->dt[2])) && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " page=%lld qscale=%d/%s qgroup=%lld",
                 (long long)c->page, c->qscale, dts[c->qscale_dt], (long long)c->qgroup);
    return buf;
}

/* ---- the tolerance rule and the comparison ----------------------------------------- */

double sc_rel_tol(sdpa_dtype out) {
    return SC_TOL_REL + (out == SDPA_F16 ? 0x1p-10 : out == SDPA_BF16 ? 0x1p-7 : 0.0);
}

int sc_close(double got, double want, sdpa_dtype out) {
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return isfinite(got) && fabs(got - want) <= SC_TOL_ABS + sc_rel_tol(out) * fabs(want);
}

int sc_error_add(sc_error *e, double got, double want, sdpa_dtype out) {
    const int ok = e->abs_tol > 0 && isfinite(got) && isfinite(want)
                       ? fabs(got - want) <= e->abs_tol + sc_rel_tol(out) * fabs(want)
                       : sc_close(got, want, out);
    e->checked++;
    e->bad += !ok;
    if (isfinite(got) && isfinite(want)) {
        const double err = fabs(got - want);
        if (err > e->max_abs)
            e->max_abs = err;
        if (fabs(want) > 1e-3 && err / fabs(want) > e->max_rel)
            e->max_rel = err / fabs(want);
    }
    return ok;
}

void sc_compare_view(sc_error *e, const sdpa_tensor *got, const sdpa_tensor *want, int64_t B,
                     int64_t H, int64_t T, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < T; i++)
                for (int64_t d = 0; d < D; d++)
                    sc_error_add(e, sc_get(got, b, h, i, d), sc_get(want, b, h, i, d), got->dtype);
}
