/*
 * dispatch.c - which kernel table runs: CPU feature detection, the SDPA_ISA override and
 * the process-wide choice, made once.
 *
 * Detection asks the CPU (CPUID) and the OS (XGETBV: is the register state saved on a
 * context switch?) on x86; a CPU that has AVX-512 under an OS that does not enable ZMM
 * state must not run AVX-512 code. On aarch64 it reads the kernel's HWCAP/HWCAP2 words
 * (getauxval), which the kernel sets only for state it supports. This file is compiled
 * with no -m flags; it only references the tables the Makefile built (SDPA_BUILD_<ISA>
 * macros). It does not choose tile sizes or threads: that is the driver's business.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

static const char *const isa_names[SDPA_ISA_COUNT_] = {
    [SDPA_ISA_AUTO] = "auto",     [SDPA_ISA_SCALAR] = "scalar", [SDPA_ISA_AVX2] = "avx2",
    [SDPA_ISA_AVX512] = "avx512", [SDPA_ISA_NEON] = "neon",
};

const char *sdpa_isa_name(sdpa_isa isa) {
    if ((int)isa < 0 || isa >= SDPA_ISA_COUNT_)
        return "unknown";
    return isa_names[isa];
}

const sdpa_kernels *sdpa_dispatch_compiled(sdpa_isa isa) {
    switch (isa) {
    case SDPA_ISA_SCALAR:
        return &sdpa_kernels_scalar;
#ifdef SDPA_BUILD_AVX2
    case SDPA_ISA_AVX2:
        return &sdpa_kernels_avx2;
#endif
#ifdef SDPA_BUILD_AVX512
    case SDPA_ISA_AVX512:
        return &sdpa_kernels_avx512;
#endif
#ifdef SDPA_BUILD_NEON
    case SDPA_ISA_NEON:
        return &sdpa_kernels_neon;
#endif
    default:
        return NULL;
    }
}

/* ---- CPU detection ------------------------------------------------------------- */

/* usable[isa]: compiled in and runnable on this CPU under this OS. */
static int usable[SDPA_ISA_COUNT_];

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    /* XGETBV with ECX = 0 reads XCR0 (Intel SDM Vol. 2B, XGETBV); encoded as bytes so
     * the file needs no -mxsave. */
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}
#endif

void sdpa_cpu_x86(sdpa_x86_cpu *f) {
    memset(f, 0, sizeof *f);
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return;
    f->cpuid = 1;
    f->max_leaf = a;
    /* CPUID.0: the vendor string in EBX, EDX, ECX (Intel SDM Vol. 2A, CPUID) */
    memcpy(f->vendor, &b, 4);
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    /* CPUID.1:ECX (Intel SDM Vol. 2A, CPUID, Table 3-10): bit 12 FMA, bit 27 OSXSAVE,
     * bit 28 AVX, bit 29 F16C. */
    f->fma = (c >> 12) & 1;
    f->osxsave = (c >> 27) & 1;
    f->avx = (c >> 28) & 1;
    f->f16c = (c >> 29) & 1;
    if (f->osxsave) {
        f->xcr0 = xgetbv0();
        /* XCR0 (Intel SDM Vol. 1, 13.3): bit 1 SSE, bit 2 AVX (YMM upper halves) enabled;
         * bits 5-7 opmask, ZMM0-15 upper halves, ZMM16-31; bits 17-18 AMX TILECFG,
         * TILEDATA. */
        f->os_ymm = (f->xcr0 & 0x6) == 0x6;
        f->os_zmm = (f->xcr0 & 0xe6) == 0xe6;
        f->os_amx = ((f->xcr0 >> 17) & 3) == 3;
    }
    if (f->max_leaf < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    /* CPUID.(EAX=7,ECX=0):EBX (Table 3-8): bit 5 AVX2, bit 16 AVX512F, bit 17 AVX512DQ,
     * bit 30 AVX512BW, bit 31 AVX512VL; EDX: bit 22 AMX-BF16, bit 23 AVX512-FP16, bit 24
     * AMX-TILE, bit 25 AMX-INT8. */
    f->avx2 = (b >> 5) & 1;
    f->avx512f = (b >> 16) & 1;
    f->avx512dq = (b >> 17) & 1;
    f->avx512bw = (b >> 30) & 1;
    f->avx512vl = (b >> 31) & 1;
    f->amx_bf16 = (d >> 22) & 1;
    f->avx512_fp16 = (d >> 23) & 1;
    f->amx_tile = (d >> 24) & 1;
    f->amx_int8 = (d >> 25) & 1;
    /* CPUID.(EAX=7,ECX=0):EAX is the highest subleaf; CPUID.(EAX=7,ECX=1):EAX (Table
     * 3-8): bit 4 AVX-VNNI, bit 5 AVX512_BF16. */
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f->avx_vnni = (a >> 4) & 1;
        f->avx512_bf16 = (a >> 5) & 1;
    }
#endif
}

