# mk/dev.mk - developer targets of the Makefile: the aarch64 suite under qemu, fuzzing,
# ThreadSanitizer and valgrind. Included by the Makefile (which defines the library's
# sources, flags and build directories); nothing here is needed to build or install
# libsdpa.

# ---- aarch64 on an x86 host: cross-compile, run under qemu-user -----------------------
# Builds the library, the suite and the tools with $(AARCH64_CC) into build-aarch64/
# (CFLAGS, WERROR... pass through) and runs, as independent targets so `make -j2 -O
# test-aarch64` keeps both cores busy (one run under emulation takes 13-100 s):
#   - -cpu max (FEAT_BF16 included) with 2 OpenMP threads: every suite, --quick sweeps,
#     on the aarch64 tables, neon and neonbf16, one run per table (the neon run takes
#     ~100 s, the neonbf16 one ~40 s: the once-per-process api and soak suites run in
#     both). --no-oracle here and below: the test's double-precision oracle is portable
#     C that the x86 runs compare every case with; under emulation it took an eighth of
#     the features and kvcache suites (31 -> 26 s). The scalar table is the same C as on x86, where it runs in full; its
#     aarch64 build runs in the A72 run below. max is qemu-user's default aarch64 CPU
#     (qemu 7.2: SDPA_VERBOSE=1 reports hwcap bf16 and neonbf16 usable there), named
#     anyway so the run keeps FEAT_BF16 whatever another qemu's default is;
#   - -cpu cortex-a72 (ARMv8.0 only: any newer instruction dies with SIGILL) with 1: the
#     suites that run every tile function and the driver's main paths (api, seeds,
#     layout, skip, traps, ukernel) on scalar and neon, --quick: its job is to show the
#     baseline tables run on a core without the newer features; neonbf16 is reported not
#     usable there and none of its code runs. Not sweep (31 s under emulation): the
#     -cpu max run sweeps neon, x86 sweeps the scalar table's C, and the same code on
#     ARMv8.0 is what the suites here already execute;
#   - sdpa-run --check (plain C, no Google Benchmark) on both CPUs, and in the bf16
#     compute mode on neonbf16, one timed call each (--repeat 1: emulated times mean
#     nothing, and five calls of the bf16 mode took 57 s of CPU).
# Debian packages: gcc-aarch64-linux-gnu libgomp1-arm64-cross qemu-user.
AARCH64_CC   ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
AARCH64_RUN  := build-aarch64/sdpa-run

AARCH64_SUITES := aarch64-suite-neon aarch64-suite-neonbf16 aarch64-suite-a72 \
                  aarch64-run-max aarch64-run-bf16 aarch64-run-a72
.PHONY: test-aarch64 aarch64-build $(AARCH64_SUITES)
aarch64-build:
	$(MAKE) CC=$(AARCH64_CC) BUILD=build-aarch64 build-aarch64/sdpa-test \
	  build-aarch64/sdpa-demo $(AARCH64_RUN)
aarch64-suite-neon aarch64-suite-neonbf16: aarch64-suite-%: aarch64-build
	OMP_NUM_THREADS=2 $(QEMU_AARCH64) -cpu max build-aarch64/sdpa-test --quick --no-oracle \
	  --isa $*
aarch64-suite-a72: aarch64-build
	OMP_NUM_THREADS=1 $(QEMU_AARCH64) -cpu cortex-a72 build-aarch64/sdpa-test --quick \
	  --no-oracle \
	  --isa scalar,neon api seeds layout skip traps ukernel
aarch64-run-max: aarch64-build
	$(QEMU_AARCH64) -cpu max $(AARCH64_RUN) --check --repeat 1
aarch64-run-bf16: aarch64-build
	$(QEMU_AARCH64) -cpu max $(AARCH64_RUN) --check --repeat 1 --isa neonbf16 --compute bf16
aarch64-run-a72: aarch64-build
	$(QEMU_AARCH64) -cpu cortex-a72 $(AARCH64_RUN) --check --repeat 1 --isa neon --threads 1
test-aarch64: $(AARCH64_SUITES)

