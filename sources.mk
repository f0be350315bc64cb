# sources.mk - the library's sources and the compiler flags of each kernel table: the one
# list the Makefile and CMakeLists.txt both build from (CMake reads the `NAME := value`
# lines below, so keep each on one line). Adding a source file or an ISA starts here.

# The portable driver, compiled with no -m flags.
SDPA_SRCS := src/abi1.c src/alloc.c src/api.c src/dispatch.c src/finalize.c src/kvcache.c src/kvwrite.c src/linear.c src/mask.c src/merge.c src/mha.c src/plan.c src/reference.c src/schedule.c src/sdpa.c src/tile.c src/validate.c

# One kernel table per ISA; scalar is built on every target.
SDPA_KERNELS_scalar := kernels/scalar/scalar.c
SDPA_KERNELS_avx2 := kernels/avx2/avx2.c
SDPA_KERNELS_avx512 := kernels/avx512/avx512.c
SDPA_KERNELS_neon := kernels/neon/neon.c
SDPA_KERNELS_avx512bf16 := kernels/avx512bf16/avx512bf16.c
SDPA_KERNELS_amx := kernels/amx/amx.c
SDPA_KERNELS_neonbf16 := kernels/neonbf16/neonbf16.c

# The SIMD tables each target architecture builds (as `cc -dumpmachine` names it).
SDPA_ISAS_x86_64 := avx2 avx512 avx512bf16 amx
SDPA_ISAS_aarch64 := neon neonbf16
SDPA_ISAS_arm64 := neon neonbf16

# Flags per table; the CPUID/HWCAP bits src/dispatch.c checks for each must cover them.
SDPA_ISAFLAGS_scalar :=
SDPA_ISAFLAGS_avx2 := -mavx2 -mfma -mf16c
SDPA_ISAFLAGS_avx512 := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c
SDPA_ISAFLAGS_avx512bf16 := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c -mavx512bf16
SDPA_ISAFLAGS_amx := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c -mavx512bf16 -mamx-tile -mamx-bf16
SDPA_ISAFLAGS_neon :=
# FEAT_BF16 (BFMMLA, BFCVTN) is optional from Armv8.2, so its cores are all Armv8.2.
SDPA_ISAFLAGS_neonbf16 := -march=armv8.2-a+bf16
