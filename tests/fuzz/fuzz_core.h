/*
 * fuzz_core.h - one fuzz case of sdpa_forward: decode bytes into a descriptor, views and
 * data, run the fused path and the reference, check everything that must hold.
 *
 * Shared by the libFuzzer target (fuzz_main.c), the seed-corpus generator
 * (gen_corpus.c) and the normal test suite, which replays the committed corpus and the
 * regression inputs on every ISA (tests/test_fuzzcases.c). It is portable C with no
 * libFuzzer dependency. It is not a general random-test generator: the byte format below
 * is what libFuzzer mutates, and it is free to change with the corpus regenerated.
 *
 * Input format: FZ_NFIELDS header bytes (one per fz_field, in order; missing bytes read
 * as 0, so every prefix of an input is an input), 8 bytes of data seed (little endian),
 * then any number of 4-byte injections {operand, index lo, index hi, kind} that put
 * special values (NaN, +-inf, subnormals, signed zeros) into the data.
 *
 * A 0 in every field from FZ_PAGE on is the case as it was before those fields existed
 * (plain K and V, no KV fault), so an input written for the shorter header keeps its
 * meaning once zeros are inserted before its seed (how tests/fuzz/regress was carried
 * over).
 */
#ifndef SDPA_FUZZ_CORE_H
#define SDPA_FUZZ_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

/* The header fields, one byte each; what each byte selects is in fuzz_core.c decode(). */
enum fz_field {
    FZ_CLASS,    /* shape class: small, medium, decode (long Tkv), wide head dims */
    FZ_B,
    FZ_HKV,
    FZ_GROUP,    /* Hq = Hkv * group */
    FZ_TQ,
    FZ_TKV,      /* low byte of Tkv */
    FZ_TKV_HI,   /* high byte (decode and wide classes) */
    FZ_DK,
    FZ_DK_HI,    /* high byte (wide class) */
    FZ_DV,
    FZ_LAYOUT,   /* 2 bits per operand q, k, v, o: bhtd, bthd, padded, wild strides */
    FZ_WILD_Q,   /* wild strides: 2 bits each for t, h, b (0, natural, gapped, huge) + */
    FZ_WILD_K,   /* 2 bits choosing the gap or the huge value */
    FZ_WILD_V,
    FZ_WILD_O,
    FZ_DTYPE,    /* 2 bits per operand q, k, v, o */
    FZ_CAUSAL,
    FZ_SCALE,
    FZ_SOFTCAP,
    FZ_MODS,     /* bit 0 ALiBi, bit 1 sinks, bit 2 no lse, bit 3 stats, bit 4 bf16 compute */
    FZ_MASK,     /* bits 0-1 kind, 2-3 dtype, 4-6 broadcast (b, h, rows), 7 huge stride_b */
    FZ_MASK_HIDDEN, /* bits 0-1 fraction hidden, 2-3 which huge stride_b (FZ_MASK bit 7) */
    FZ_LENS,
    FZ_WINDOW,
    FZ_WL,
    FZ_WR,
    FZ_DROPOUT,
    FZ_THREADS,
    FZ_ISA,
    FZ_DATA,     /* 0-1 uniform [-1, 1), 2 uniform + injections, 3 raw bit patterns */
    FZ_FAULT,    /* < FZ_NFAULTS: one deliberately invalid field */
    FZ_ALIAS,    /* bits 0-2: 6 o inside q's buffer, 7 lse inside o's; bit 3: every buffer
                    from one region, bit 4: placed downwards (outputs below the inputs);
                    bit 7 guard pages (under AddressSanitizer; always elsewhere), bit 6
                    before the buffer */
    FZ_ALIAS_AT,
    /* KV caches (include/sdpa.h "KV caches"); K and V are caches when paged or quantized */
    FZ_PAGE,     /* bits 0-3 page size (0: not paged), bit 4 shared pages, bit 5 a gap after
                    each block-table row, bit 6 junk in unused table slots, bit 7 each
                    entry written by two sdpa_kv_write calls (pos) */
    FZ_KV_DT,    /* bits 0-2 K storage, 3-5 V storage (1 int8, 2 e4m3, 3 e5m2, 4 int4; else
                    FZ_DTYPE's), bit 6 K scales f16, bit 7 V scales f16 */
    FZ_QSCALE,   /* bits 0-1 K scale granularity, 2-3 V's (per token computed by
                    sdpa_kv_write, per head, per tensor, per token given), 4-7 the group */
    FZ_KV_FAULT, /* 1 .. FZ_KV_NFAULTS: one invalid KV-cache field (0 and above: none) */
    FZ_KV_WFAULT,/* 1 .. FZ_KV_NWFAULTS: an invalid sdpa_kv_write on the built cache */
    FZ_NFIELDS
};

/* Deliberate faults (FZ_FAULT values below this); each must make both entry points fail
 * with the outputs untouched. */
#define FZ_NFAULTS 35

/* Deliberate KV-cache faults (FZ_KV_FAULT - 1 below this): each must make both entry
 * points fail with the outputs untouched; and faulty sdpa_kv_write calls (FZ_KV_WFAULT
 * - 1 below FZ_KV_NWFAULTS), each of which must fail with the cache and its scales
 * untouched. */
#define FZ_KV_NFAULTS 25
#define FZ_KV_NWFAULTS 16

/* Bytes of the data seed after the header, and of one injection. */
#define FZ_SEED_BYTES 8
#define FZ_INJ_BYTES 4

/* Runs one case on `isa` (the ISA a case uses when its FZ_ISA byte asks for the fuzzed
 * one). Returns 1 if every check held; otherwise 0 with a description in msg. */
int fz_run(const uint8_t *data, size_t size, sdpa_isa isa, char *msg, size_t msglen);

#endif /* SDPA_FUZZ_CORE_H */
