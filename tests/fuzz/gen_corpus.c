/*
 * gen_corpus.c - writes the seed corpus of sdpa-fuzz (tests/fuzz/corpus, committed):
 * one input per feature, shape class, fault and aliasing case, in the byte format of
 * fuzz_core.h. `make fuzz-corpus` rebuilds and reruns it; rerun it whenever that format
 * changes.
 *
 *   gen-corpus DIR
 *
 * It only writes files; the normal suite replays them (tests/test_fuzzcases.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_core.h"

/* One seed: a name, (field, value) pairs, the data seed, and injections. */
typedef struct seed {
    const char *name;
    int set[24][2];   /* {field, value}, ended by {-1} */
    uint64_t data_seed;
    uint8_t inj[8][FZ_INJ_BYTES];
    int ninj;
} seed;

#define END {-1, 0}
/* FZ_LAYOUT byte: the same layout for all four operands */
#define ALL(l) ((l) | (l) << 2 | (l) << 4 | (l) << 6)

static const seed seeds[] = {
    {"plain-small", {END}, 1, {{0}}, 0},
    {"plain-medium-causal", {{FZ_CLASS, 1}, {FZ_B, 1}, {FZ_HKV, 1}, {FZ_GROUP, 1}, {FZ_TQ, 99},
                             {FZ_TKV, 130}, {FZ_DK, 63}, {FZ_DV, 47}, {FZ_CAUSAL, 1}, END}, 2, {{0}}, 0},
    {"medium-threads", {{FZ_CLASS, 1}, {FZ_B, 2}, {FZ_HKV, 2}, {FZ_GROUP, 1}, {FZ_TQ, 139},
                        {FZ_TKV, 199}, {FZ_DK, 31}, {FZ_DV, 31}, {FZ_THREADS, 3}, END}, 3, {{0}}, 0},
    {"decode-splitkv-gqa", {{FZ_CLASS, 2}, {FZ_HKV, 1}, {FZ_GROUP, 3}, {FZ_TQ, 0},
                            {FZ_TKV, 0xdc}, {FZ_TKV_HI, 0x05}, {FZ_DK, 31}, {FZ_DV, 15},
                            {FZ_CAUSAL, 1}, {FZ_THREADS, 2}, END}, 4, {{0}}, 0},
    /* 128 query heads on one K/V head (g = 9 + 0x77), MLA's 576 / 512 dims cut down:
     * 128 grouped rows shared as 64 + 64 on the 96-row tables, split-KV merges in bands */
    {"decode-wide-group", {{FZ_CLASS, 2}, {FZ_HKV, 0}, {FZ_GROUP, 0xf7}, {FZ_TQ, 0},
                           {FZ_TKV, 0x00}, {FZ_TKV_HI, 0x06}, {FZ_DK, 39}, {FZ_DV, 31},
                           {FZ_THREADS, 3}, END}, 43, {{0}}, 0},
    {"decode-grouped-17", {{FZ_CLASS, 2}, {FZ_HKV, 1}, {FZ_GROUP, 7}, {FZ_TQ, 16},
                           {FZ_TKV, 0x10}, {FZ_TKV_HI, 0x04}, {FZ_DK, 7}, {FZ_DV, 9},
                           {FZ_CAUSAL, 2}, END}, 5, {{0}}, 0},
    {"wide-dk1024", {{FZ_CLASS, 3}, {FZ_TQ, 4}, {FZ_TKV, 40}, {FZ_DK, 0xff}, {FZ_DK_HI, 0x03},
                     {FZ_DV, 200}, END}, 6, {{0}}, 0},
    {"dk1-dv1", {{FZ_TQ, 9}, {FZ_TKV, 30}, {FZ_DK, 0}, {FZ_DV, 0}, END}, 7, {{0}}, 0},
    {"layouts-bthd-padded", {{FZ_CLASS, 1}, {FZ_TQ, 40}, {FZ_TKV, 70}, {FZ_LAYOUT, 0x69}, END}, 8, {{0}}, 0},
    {"wild-broadcast-inputs", {{FZ_LAYOUT, 0x3f}, {FZ_WILD_Q, 0x10}, {FZ_WILD_K, 0x04},
                               {FZ_WILD_V, 0x05}, {FZ_TQ, 5}, {FZ_TKV, 9}, END}, 9, {{0}}, 0},
    {"wild-gapped-output", {{FZ_LAYOUT, ALL(3)}, {FZ_WILD_Q, 0x15}, {FZ_WILD_K, 0x15},
                            {FZ_WILD_V, 0x15}, {FZ_WILD_O, 0x6a}, {FZ_TQ, 7}, {FZ_TKV, 9}, END}, 10, {{0}}, 0},
    {"wild-huge-stride", {{FZ_LAYOUT, ALL(3)}, {FZ_WILD_Q, 0x15}, {FZ_WILD_K, 0x37},
                          {FZ_WILD_V, 0x15}, {FZ_WILD_O, 0x15}, {FZ_TQ, 3}, {FZ_TKV, 4}, END}, 11, {{0}}, 0},
    {"dtypes-f16-bf16", {{FZ_DTYPE, 0x9}, {FZ_TQ, 20}, {FZ_TKV, 50}, END}, 12, {{0}}, 0},
    {"dtypes-all-bf16", {{FZ_DTYPE, 0xaa}, {FZ_CLASS, 1}, {FZ_TQ, 70}, {FZ_TKV, 100}, END}, 13, {{0}}, 0},
    {"dtypes-f16-out", {{FZ_DTYPE, 0x40}, {FZ_CAUSAL, 1}, {FZ_TQ, 20}, {FZ_TKV, 50}, END}, 14, {{0}}, 0},
    {"bf16-compute-prefill", {{FZ_MODS, 0x13}, {FZ_CLASS, 1}, {FZ_TQ, 70}, {FZ_TKV, 100},
                              {FZ_DK, 63}, {FZ_DV, 40}, {FZ_CAUSAL, 1}, END}, 54, {{0}}, 0},
    {"bf16-compute-decode-split", {{FZ_MODS, 0x10}, {FZ_CLASS, 2}, {FZ_HKV, 1}, {FZ_GROUP, 3},
                                   {FZ_TQ, 0}, {FZ_TKV, 0xdc}, {FZ_TKV_HI, 0x05}, {FZ_DTYPE, 0x2a},
                                   {FZ_CAUSAL, 1}, END}, 55, {{0}}, 0},
    {"mask-additive-f16-bcast", {{FZ_MASK, 0x35}, {FZ_MASK_HIDDEN, 1}, {FZ_TQ, 20}, {FZ_TKV, 70}, END}, 15, {{0}}, 0},
    {"mask-bool-rows", {{FZ_MASK, 0x42}, {FZ_MASK_HIDDEN, 2}, {FZ_CLASS, 1}, {FZ_TQ, 50},
                        {FZ_TKV, 150}, {FZ_CAUSAL, 1}, END}, 16, {{0}}, 0},
    {"mask-all-hidden", {{FZ_MASK, 0x01}, {FZ_MASK_HIDDEN, 3}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 17, {{0}}, 0},
    {"mask-huge-batch-stride", {{FZ_MASK, 0x81}, {FZ_B, 1}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 18, {{0}}, 0},
    {"lens-padded", {{FZ_LENS, 1}, {FZ_B, 1}, {FZ_CLASS, 1}, {FZ_B, 2}, {FZ_TQ, 60}, {FZ_TKV, 90},
                     {FZ_CAUSAL, 1}, END}, 19, {{0}}, 0},
    {"lens-kv", {{FZ_LENS, 2}, {FZ_B, 1}, {FZ_TQ, 3}, {FZ_TKV, 70}, END}, 20, {{0}}, 0},
    {"lens-q", {{FZ_LENS, 3}, {FZ_B, 1}, {FZ_TQ, 20}, {FZ_TKV, 30}, {FZ_CAUSAL, 2}, END}, 21, {{0}}, 0},
    {"lens-varlen", {{FZ_LENS, 4}, {FZ_CLASS, 1}, {FZ_B, 2}, {FZ_TQ, 60}, {FZ_TKV, 80},
                     {FZ_CAUSAL, 1}, {FZ_MASK, 0x01}, {FZ_MASK_HIDDEN, 1}, END}, 22, {{0}}, 0},
    {"window-small", {{FZ_WINDOW, 2}, {FZ_WL, 5}, {FZ_WR, 3}, {FZ_CLASS, 1}, {FZ_TQ, 100},
                      {FZ_TKV, 150}, END}, 23, {{0}}, 0},
    {"window-far", {{FZ_WINDOW, 3}, {FZ_WL, 2}, {FZ_WR, 3}, {FZ_TQ, 20}, {FZ_TKV, 40},
                    {FZ_CAUSAL, 1}, END}, 24, {{0}}, 0},
    {"softcap-alibi-sinks", {{FZ_SOFTCAP, 6}, {FZ_MODS, 3}, {FZ_GROUP, 2}, {FZ_TQ, 20},
                             {FZ_TKV, 60}, {FZ_CAUSAL, 1}, END}, 25, {{0}}, 0},
    {"softcap-small", {{FZ_SOFTCAP, 4}, {FZ_SCALE, 2}, {FZ_TQ, 20}, {FZ_TKV, 60}, END}, 26, {{0}}, 0},
    {"dropout", {{FZ_DROPOUT, 2}, {FZ_CLASS, 1}, {FZ_TQ, 30}, {FZ_TKV, 100}, END}, 27, {{0}}, 0},
    {"dropout-high-stats", {{FZ_DROPOUT, 3}, {FZ_MODS, 8}, {FZ_TQ, 10}, {FZ_TKV, 60}, END}, 28, {{0}}, 0},
    {"no-lse", {{FZ_MODS, 4}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 29, {{0}}, 0},
    {"scale-negative", {{FZ_SCALE, 3}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 30, {{0}}, 0},
    {"scale-tiny", {{FZ_SCALE, 4}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 31, {{0}}, 0},
    {"scale-subnormal", {{FZ_SCALE, 5}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 32, {{0}}, 0},
    {"scale-huge", {{FZ_SCALE, 6}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 33, {{0}}, 0},
    {"isa-auto", {{FZ_ISA, 6}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 34, {{0}}, 0},
    {"isa-unsupported", {{FZ_ISA, 7}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 35, {{0}}, 0},
    {"data-raw-bits", {{FZ_DATA, 3}, {FZ_TQ, 10}, {FZ_TKV, 70}, {FZ_DTYPE, 0x24}, END}, 36, {{0}}, 0},
    {"nan-in-k", {{FZ_DATA, 2}, {FZ_CAUSAL, 1}, {FZ_TQ, 20}, {FZ_TKV, 20}, END}, 37,
     {{1, 40, 0, 0}}, 1},
    {"inf-in-v-and-q", {{FZ_DATA, 2}, {FZ_TQ, 20}, {FZ_TKV, 30}, END}, 38,
     {{2, 13, 0, 1}, {0, 77, 0, 2}}, 2},
    {"subnormals-zeros", {{FZ_DATA, 2}, {FZ_TQ, 20}, {FZ_TKV, 30}, {FZ_DTYPE, 0x15}, END}, 39,
     {{0, 3, 0, 3}, {1, 9, 0, 4}, {2, 5, 0, 5}, {2, 6, 0, 6}}, 4},
    {"mask-inf-nan", {{FZ_DATA, 2}, {FZ_MASK, 0x01}, {FZ_TQ, 20}, {FZ_TKV, 30}, END}, 40,
     {{3, 10, 0, 1}, {3, 100, 0, 0}}, 2},
    {"alias-o-in-q", {{FZ_ALIAS, 6}, {FZ_ALIAS_AT, 1}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 41, {{0}}, 0},
    {"alias-o-after-q", {{FZ_ALIAS, 6}, {FZ_ALIAS_AT, 3}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 42, {{0}}, 0},
    {"alias-lse-in-o-end", {{FZ_ALIAS, 7}, {FZ_ALIAS_AT, 2}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 43, {{0}}, 0},
    {"guard-after-medium", {{FZ_ALIAS, 0x80}, {FZ_CLASS, 1}, {FZ_TQ, 40}, {FZ_TKV, 130},
                            {FZ_DTYPE, 0x16}, {FZ_LAYOUT, 0x24}, END}, 45, {{0}}, 0},
    {"guard-before-decode", {{FZ_ALIAS, 0xc0}, {FZ_CLASS, 2}, {FZ_TQ, 2}, {FZ_TKV, 0x30},
                             {FZ_TKV_HI, 0x04}, {FZ_DTYPE, 0x05}, END}, 46, {{0}}, 0},
    {"alias-lse-after-o", {{FZ_ALIAS, 7}, {FZ_ALIAS_AT, 3}, {FZ_TQ, 10}, {FZ_TKV, 20}, END}, 44, {{0}}, 0},
    /* a boolean mask with stride_b INT64_MAX - 100 and B = 2, outputs below the mask
     * (arena downwards) and above it: refused with SDPA_ERR_OVERFLOW both ways */
    {"mask-stride-int64max-o-below", {{FZ_MASK, 0x82}, {FZ_MASK_HIDDEN, 0x04}, {FZ_B, 1},
                                      {FZ_ALIAS, 0x18}, {FZ_TQ, 6}, {FZ_TKV, 9}, END}, 47, {{0}}, 0},
    {"mask-stride-int64max-o-above", {{FZ_MASK, 0x82}, {FZ_MASK_HIDDEN, 0x04}, {FZ_B, 1},
                                      {FZ_ALIAS, 0x08}, {FZ_TQ, 6}, {FZ_TKV, 9}, END}, 48, {{0}}, 0},
    {"mask-stride-2e54-additive", {{FZ_MASK, 0x81}, {FZ_MASK_HIDDEN, 0x09}, {FZ_B, 1},
                                   {FZ_TQ, 6}, {FZ_TKV, 9}, END}, 49, {{0}}, 0},
    {"wild-stride-2e54-q", {{FZ_LAYOUT, ALL(3)}, {FZ_WILD_Q, 0xb5}, {FZ_WILD_K, 0x15},
                            {FZ_WILD_V, 0x15}, {FZ_WILD_O, 0x15}, {FZ_B, 1}, {FZ_TQ, 3},
                            {FZ_TKV, 4}, END}, 50, {{0}}, 0},
    /* every buffer in one region, upwards and downwards, with a mask, lengths and sinks */
    {"arena-up", {{FZ_ALIAS, 0x08}, {FZ_MASK, 0x02}, {FZ_MASK_HIDDEN, 1}, {FZ_LENS, 1},
                  {FZ_B, 1}, {FZ_MODS, 2}, {FZ_TQ, 12}, {FZ_TKV, 40}, {FZ_CAUSAL, 1}, END}, 51, {{0}}, 0},
    {"arena-down-varlen", {{FZ_ALIAS, 0x18}, {FZ_MASK, 0x01}, {FZ_MASK_HIDDEN, 1}, {FZ_LENS, 4},
                           {FZ_B, 1}, {FZ_TQ, 12}, {FZ_TKV, 40}, {FZ_CAUSAL, 2}, END}, 52, {{0}}, 0},
    /* a NaN key row under a window and a mask: its rows' lse is NaN, their hidden keys'
     * weights must still be 0 */
    {"weights-nan-key-window", {{FZ_DATA, 2}, {FZ_WINDOW, 2}, {FZ_WL, 4}, {FZ_WR, 1},
                                {FZ_MASK, 0x02}, {FZ_MASK_HIDDEN, 1}, {FZ_CLASS, 1}, {FZ_TQ, 40},
                                {FZ_TKV, 70}, END}, 53, {{1, 200, 0, 0}}, 1},
    /* KV caches: FZ_PAGE's low nibble n picks page sizes 1, 2, 3, 5, 7, 16, 17, 31, 64,
     * 100, 256, len_kv, len_kv + 5 (n = 1 .. 13); FZ_KV_DT K | V << 3 with 1 int8, 2 e4m3,
     * 3 e5m2, 4 int4; FZ_QSCALE K | V << 2 with 0 per token (computed), 1 per head,
     * 2 per tensor, 3 per token (given), the group selector above */
    {"kv-paged-page1", {{FZ_PAGE, 1}, {FZ_TQ, 5}, {FZ_TKV, 30}, {FZ_CAUSAL, 1}, END}, 60, {{0}}, 0},
    {"kv-paged-page3-junk-gap-lens", {{FZ_PAGE, 0x63}, {FZ_CLASS, 1}, {FZ_B, 2}, {FZ_LENS, 2},
                                      {FZ_TQ, 40}, {FZ_TKV, 130}, {FZ_CAUSAL, 1}, END}, 61, {{0}}, 0},
    {"kv-paged-page17-split-writes-bf16", {{FZ_PAGE, 0x87}, {FZ_DTYPE, 0x28}, {FZ_CLASS, 1},
                                           {FZ_TQ, 70}, {FZ_TKV, 199}, END}, 62, {{0}}, 0},
    {"kv-paged-shared-prefix", {{FZ_PAGE, 0x16}, {FZ_B, 1}, {FZ_LENS, 2}, {FZ_TQ, 3},
                                {FZ_TKV, 60}, {FZ_CAUSAL, 1}, END}, 63, {{0}}, 0},
    {"kv-page-longer-than-len-kv", {{FZ_PAGE, 13}, {FZ_TQ, 4}, {FZ_TKV, 9}, END}, 64, {{0}}, 0},
    {"kv-one-key-page1", {{FZ_PAGE, 1}, {FZ_KV_DT, 0x09}, {FZ_TQ, 2}, {FZ_TKV, 0}, END}, 65, {{0}}, 0},
    {"kv-decode-split-paged-int8", {{FZ_CLASS, 2}, {FZ_HKV, 1}, {FZ_GROUP, 3}, {FZ_TQ, 0},
                                    {FZ_TKV, 0xdc}, {FZ_TKV_HI, 0x05}, {FZ_PAGE, 6},
                                    {FZ_KV_DT, 0x09}, {FZ_THREADS, 2}, {FZ_CAUSAL, 1}, END}, 66, {{0}}, 0},
    {"kv-int8-groups-f16-scales", {{FZ_KV_DT, 0xc9}, {FZ_QSCALE, 0x40}, {FZ_DK, 31}, {FZ_DV, 15},
                                   {FZ_TQ, 10}, {FZ_TKV, 40}, END}, 67, {{0}}, 0},
    {"kv-e4m3-per-tensor", {{FZ_KV_DT, 0x12}, {FZ_QSCALE, 0x0a}, {FZ_TQ, 20}, {FZ_TKV, 50}, END}, 68, {{0}}, 0},
    {"kv-e5m2-per-head-f16", {{FZ_KV_DT, 0xdb}, {FZ_QSCALE, 0x05}, {FZ_HKV, 1}, {FZ_TQ, 10},
                              {FZ_TKV, 40}, END}, 69, {{0}}, 0},
    {"kv-int4-groups-padded-paged", {{FZ_KV_DT, 0x24}, {FZ_QSCALE, 0x30}, {FZ_LAYOUT, ALL(2)},
                                     {FZ_PAGE, 5}, {FZ_DK, 31}, {FZ_DV, 31}, {FZ_CLASS, 1},
                                     {FZ_TQ, 30}, {FZ_TKV, 100}, END}, 70, {{0}}, 0},
    {"kv-int8-per-token-given-bthd", {{FZ_KV_DT, 0x09}, {FZ_QSCALE, 0x0f}, {FZ_LAYOUT, ALL(1)},
                                      {FZ_TQ, 8}, {FZ_TKV, 33}, END}, 71, {{0}}, 0},
    {"kv-e4m3-k-int4-v-bf16-compute", {{FZ_KV_DT, 0x22}, {FZ_MODS, 0x10}, {FZ_PAGE, 9},
                                       {FZ_CLASS, 1}, {FZ_TQ, 70}, {FZ_TKV, 150}, {FZ_CAUSAL, 1},
                                       END}, 72, {{0}}, 0},
    {"kv-raw-codes-e4m3", {{FZ_DATA, 3}, {FZ_KV_DT, 0x12}, {FZ_PAGE, 3}, {FZ_TQ, 10},
                           {FZ_TKV, 40}, END}, 73, {{0}}, 0},
    {"kv-wild-pool-strides", {{FZ_LAYOUT, 0x3c}, {FZ_WILD_K, 0x14}, {FZ_WILD_V, 0x15},
                              {FZ_PAGE, 4}, {FZ_KV_DT, 0x09}, {FZ_TQ, 6}, {FZ_TKV, 20}, END}, 74, {{0}}, 0},
    {"kv-fp8-nan-key-window", {{FZ_DATA, 2}, {FZ_KV_DT, 0x12}, {FZ_PAGE, 2}, {FZ_WINDOW, 2},
                               {FZ_WL, 4}, {FZ_WR, 1}, {FZ_CAUSAL, 1}, {FZ_TQ, 20}, {FZ_TKV, 30},
                               END}, 75, {{1, 40, 0, 0}, {2, 77, 0, 0}}, 2},
    {"kv-varlen-quantized", {{FZ_LENS, 4}, {FZ_B, 1}, {FZ_KV_DT, 0x09}, {FZ_TQ, 12}, {FZ_TKV, 40},
                             {FZ_CAUSAL, 2}, END}, 76, {{0}}, 0},
    {"kv-mask-sinks-alibi-paged-int8", {{FZ_MASK, 0x02}, {FZ_MASK_HIDDEN, 1}, {FZ_MODS, 3},
                                        {FZ_PAGE, 8}, {FZ_KV_DT, 0x09}, {FZ_CLASS, 1}, {FZ_TQ, 40},
                                        {FZ_TKV, 120}, {FZ_CAUSAL, 1}, END}, 77, {{0}}, 0},
    {"kv-arena-down-paged-int4", {{FZ_ALIAS, 0x18}, {FZ_PAGE, 3}, {FZ_KV_DT, 0x24}, {FZ_DK, 7},
                                  {FZ_DV, 7}, {FZ_TQ, 6}, {FZ_TKV, 25}, END}, 78, {{0}}, 0},
    {"kv-guard-before-paged-fp8", {{FZ_ALIAS, 0xc0}, {FZ_PAGE, 6}, {FZ_KV_DT, 0x1a}, {FZ_CLASS, 2},
                                   {FZ_TQ, 2}, {FZ_TKV, 0x30}, {FZ_TKV_HI, 2}, END}, 79, {{0}}, 0},
    {"kv-wide-head-e5m2", {{FZ_CLASS, 3}, {FZ_TQ, 4}, {FZ_TKV, 40}, {FZ_DK, 0xff},
                           {FZ_DK_HI, 0x03}, {FZ_DV, 200}, {FZ_KV_DT, 0x1b}, {FZ_PAGE, 5}, END}, 80, {{0}}, 0},
    /* decode whose K and V keep a token's heads together (tokens-major views, one-token
     * pages, [page, Hkv, D] pages): one item an entry holding every query head
     * (src/plan.c heads_together) */
    {"decode-heads-together-bthd", {{FZ_CLASS, 2}, {FZ_HKV, 1}, {FZ_GROUP, 3}, {FZ_TQ, 0},
                                    {FZ_TKV, 0x2c}, {FZ_TKV_HI, 0x01}, {FZ_LAYOUT, ALL(1)},
                                    {FZ_THREADS, 2}, END}, 81, {{0}}, 0},
    {"decode-heads-together-split-f16-lens", {{FZ_CLASS, 2}, {FZ_B, 1}, {FZ_HKV, 1}, {FZ_GROUP, 2},
                                              {FZ_TQ, 0}, {FZ_TKV, 0x90}, {FZ_TKV_HI, 0x08},
                                              {FZ_LAYOUT, 0x14}, {FZ_DTYPE, 0x14}, {FZ_LENS, 2},
                                              {FZ_CAUSAL, 1}, END}, 82, {{0}}, 0},
    {"decode-heads-together-page1", {{FZ_PAGE, 1}, {FZ_CLASS, 2}, {FZ_HKV, 1}, {FZ_GROUP, 3},
                                     {FZ_TQ, 0}, {FZ_TKV, 0xf0}, {FZ_DK, 31}, {FZ_DV, 15}, END}, 83, {{0}}, 0},
    {"decode-heads-together-pages16-mask", {{FZ_PAGE, 6}, {FZ_LAYOUT, ALL(1)}, {FZ_MASK, 0x02},
                                            {FZ_MASK_HIDDEN, 1}, {FZ_CLASS, 2}, {FZ_HKV, 1},
                                            {FZ_GROUP, 7}, {FZ_TQ, 0}, {FZ_TKV, 0x10},
                                            {FZ_TKV_HI, 0x02}, END}, 84, {{0}}, 0},
    {"decode-heads-together-nan-key", {{FZ_DATA, 2}, {FZ_LAYOUT, ALL(1)}, {FZ_CLASS, 2},
                                       {FZ_HKV, 1}, {FZ_GROUP, 3}, {FZ_TQ, 0}, {FZ_TKV, 0x80},
                                       END}, 85, {{1, 44, 1, 0}}, 1},
};

static void write_input(const char *dir, const char *name, const uint8_t *h, uint64_t data_seed,
                        const uint8_t (*inj)[FZ_INJ_BYTES], int ninj) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(h, 1, FZ_NFIELDS, f);
    for (int i = 0; i < FZ_SEED_BYTES; i++)
        fputc((int)((data_seed >> (8 * i)) & 0xff), f);
    for (int i = 0; i < ninj; i++)
        fwrite(inj[i], 1, FZ_INJ_BYTES, f);
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: gen-corpus DIR\n");
        return 2;
    }
    int n = 0;
    /* FZ_FAULT defaults to "none": any value at or above FZ_NFAULTS */
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        uint8_t h[FZ_NFIELDS] = {0};
        h[FZ_FAULT] = 0xff;
        for (int i = 0; i < 24 && seeds[s].set[i][0] >= 0; i++)
            h[seeds[s].set[i][0]] = (uint8_t)seeds[s].set[i][1];
        write_input(argv[1], seeds[s].name, h, seeds[s].data_seed, seeds[s].inj, seeds[s].ninj);
        n++;
    }
    /* every fault, on a small case with masks, lengths and ALiBi on, so each has its field
     * to break */
    for (int fault = 0; fault < FZ_NFAULTS; fault++) {
        uint8_t h[FZ_NFIELDS] = {0};
        h[FZ_B] = 1, h[FZ_HKV] = 1, h[FZ_TQ] = 6, h[FZ_TKV] = 10;
        h[FZ_LENS] = (uint8_t)(fault % 5);
        h[FZ_FAULT] = (uint8_t)fault;
        char name[32];
        snprintf(name, sizeof name, "fault-%02d", fault);
        write_input(argv[1], name, h, 100 + (uint64_t)fault, NULL, 0);
        n++;
    }
    /* every KV-cache fault and every faulty sdpa_kv_write, on a paged int8 K and int4 V
     * (the faults that need another setup make it); the writer faults also on a plain
     * cache and on writes split at pos */
    for (int kind = 0; kind < 2; kind++)
        for (int fault = 0; fault < (kind ? FZ_KV_NWFAULTS : FZ_KV_NFAULTS); fault++) {
            uint8_t h[FZ_NFIELDS] = {0};
            h[FZ_B] = 1, h[FZ_HKV] = 1, h[FZ_TQ] = 6, h[FZ_TKV] = 10, h[FZ_DK] = 31, h[FZ_DV] = 31;
            h[FZ_FAULT] = 0xff;
            h[FZ_KV_DT] = 0x21;
            h[FZ_PAGE] = 3;
            if (kind) {
                h[FZ_KV_WFAULT] = (uint8_t)(fault + 1);
                if (fault == 4 || fault == 11 || fault == 15)
                    h[FZ_PAGE] = 0;
                if (fault == 1 || fault == 8 || fault == 13)
                    h[FZ_PAGE] |= 0x80;
            } else {
                h[FZ_KV_FAULT] = (uint8_t)(fault + 1);
                h[FZ_LENS] = (uint8_t)(fault % 4);
            }
            char name[32];
            snprintf(name, sizeof name, "%s-%02d", kind ? "kvwrite-fault" : "kv-fault", fault);
            write_input(argv[1], name, h, 200 + (uint64_t)(kind * 50 + fault), NULL, 0);
            n++;
        }
    printf("gen-corpus: %d inputs in %s\n", n, argv[1]);
    return 0;
}
