/*
 * simd.h - the few helpers every SIMD kernel table shares (x86 and NEON): forced
 * inlining, full unrolling, the byte size of a storage type, prefetching a row of caller
 * memory ahead of its use.
 *
 * It holds no instruction of any ISA (only compiler builtins every target has), so a
 * table file may include it whatever its flags. It is not a vector layer: vectors,
 * loads, masks and the exp live in kernels/x86/ (vec_*.h, tiles.h) and in
 * kernels/neon/ (neon.c, neon_mem.h).
 */
#ifndef SDPA_SIMD_H
#define SDPA_SIMD_H

#include <stddef.h>

#include "sdpa.h"
#include "ukernel.h"

/* The tile functions are written once with compile-time row/vector counts and
 * instantiated per count; forcing the inlining is what turns their small arrays of
 * vectors (accumulators, loaded rows) into registers: a call would put them on the stack. */
#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Full unrolling for loops whose count is a compile-time constant once a tile is
 * instantiated (rows, vectors, transposes), so arrays of vectors become registers; gcc
 * and clang spell it differently. gcc takes a bound: 32 covers the longest such loop (a
 * register tile's 24 accumulators). */
#if defined(__clang__)
#define UNROLL_FULL _Pragma("clang loop unroll(full)")
#else
#define UNROLL_FULL _Pragma("GCC unroll 32")
#endif
/* And none, for a loop whose copies would only add code (the prefetches of a step). */
#if defined(__clang__)
#define NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define NO_UNROLL _Pragma("GCC unroll 1")
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* Bytes of one element of a storage type (validate.c admits only these three). */
static inline size_t elem_bytes(sdpa_dtype dt) { return dt == SDPA_F32 ? 4 : 2; }

/* Lines [0, nb) bytes of a row of caller memory into the cache, ahead of its use: see
 * SDPA_PREFETCH_AHEAD in ukernel.h. Into L1 (x86 prefetcht0, Arm PRFM PLDL1KEEP) where
 * l1, else L2 (prefetcht1, PLDL2KEEP): sdpa_prefetch_l1 for a stream's rows,
 * sdpa_prefetch_at_l1 for rows at addresses, which src/dispatch.c sets once from CPUID
 * (its comment has the measurements). Unrolled (in full where
 * nb is a constant), because a loop around each prefetch was slower in decode, where the
 * prefetches are what the loads wait on (docs/PERFORMANCE.md, "Kernel measurements"). */
ALWAYS_INLINE void prefetch_row_to(const char *row, size_t nb, int l1) {
    if (l1) {
        _Pragma("GCC unroll 16")
        for (size_t b = 0; b < nb; b += 64) /* 64-byte lines */
            __builtin_prefetch(row + b, 0, 3);
    } else {
        _Pragma("GCC unroll 16")
        for (size_t b = 0; b < nb; b += 64)
            __builtin_prefetch(row + b, 0, 2);
    }
}

/* prefetch_row into L1 or L2 as sdpa_prefetch_l1 says (a stream's rows). */
ALWAYS_INLINE void prefetch_row(const char *row, size_t nb) {
    prefetch_row_to(row, nb, sdpa_prefetch_l1);
}

/* A pack's prefetch of the next panel's rows while it transposes this panel's: the next
 * R rows after the panel at src (left rows from src on, none asked for past them: a lone
 * row's stride may be any size), rowb bytes each, ldb bytes apart. Where the next rows
 * are at most PACK_PF_BURST bytes in all, at once (pack_pf_begin, before the panel);
 * else line by line as the columns go (pack_pf_step, with each column step's byte offset
 * off and width nb: the lines of those columns of the next rows), so the requests never
 * run ahead of the miss buffers. A burst of MLA's 16 rows of 2304 bytes (576 lines)
 * packed at DRAM speed even with K in L3; panels of 8 KiB (16 rows at Dk = 128, fp32)
 * packed as fast or faster in a burst (docs/PERFORMANCE.md, "pack_k's prefetches for
 * long rows"). */
#define PACK_PF_BURST 8192

typedef struct {
    const char *next; /* the next panel's first row */
    size_t ldb;
    int np;           /* its rows (<= 0: none) */
    int burst;        /* asked for at once */
} pack_pf;

ALWAYS_INLINE pack_pf pack_pf_begin(const int R, const char *src, size_t ldb, int left,
                                    size_t rowb) {
    pack_pf f;
    f.np = min_int(R, left - R);
    f.next = f.np > 0 ? src + (size_t)R * ldb : src;
    f.ldb = ldb;
    f.burst = (size_t)R * rowb <= PACK_PF_BURST;
    if (f.burst)
        for (int i = 0; i < f.np; i++)
            prefetch_row(f.next + (size_t)i * ldb, rowb);
    return f;
}

/* (a step of fewer than 64 bytes asks only where a line starts, relative to the row) */
ALWAYS_INLINE void pack_pf_step(const int R, const pack_pf *f, size_t off, size_t nb) {
    if (f->burst || (nb < 64 && off % 64 != 0))
        return;
    UNROLL_FULL
    for (int i = 0; i < R; i++)
        if (i < f->np)
            prefetch_row(f->next + (size_t)i * f->ldb + off, nb < 64 ? 64 : nb);
}

#endif /* SDPA_SIMD_H */
