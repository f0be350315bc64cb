/*
 * sdpa-cpuinfo - what libsdpa sees of this CPU: the raw x86 feature bits that decide its
 * kernel tables (CPUID leaves 1 and 7, XCR0 as XGETBV reads it), the library's ISA
 * registry (which tables are built and usable, best first), and the one a call would get
 * (after SDPA_ISA, if set).
 *
 * It prints the same bits src/dispatch.c decides from (sdpa_cpu_x86), so a surprising
 * choice can be traced to a bit. It is not a general CPU inventory: only features a
 * libsdpa table uses or might use are shown. On aarch64 it lists the tables only
 * (SDPA_VERBOSE=1 makes the library log its HWCAP view).
 *
 *   sdpa-cpuinfo
 */
#include <stdio.h>
#include <stdlib.h>

#include "../src/internal.h"

static void bit(const char *name, int v) { printf("  %-12s %d\n", name, v); }

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: sdpa-cpuinfo (no arguments)\n");
        return 2;
    }
    printf("libsdpa %s\n", sdpa_version());

    sdpa_x86_cpu f;
    sdpa_cpu_x86(&f);
    if (f.cpuid) {
        printf("cpu vendor %s, CPUID max leaf 0x%x\n", f.vendor, f.max_leaf);
        printf("CPUID.1:ECX\n");
        bit("FMA", f.fma);
        bit("OSXSAVE", f.osxsave);
        bit("AVX", f.avx);
        bit("F16C", f.f16c);
        printf("CPUID.(EAX=7,ECX=0):EBX\n");
        bit("AVX2", f.avx2);
        bit("AVX512F", f.avx512f);
        bit("AVX512DQ", f.avx512dq);
        bit("AVX512BW", f.avx512bw);
        bit("AVX512VL", f.avx512vl);
        printf("CPUID.(EAX=7,ECX=0):EDX\n");
        bit("AVX512_FP16", f.avx512_fp16);
        bit("AMX-BF16", f.amx_bf16);
        bit("AMX-TILE", f.amx_tile);
        bit("AMX-INT8", f.amx_int8);
        printf("CPUID.(EAX=7,ECX=1):EAX\n");
        bit("AVX-VNNI", f.avx_vnni);
        bit("AVX512_BF16", f.avx512_bf16);
        if (f.osxsave)
            printf("XCR0 0x%llx (state the OS saves)\n", (unsigned long long)f.xcr0);
        else
            printf("XCR0 not readable (OSXSAVE = 0): no AVX state\n");
        bit("YMM", f.os_ymm);
        bit("opmask+ZMM", f.os_zmm);
        bit("AMX tiles", f.os_amx);
        printf("L1 data cache %d KiB\n", f.l1d_kb);
    } else {
        printf("no CPUID (not an x86 target)\n");
    }
    (void)sdpa_get_isa(); /* the library's one-time detection has run: the policy is set */
    printf("decode prefetch: rows ahead into %s, %d bytes; rows at addresses into %s, %d "
           "bytes\n",
           sdpa_prefetch_l1 ? "L1" : "L2", sdpa_prefetch_ahead, sdpa_prefetch_at_l1 ? "L1" : "L2",
           sdpa_prefetch_at_ahead);
    printf("decode blocks: %d keys\n", sdpa_decode_bc);

    printf("kernel tables, in the registry's order of preference\n");
    int n;
    const sdpa_isa_info *rows = sdpa_isa_registry(&n);
    for (int i = 0; i < n; i++) {
        const sdpa_kernels *kt = rows[i].kernels;
        if (!kt)
            printf("  %-8s not built for this target\n", rows[i].name);
        else if (!rows[i].usable)
            printf("  %-8s built, not usable on this CPU/OS\n", rows[i].name);
        else
            printf("  %-8s built, usable (Br %d, Bc %d)\n", rows[i].name, kt->br, kt->bc);
    }
    const char *env = getenv("SDPA_ISA");
    const sdpa_isa chosen = sdpa_get_isa();
    printf("chosen: %s%s%s%s\n", chosen == SDPA_ISA_AUTO ? "none" : sdpa_isa_name(chosen),
           env && *env ? " (SDPA_ISA=" : " (best usable; SDPA_ISA unset)", env && *env ? env : "",
           env && *env ? ")" : "");
    return chosen == SDPA_ISA_AUTO ? 1 : 0;
}
