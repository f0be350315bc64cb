/*
 * internal.h - what the files of src/ share with each other and with the tests: the
 * validated problem, the dispatcher's view of the kernel tables, and the driver entry
 * that takes an explicit table (so tests can run a deliberately broken one).
 *
 * Nothing here is public API: the symbols are hidden from the shared library
 * (-fvisibility=hidden) and reachable only by linking the static library.
 */
#ifndef SDPA_INTERNAL_H
#define SDPA_INTERNAL_H

#include <stdint.h>

#include "../kernels/ukernel.h"
#include "sdpa.h"

/* A descriptor and its views after validation: defaults resolved, every extent known
 * to fit in int64 and in the address space, fp32 pointers typed. */
typedef struct sdpa_problem {
    int64_t B, Hq, Hkv, Tq, Tkv, Dk, Dv;
    int64_t group;  /* Hq / Hkv */
    float scale;    /* resolved: desc->scale, or 1/sqrt(Dk) when that is 0 */
    int causal;     /* sdpa_causal */
    int num_threads;
    int isa;
    const float *q, *k, *v;
    float *o, *lse;
    /* element strides, [batch, head, row] */
    int64_t qs[3], ks[3], vs[3], os[3];
} sdpa_problem;

/* Checks every field and view; on success fills *p. Writes nothing else. */
sdpa_status sdpa_validate(const sdpa_desc *desc, const sdpa_tensor *q, const sdpa_tensor *k,
                          const sdpa_tensor *v, const sdpa_tensor *o, const float *lse,
                          sdpa_problem *p);

/* Visible key range of query row i under the problem's structural masks: keys j with
 * 0 <= j < sdpa_row_end(p, i) are visible. Bottom-right causal: i + (Tkv - Tq) + 1,
 * clamped to [0, Tkv]. */
static inline int64_t sdpa_row_end(const sdpa_problem *p, int64_t i) {
    if (p->causal == SDPA_CAUSAL_NONE)
        return p->Tkv;
    int64_t e = i + (p->Tkv - p->Tq) + 1;
    return e < 0 ? 0 : (e > p->Tkv ? p->Tkv : e);
}

/* The table for a call: the forced ISA if isa != 0, else the process-wide one. Returns
 * NULL when that ISA is not usable (the status to report is SDPA_ERR_UNSUPPORTED_ISA). */
const sdpa_kernels *sdpa_dispatch_table(sdpa_isa isa);

/* The table of an ISA compiled into this build, usable on this CPU or not; NULL if not
 * compiled in. Tests use it to compare tables tile by tile. */
const sdpa_kernels *sdpa_dispatch_compiled(sdpa_isa isa);

/* The raw x86 feature bits CPUID and XGETBV report, as dispatch.c reads them to decide
 * which tables are usable; tools/sdpa-cpuinfo prints them. All zero on other targets. */
typedef struct sdpa_x86_cpu {
    int cpuid;          /* CPUID answered (an x86 target) */
    unsigned max_leaf;  /* CPUID.0:EAX */
    char vendor[13];    /* CPUID.0, NUL-terminated */
    int fma, osxsave, avx, f16c;                      /* CPUID.1:ECX */
    int avx2, avx512f, avx512dq, avx512bw, avx512vl;  /* CPUID.(7,0):EBX */
    int amx_bf16, avx512_fp16, amx_tile, amx_int8;    /* CPUID.(7,0):EDX */
    int avx_vnni, avx512_bf16;                        /* CPUID.(7,1):EAX */
    uint64_t xcr0;      /* XCR0, read only when OSXSAVE is set (else 0) */
    int os_ymm, os_zmm, os_amx;  /* XCR0: the OS saves YMM / opmask+ZMM / AMX tile state */
} sdpa_x86_cpu;

void sdpa_cpu_x86(sdpa_x86_cpu *f);

/* The fused driver on a validated problem with an explicit table. */
sdpa_status sdpa_forward_with(const sdpa_kernels *kt, const sdpa_problem *p,
                              sdpa_stats *stats);

#endif /* SDPA_INTERNAL_H */