#if defined(__x86_64__) || defined(__i386__)
/* The tables' -m flags (Makefile ISAFLAGS_*) decide what each needs: AVX2 + FMA + F16C
 * with YMM state for avx2; AVX512F/DQ/BW/VL with ZMM state, and all of avx2's, for
 * avx512. */
static void detect_x86(void) {
    sdpa_x86_cpu f;
    sdpa_cpu_x86(&f);
    usable[SDPA_ISA_AVX2] = f.os_ymm && f.avx && f.avx2 && f.fma && f.f16c;
    usable[SDPA_ISA_AVX512] = f.os_zmm && f.avx512f && f.avx512dq && f.avx512bw &&
                              f.avx512vl && usable[SDPA_ISA_AVX2];
}
#endif

#if defined(__aarch64__)
/* AArch64 features as the kernel reports them in the auxiliary vector (getauxval, Linux
 * only: user space cannot read the ID registers portably, and HWCAP also says the kernel
 * supports the state). The NEON table needs only Advanced SIMD; the other bits are read
 * and kept for later optional tables (FP16 arithmetic, BF16 dot products, SVE) and shown
 * by SDPA_VERBOSE=1. */
static struct {
    int asimd, fphp, asimdhp, asimddp, sve, sve2, i8mm, bf16;
} arm_hw;

static void detect_aarch64(void) {
#if defined(__linux__)
    /* Bit positions from Linux <asm/hwcap.h> (arch/arm64/include/uapi/asm/hwcap.h),
     * spelled out so an older libc's <sys/auxv.h> without the newer names still builds. */
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    arm_hw.asimd = (hw >> 1) & 1;    /* HWCAP_ASIMD    (1 << 1) */
    arm_hw.fphp = (hw >> 9) & 1;     /* HWCAP_FPHP     (1 << 9): scalar FP16 arithmetic */
    arm_hw.asimdhp = (hw >> 10) & 1; /* HWCAP_ASIMDHP  (1 << 10): vector FP16 arithmetic */
    arm_hw.asimddp = (hw >> 20) & 1; /* HWCAP_ASIMDDP  (1 << 20): SDOT/UDOT */
    arm_hw.sve = (hw >> 22) & 1;     /* HWCAP_SVE      (1 << 22) */
    arm_hw.sve2 = (hw2 >> 1) & 1;    /* HWCAP2_SVE2    (1 << 1) */
    arm_hw.i8mm = (hw2 >> 13) & 1;   /* HWCAP2_I8MM    (1 << 13) */
    arm_hw.bf16 = (hw2 >> 14) & 1;   /* HWCAP2_BF16    (1 << 14): BFDOT, BFMMLA, BFCVT */
#else
    /* No HWCAP to ask: Advanced SIMD is part of every AArch64 application-profile CPU an
     * OS of this kind runs on; the optional features stay off. */
    arm_hw.asimd = 1;
#endif
    usable[SDPA_ISA_NEON] = arm_hw.asimd;
}
#endif

/* ---- the process-wide choice --------------------------------------------------- */

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* The choice made from SDPA_ISA or the CPU; SDPA_ISA_AUTO if SDPA_ISA named an ISA
 * that is not usable (every call then fails). */
static sdpa_isa initial_isa = SDPA_ISA_AUTO;
/* What sdpa_set_isa forced; SDPA_ISA_AUTO = use initial_isa. */
static _Atomic int forced_isa = SDPA_ISA_AUTO;