# ---- hardening: fuzzing, sanitizers, valgrind -----------------------------------------
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_ISA=auto|scalar|avx2|avx512|neon] [FUZZ_ARGS=...]
#                        libFuzzer campaign on sdpa_forward (tests/fuzz/), clang with
#                        -fsanitize=fuzzer,address,undefined; finds go to
#                        build-fuzz/artifacts-<isa>/, the grown corpus to build-fuzz/corpus-<isa>/
#   make fuzz-isas FUZZ_ISAS="scalar avx2"   one campaign per ISA (-jN runs N at once)
#   make fuzz-corpus     regenerate the committed seed corpus tests/fuzz/corpus
#   make tsan            the concurrency suites (soak, threads, plan) under ThreadSanitizer: clang,
#                        libomp with its Archer tool so OpenMP's own synchronisation is seen
#   make valgrind        memcheck on the suite (--quick), once per VALGRIND_ISAS (valgrind 3.19
#                        cannot run AVX-512); VALGRIND_SUITES picks the suites; -j2 runs
#                        two ISAs at once
# Each has its own build directory.

FUZZ_CC      ?= clang
FUZZ_BUILD   := build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_ISA     ?= auto
FUZZ_ARGS    ?=
# The fuzz build instruments src/ and the scalar table (coverage for libFuzzer, ASan,
# UBSan) and builds the SIMD tables plain: clang 14 took 6 minutes for kernels/avx512 alone
# under ASan + UBSan (4 s plain), too long for CI. Their reads of caller memory are still
# checked: the fuzz cases put their buffers against unmapped pages (tests/fuzz/fuzz_core.c).
FUZZ_INSTR   := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
                -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -D_DEFAULT_SOURCE $(WARN) $(CFLAGS) -fopenmp -Iinclude
FUZZ_OBJS    := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(LIB_SRCS))
FUZZ_SRCS    := tests/fuzz/fuzz_main.c tests/fuzz/fuzz_core.c common/case.c tests/oracle.c

.PHONY: fuzz fuzz-isas fuzz-corpus tsan valgrind valgrind-build
$(FUZZ_BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INSTR) $(ISA_DEFS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/kernels/scalar/%.o: kernels/scalar/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INSTR) -MMD -MP -c $< -o $@

# (with the library build's kernel flags, so a compiler cache serves them from the clang
# build's objects)
$(FUZZ_BUILD)/obj/kernels/%.o: kernels/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(KERN_CFLAGS) $(SDPA_ISAFLAGS_$(word 2,$(subst /, ,$<))) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/sdpa-fuzz: $(FUZZ_SRCS) tests/fuzz/fuzz_core.h common/case.h $(FUZZ_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
	  -fno-sanitize-recover=all -fno-omit-frame-pointer -o $@ $(FUZZ_SRCS) $(FUZZ_OBJS) \
	  -fopenmp=libomp -lm -lpthread

fuzz: fuzz-isa-$(FUZZ_ISA)

# One campaign per ISA, each with its own corpus and artifact directories, so
# `make -j2 -O fuzz-isas FUZZ_ISAS="scalar avx2 avx512"` runs two at a time.
FUZZ_ISAS ?= $(FUZZ_ISA)
fuzz-isas: $(addprefix fuzz-isa-,$(FUZZ_ISAS))
fuzz-isa-%: $(FUZZ_BUILD)/sdpa-fuzz
	@mkdir -p $(FUZZ_BUILD)/corpus-$* $(FUZZ_BUILD)/artifacts-$*
	SDPA_ISA=$* LSAN_OPTIONS=suppressions=tests/fuzz/lsan.supp \
	  ./$(FUZZ_BUILD)/sdpa-fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=30 \
	  -rss_limit_mb=4096 -max_len=512 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_BUILD)/artifacts-$*/ $(FUZZ_ARGS) \
	  $(FUZZ_BUILD)/corpus-$* tests/fuzz/corpus

$(FUZZ_BUILD)/gen-corpus: tests/fuzz/gen_corpus.c tests/fuzz/fuzz_core.h
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -o $@ $<

fuzz-corpus: $(FUZZ_BUILD)/gen-corpus
	rm -rf tests/fuzz/corpus
	mkdir -p tests/fuzz/corpus
	./$(FUZZ_BUILD)/gen-corpus tests/fuzz/corpus

-include $(shell find $(FUZZ_BUILD) -name '*.d' 2>/dev/null)

