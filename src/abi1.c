/*
 * abi1.c - the entry points of ABI level 1 (libsdpa 0.1.0) under their plain names, for
 * programs built against that header: each takes the level-1 layouts (abi1.h), builds
 * the current descriptor (the fields level 1 has, every newer field zero, i.e. off) and
 * calls the current entry point; work counters go back in the level-1 layout, so nothing
 * is written past the caller's smaller sdpa_stats.
 *
 * Only this file defines the plain names: include/sdpa.h renames them to the current
 * level's symbols for everything else.
 */
#include <stddef.h>
#include <string.h>

#include "internal.h"
#include "abi1.h"

#undef sdpa_forward
#undef sdpa_reference
#undef sdpa_attention_weights
#undef sdpa_mha_workspace_size
#undef sdpa_mha_forward

/* Level 1 is a prefix of the current layouts, field for field (append-only). */
#define SAME(type, v1, field)                                                              \
    _Static_assert(offsetof(type, field) == offsetof(v1, field), #type "." #field " moved")
SAME(sdpa_stats, sdpa_stats_v1, blocks_masked);
SAME(sdpa_desc, sdpa_desc_v1, stats);
SAME(sdpa_desc, sdpa_desc_v1, mask);
SAME(sdpa_desc, sdpa_desc_v1, window_right);
SAME(sdpa_desc, sdpa_desc_v1, alibi_slopes);
SAME(sdpa_desc, sdpa_desc_v1, cu_seqlens_kv);
SAME(sdpa_desc, sdpa_desc_v1, dropout_seed);
SAME(sdpa_mha_desc, sdpa_mha_desc_v1, in_proj_bias);
SAME(sdpa_mha_desc, sdpa_mha_desc_v1, attn);
#undef SAME

/* The current descriptor of a level-1 one; its stats (if any) point to *tmp. */
static void desc_of(const sdpa_desc_v1 *in, sdpa_desc *out, sdpa_stats *tmp) {
    memset(out, 0, sizeof *out);
    memcpy(out, in, sizeof *in);
    out->stats = in->stats ? tmp : NULL;
}

/* The level-1 counters from the current ones, after a successful call. */
static void stats_back(const sdpa_desc_v1 *in, const sdpa_stats *tmp, sdpa_status st) {
    if (in->stats && st == SDPA_OK)
        memcpy(in->stats, tmp, sizeof *in->stats);
}

SDPA_API sdpa_status sdpa_forward(const sdpa_desc_v1 *desc, const sdpa_tensor *q,
                                  const sdpa_tensor *k, const sdpa_tensor *v,
                                  const sdpa_tensor *o, float *lse);
SDPA_API sdpa_status sdpa_reference(const sdpa_desc_v1 *desc, const sdpa_tensor *q,
                                    const sdpa_tensor *k, const sdpa_tensor *v,
                                    const sdpa_tensor *o, float *lse);
SDPA_API sdpa_status sdpa_attention_weights(const sdpa_desc_v1 *desc, const sdpa_tensor *q,
                                            const sdpa_tensor *k, const float *lse,
                                            float *weights);
SDPA_API size_t sdpa_mha_workspace_size(const sdpa_mha_desc_v1 *desc);
SDPA_API sdpa_status sdpa_mha_forward(const sdpa_mha_desc_v1 *desc, const float *x,
                                      const float *kv, float *y, float *weights,
                                      void *workspace);

sdpa_status sdpa_forward(const sdpa_desc_v1 *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                         const sdpa_tensor *v, const sdpa_tensor *o, float *lse) {
    if (!desc)
        return SDPA_ERR_NULL_POINTER;
    sdpa_desc d;
    sdpa_stats tmp;
    desc_of(desc, &d, &tmp);
    const sdpa_status st = sdpa_forward_abi2(&d, q, k, v, o, lse);
    stats_back(desc, &tmp, st);
    return st;
}

sdpa_status sdpa_reference(const sdpa_desc_v1 *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                           const sdpa_tensor *v, const sdpa_tensor *o, float *lse) {
    if (!desc)
        return SDPA_ERR_NULL_POINTER;
    sdpa_desc d;
    sdpa_stats tmp;
    desc_of(desc, &d, &tmp);
    const sdpa_status st = sdpa_reference_abi2(&d, q, k, v, o, lse);
    stats_back(desc, &tmp, st);
    return st;
}

sdpa_status sdpa_attention_weights(const sdpa_desc_v1 *desc, const sdpa_tensor *q,
                                   const sdpa_tensor *k, const float *lse, float *weights) {
    if (!desc)
        return SDPA_ERR_NULL_POINTER;
    sdpa_desc d;
    sdpa_stats tmp;
    desc_of(desc, &d, &tmp);
    return sdpa_attention_weights_abi2(&d, q, k, lse, weights);
}

/* The current layer descriptor of a level-1 one; its attention's stats point to *tmp. */
static void mha_of(const sdpa_mha_desc_v1 *in, sdpa_mha_desc *out, sdpa_stats *tmp) {
    memset(out, 0, sizeof *out);
    memcpy(out, in, offsetof(sdpa_mha_desc_v1, attn));
    desc_of(&in->attn, &out->attn, tmp);
}

size_t sdpa_mha_workspace_size(const sdpa_mha_desc_v1 *desc) {
    if (!desc)
        return 0;
    sdpa_mha_desc d;
    sdpa_stats tmp;
    mha_of(desc, &d, &tmp);
    return sdpa_mha_workspace_size_abi2(&d);
}

sdpa_status sdpa_mha_forward(const sdpa_mha_desc_v1 *desc, const float *x, const float *kv,
                             float *y, float *weights, void *workspace) {
    if (!desc)
        return SDPA_ERR_NULL_POINTER;
    sdpa_mha_desc d;
    sdpa_stats tmp;
    mha_of(desc, &d, &tmp);
    const sdpa_status st = sdpa_mha_forward_abi2(&d, x, kv, y, weights, workspace);
    stats_back(&desc->attn, &tmp, st);
    return st;
}
