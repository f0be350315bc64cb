/*
 * abi1.h - the descriptor layouts of ABI level 1 (libsdpa 0.1.0), frozen: what a binary
 * built against that header passes to the plain-named entry points (abi1.c). Not for new
 * code; include/sdpa.h is the current API.
 *
 * A level's layouts never change. Each later level only appends fields, which the
 * static assertions in abi1.c check against the current header, field by field.
 */
#ifndef SDPA_ABI1_H
#define SDPA_ABI1_H

#include <stdint.h>

#include "sdpa.h"

typedef struct sdpa_stats_v1 {
    sdpa_isa isa;
    int threads;
    int block_q, block_kv;
    int64_t work_items, blocks_total, blocks_computed, blocks_skipped, blocks_masked;
} sdpa_stats_v1;

typedef struct sdpa_desc_v1 {
    int64_t batch, heads_q, heads_kv, len_q, len_kv, dim_qk, dim_v;
    float scale;
    int causal, num_threads, isa;
    sdpa_stats_v1 *stats;
    sdpa_mask mask;
    int window;
    int64_t window_left, window_right;
    float softcap;
    const float *alibi_slopes, *sinks;
    const int64_t *q_lens, *kv_lens, *cu_seqlens_q, *cu_seqlens_kv;
    float dropout_p;
    uint64_t dropout_seed;
} sdpa_desc_v1;

typedef struct sdpa_mha_desc_v1 {
    int64_t batch, len_q, len_kv, d_in, d_kv, heads_q, heads_kv, head_dim, d_out;
    sdpa_proj wq, wk, wv, wo;
    const float *in_proj_weight, *in_proj_bias;
    sdpa_desc_v1 attn;
} sdpa_mha_desc_v1;

#endif /* SDPA_ABI1_H */