# ThreadSanitizer sees OpenMP's synchronisation only through libomp's Archer tool
# (libomp-dev); without it every team is a false race. The runtime itself is not
# instrumented, hence ignore_noninstrumented_modules.
TSAN_BUILD   := build-tsan
TSAN_SECONDS ?= 20
ARCHER       ?= $(firstword $(wildcard /usr/lib/llvm-*/lib/libarcher.so))
tsan:
	@test -n "$(ARCHER)" || { echo "make tsan needs libomp's Archer (libarcher.so):" \
	  "apt-get install libomp-dev"; exit 1; }
	$(MAKE) CC=clang SANITIZE=thread BUILD=$(TSAN_BUILD) $(TSAN_BUILD)/sdpa-test
	TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1" \
	  OMP_TOOL_LIBRARIES=$(ARCHER) SDPA_SOAK_SECONDS=$(TSAN_SECONDS) \
	  ./$(TSAN_BUILD)/sdpa-test --quick soak threads plan

# memcheck on the gcc build, the process-wide ISA and the suites' ISA both forced, so no
# instruction of another table runs; OpenMP's threads sleep instead of spinning (valgrind
# runs one thread at a time). libgomp keeps its thread pool to the end: only definite
# leaks count. Every suite but sweep and threads (the same code at many more shapes and
# thread counts: over a minute each under valgrind, and the ASan build runs them); on the
# SIMD tables also not features and extremes, whose cases reach the driver's paths
# (masks, lengths, modifiers, special values), which the scalar run covers, while its
# ukernel, seeds, layout and layer suites reach every tile function of the table.
# Scalar's features and extremes are targets of their own, started in the order that
# lets -j2 finish both halves together: under valgrind avx2's run takes 71 s, scalar's
# features 50 s, the rest of scalar 43 s and its extremes 23 s, so avx2 beside features,
# then scalar's rest, then extremes (about 95 s in all). VALGRIND_BUILD=build reuses the
# default build where its flags are the same (CI). --no-oracle: memcheck's job is the
# library's memory, and the test's own double-precision oracle took a sixth of the
# scalar features suite under valgrind (60 -> 50 s); the native runs compare every case
# with it.
VALGRIND_BUILD  ?= build-vg
VALGRIND_ISAS   ?= scalar avx2
VALGRIND_SUITES ?= api seeds layout skip traps broken ukernel features layer extremes \
                   fuzzcases soak
VALGRIND_DRIVER_SUITES := features extremes
VALGRIND_RUN = SDPA_ISA=$(1) OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive valgrind -q \
  --error-exitcode=99 --leak-check=full --show-leak-kinds=definite \
  --errors-for-leak-kinds=definite ./$(VALGRIND_BUILD)/sdpa-test --quick --no-oracle \
  --isa $(1) $(2)
VALGRIND_DRIVERS := $(if $(filter scalar,$(VALGRIND_ISAS)),$(addprefix valgrind-scalar-,\
                      $(filter $(VALGRIND_DRIVER_SUITES),$(VALGRIND_SUITES))))
valgrind: $(addprefix valgrind-isa-,$(filter-out scalar,$(VALGRIND_ISAS))) \
          $(firstword $(VALGRIND_DRIVERS)) $(if $(filter scalar,$(VALGRIND_ISAS)),valgrind-isa-scalar) \
          $(wordlist 2,$(words $(VALGRIND_DRIVERS)),$(VALGRIND_DRIVERS))
valgrind-build:
	$(MAKE) BUILD=$(VALGRIND_BUILD) $(VALGRIND_BUILD)/sdpa-test
valgrind-scalar-%: valgrind-build
	$(call VALGRIND_RUN,scalar,$*)
valgrind-isa-%: valgrind-build
	$(call VALGRIND_RUN,$*,$(filter-out $(VALGRIND_DRIVER_SUITES),$(VALGRIND_SUITES)))

# ---- ABI: a program built against the previous release's header ---------------------
# tests/abi/sdpa-0.1.0.h is the 0.1.0 include/sdpa.h, kept verbatim; the caller built
# against it runs against this build's shared library (README, "ABI policy").
.PHONY: abi-test
abi-test: $(BUILD)/libsdpa.so
	$(CC) -std=c11 $(WARN) -Itests/abi tests/abi/old_caller.c -o $(BUILD)/abi-old-caller \
	  -L$(BUILD) -lsdpa -lm
	LD_LIBRARY_PATH=$(BUILD) ./$(BUILD)/abi-old-caller