static void init(void) {
#if defined(__x86_64__) || defined(__i386__)
    detect_x86();
#endif
#if defined(__aarch64__)
    detect_aarch64();
#endif
    usable[SDPA_ISA_SCALAR] = 1;
    for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++)
        if (!sdpa_dispatch_compiled((sdpa_isa)i))
            usable[i] = 0;

    sdpa_isa best = SDPA_ISA_SCALAR;
    static const sdpa_isa preference[] = {SDPA_ISA_AVX512, SDPA_ISA_AVX2, SDPA_ISA_NEON};
    for (size_t i = 0; i < sizeof preference / sizeof preference[0]; i++)
        if (usable[preference[i]]) {
            best = preference[i];
            break;
        }
    initial_isa = best;

    const char *env = getenv("SDPA_ISA");
    if (env && *env) {
        sdpa_isa want = SDPA_ISA_COUNT_;
        for (int i = SDPA_ISA_AUTO; i < SDPA_ISA_COUNT_; i++)
            if (strcmp(env, isa_names[i]) == 0)
                want = (sdpa_isa)i;
        if (want == SDPA_ISA_AUTO) {
            initial_isa = best;
        } else if (want == SDPA_ISA_COUNT_ || !usable[want]) {
            fprintf(stderr,
                    "libsdpa: SDPA_ISA=%s is %s; every sdpa_forward call will fail with "
                    "SDPA_ERR_UNSUPPORTED_ISA. Usable here:",
                    env, want == SDPA_ISA_COUNT_ ? "not an ISA name" : "not usable on this CPU/build");
            for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++)
                if (usable[i])
                    fprintf(stderr, " %s", isa_names[i]);
            fprintf(stderr, "\n");
            initial_isa = SDPA_ISA_AUTO;
        } else {
            initial_isa = want;
        }
    }
    const char *verbose = getenv("SDPA_VERBOSE");
    if (verbose && strcmp(verbose, "1") == 0) {
        fprintf(stderr, "libsdpa %s: isa %s (usable:", SDPA_VERSION_STRING,
                initial_isa == SDPA_ISA_AUTO ? "none" : isa_names[initial_isa]);
        for (int i = SDPA_ISA_SCALAR; i < SDPA_ISA_COUNT_; i++)
            if (usable[i])
                fprintf(stderr, " %s", isa_names[i]);
#if defined(__aarch64__)
        fprintf(stderr, "; hwcap:%s%s%s%s%s%s%s%s", arm_hw.asimd ? " asimd" : "",
                arm_hw.fphp ? " fphp" : "", arm_hw.asimdhp ? " asimdhp" : "",
                arm_hw.asimddp ? " asimddp" : "", arm_hw.sve ? " sve" : "",
                arm_hw.sve2 ? " sve2" : "", arm_hw.i8mm ? " i8mm" : "",
                arm_hw.bf16 ? " bf16" : "");
#endif
        fprintf(stderr, ")%s\n", env && *env ? " [from SDPA_ISA]" : "");
    }
}

static void ensure_init(void) { pthread_once(&once, init); }

int sdpa_isa_supported(sdpa_isa isa) {
    ensure_init();
    if ((int)isa <= SDPA_ISA_AUTO || isa >= SDPA_ISA_COUNT_)
        return 0;
    return usable[isa];
}

sdpa_isa sdpa_get_isa(void) {
    ensure_init();
    int f = atomic_load(&forced_isa);
    return f != SDPA_ISA_AUTO ? (sdpa_isa)f : initial_isa;
}

sdpa_status sdpa_set_isa(sdpa_isa isa) {
    ensure_init();
    if (isa == SDPA_ISA_AUTO) {
        atomic_store(&forced_isa, SDPA_ISA_AUTO);
        return SDPA_OK;
    }
    if (!sdpa_isa_supported(isa))
        return SDPA_ERR_UNSUPPORTED_ISA;
    atomic_store(&forced_isa, (int)isa);
    return SDPA_OK;
}

const sdpa_kernels *sdpa_dispatch_table(sdpa_isa isa) {
    ensure_init();
    if (isa == SDPA_ISA_AUTO)
        isa = sdpa_get_isa();
    if (isa == SDPA_ISA_AUTO || !sdpa_isa_supported(isa))
        return NULL;
    return sdpa_dispatch_compiled(isa);
}
