# libsdpa - fused scaled-dot-product attention for CPUs.
#
#   make                 build/libsdpa.a, build/libsdpa.so (soname libsdpa.so.$(SOVERSION))
#   make test            build and run the test suite (ends with "N passed, N failed")
#   make demo            build and run tools/sdpa-demo (fused vs reference, errors, times)
#   make cpuinfo         build and run tools/sdpa-cpuinfo (CPUID/XCR0 bits, usable ISAs)
#   make bench           build and run the benchmark (see "the benchmark" below)
#   make test-aarch64    cross-compile for aarch64 and run the suite under qemu-aarch64
#   make install PREFIX=/usr/local [DESTDIR=...]   header, both libraries, sdpa.pc
#   make clean
#
# Knobs: CC=gcc|clang (or a cross compiler), OPENMP=0 for a serial library, WERROR=1
# (CI) for -Werror, SANITIZE=address,undefined for a sanitized build in its own
# directory, CFLAGS for optimisation/debug flags.
#
# Per-ISA compiler flags apply to kernels/<isa>/ files only; src/ is compiled with no
# -m flags, so nothing outside the kernel tables can use an instruction the CPU may lack.
# The ISA list comes from the target architecture (CC -dumpmachine) and from which
# kernels/<isa> directories exist.

VERSION   := 0.1.0
SOVERSION := 0
PREFIX    ?= /usr/local
LIBDIR    ?= $(PREFIX)/lib
INCDIR    ?= $(PREFIX)/include

OPENMP   ?= 1
WERROR   ?= 0
SANITIZE ?=
CFLAGS   ?= -O2 -g

ARCH := $(firstword $(subst -, ,$(shell $(CC) -dumpmachine)))
IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -qi clang && echo 1)

ifneq ($(SANITIZE),)
BUILD ?= build-san
else
BUILD ?= build
endif

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla
ifeq ($(WERROR),1)
WARN += -Werror
endif

OMP_CFLAGS :=
OMP_LIBS   :=
OMP_PC     :=
ifeq ($(OPENMP),1)
OMP_CFLAGS := -fopenmp
ifeq ($(IS_CLANG),1)
OMP_LIBS := -fopenmp=libomp
OMP_PC   := -lomp
else
OMP_LIBS := -fopenmp
OMP_PC   := -lgomp
endif
endif

SAN_FLAGS :=
ifneq ($(SANITIZE),)
SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
endif

BASE_CFLAGS := -std=c11 -D_DEFAULT_SOURCE $(WARN) $(CFLAGS) $(OMP_CFLAGS) $(SAN_FLAGS) -Iinclude
LIB_CFLAGS  := $(BASE_CFLAGS) -fPIC -fvisibility=hidden
LDLIBS      := $(OMP_LIBS) $(SAN_FLAGS) -lm -lpthread

# ---- kernel tables -------------------------------------------------------------------
ISAS_x86_64  := avx2 avx512
ISAS_aarch64 := neon
ISAS_arm64   := neon
SIMD_ISAS := $(foreach i,$(ISAS_$(ARCH)),$(if $(wildcard kernels/$(i)/*.c),$(i)))

# Flags per ISA, and the CPUID/HWCAP bits src/dispatch.c checks for each must cover them.
ISAFLAGS_scalar :=
ISAFLAGS_avx2   := -mavx2 -mfma -mf16c
ISAFLAGS_avx512 := -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c
ISAFLAGS_neon   :=

LIB_SRCS := $(wildcard src/*.c) $(wildcard kernels/scalar/*.c) \
            $(foreach i,$(SIMD_ISAS),$(wildcard kernels/$(i)/*.c))
LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
ISA_DEFS := $(foreach i,$(SIMD_ISAS),-DSDPA_BUILD_$(shell echo $(i) | tr a-z A-Z))

SO_NAME := libsdpa.so.$(SOVERSION)
SO_FILE := libsdpa.so.$(VERSION)

TEST_SRCS := $(wildcard tests/*.c)
TEST_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRCS))

.PHONY: all lib tools test demo cpuinfo install uninstall clean
all: lib tools

lib: $(BUILD)/libsdpa.a $(BUILD)/libsdpa.so

# Everything that changes what an object is: the compiler, the flags, the ISA set. The
# stamp is rewritten when any of it differs from the last build in $(BUILD), and every
# object depends on it, so switching CC, CFLAGS or OPENMP, or adding a kernels/<isa>
# directory, never leaves a stale object behind (dispatch.o once kept an old ISA list).
CONFIG_LINE  := $(CC) | $(CFLAGS) | OPENMP=$(OPENMP) | SANITIZE=$(SANITIZE) | $(ARCH) | $(SIMD_ISAS)
CONFIG_STAMP := $(BUILD)/config.stamp
$(shell mkdir -p $(BUILD) && { test "$$(cat $(CONFIG_STAMP) 2>/dev/null)" = '$(CONFIG_LINE)' || \
  printf '%s\n' '$(CONFIG_LINE)' > $(CONFIG_STAMP); })

$(BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(ISA_DEFS) -MMD -MP -c $< -o $@

# $(word 2,...) of the path is the ISA directory name.
$(BUILD)/obj/kernels/%.o: kernels/%.c
	@mkdir -p $(dir $@)
	$(CC) $(LIB_CFLAGS) $(ISAFLAGS_$(word 2,$(subst /, ,$<))) -MMD -MP -c $< -o $@

$(BUILD)/libsdpa.a: $(LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libsdpa.so: $(LIB_OBJS)
	$(CC) -shared -Wl,-soname,$(SO_NAME) -o $(BUILD)/$(SO_FILE) $^ $(LDLIBS)
	ln -sf $(SO_FILE) $(BUILD)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

# Tests link the static library: they reach internal symbols (kernel tables, the driver
# with an explicit table), which the shared library hides.
$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -D_GNU_SOURCE -MMD -MP -c $< -o $@

$(BUILD)/sdpa-test: $(TEST_OBJS) $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $(TEST_OBJS) $(BUILD)/libsdpa.a $(LDLIBS)

test: $(BUILD)/sdpa-test
	./$(BUILD)/sdpa-test

$(BUILD)/sdpa-demo: tools/sdpa-demo.c $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $< $(BUILD)/libsdpa.a $(LDLIBS)

demo: $(BUILD)/sdpa-demo
	./$(BUILD)/sdpa-demo

# sdpa-cpuinfo reads internal symbols (the raw CPUID bits), so it links the static library.
$(BUILD)/sdpa-cpuinfo: tools/sdpa-cpuinfo.c $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $< $(BUILD)/libsdpa.a $(LDLIBS)

cpuinfo: $(BUILD)/sdpa-cpuinfo
	./$(BUILD)/sdpa-cpuinfo

$(BUILD)/sdpa-heatmap: tools/sdpa-heatmap.c $(BUILD)/libsdpa.a
	$(CC) $(BASE_CFLAGS) -o $@ $< $(BUILD)/libsdpa.a $(LDLIBS)

# The plain-C command-line tools (no Google Benchmark needed).
tools: $(BUILD)/sdpa-demo $(BUILD)/sdpa-cpuinfo $(BUILD)/sdpa-run $(BUILD)/sdpa-heatmap

# ---- the benchmark (bench/) and the measuring tools (tools/) ---------------------------
#   make bench               build and run the standard suite (under 3 minutes on 2 cores):
#                            a table on stdout, Google Benchmark JSON in $(BENCH_JSON)
#   make bench-full          every ISA on every shape, the slow reference rows, more reps
#   make bench BLAS=openblas add the unfused OpenBLAS baseline rows (libopenblas-dev)
#   make sdpa-run            build/sdpa-run: one attention from flags (plain C)
#   make plot                $(BENCH_JSON) -> $(BUILD)/bench.png (python3-matplotlib)
#   make compare BASE=a.json [NEW=b.json]   per-case ratios of two bench JSON files
# Google Benchmark is Debian's libbenchmark-dev. Only bench/peak_<isa>.c (the FMA peak
# loops) get their ISA's -m flags; the rest of bench/ and tools/ is built without.
BLAS       ?=
BENCH_JSON ?= $(BUILD)/bench.json
BENCH_ARGS ?=
# Debian's python3 (where python3-matplotlib installs) even if another python3 is first
# in PATH.
PYTHON     ?= $(firstword $(wildcard /usr/bin/python3) python3)

# The C++ compiler that matches CC (and its OpenMP runtime), unless CXX is given.
ifeq ($(origin CXX),default)
CXX := $(if $(IS_CLANG),clang++,$(if $(filter %gcc,$(CC)),$(CC:%gcc=%g++),g++))
endif
BENCH_CFLAGS   := $(BASE_CFLAGS) -D_GNU_SOURCE
BENCH_CXXFLAGS := -std=c++17 -Wall -Wextra -Wshadow $(if $(filter 1,$(WERROR)),-Werror) \
                  $(CFLAGS) $(OMP_CFLAGS) $(SAN_FLAGS) -Iinclude
PEAK_ISAS := scalar $(ISAS_$(ARCH))
PEAK_DEFS := $(foreach i,$(ISAS_$(ARCH)),-DSB_PEAK_$(shell echo $(i) | tr a-z A-Z))
BENCH_COBJS := $(BUILD)/obj/bench/shim.o $(BUILD)/obj/bench/peak.o \
               $(foreach i,$(PEAK_ISAS),$(BUILD)/obj/bench/peak_$(i).o)

# A BLAS build is its own binary, so switching BLAS= never leaves a stale one behind.
ifeq ($(BLAS),openblas)
BENCH_BIN   := $(BUILD)/sdpa-bench-openblas
BENCH_MAIN  := $(BUILD)/obj/bench/bench-openblas.o
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
BENCH_COBJS += $(BUILD)/obj/bench/blas.o
else ifeq ($(BLAS),)
BENCH_BIN   := $(BUILD)/sdpa-bench
BENCH_MAIN  := $(BUILD)/obj/bench/bench.o
else
$(error BLAS=$(BLAS): the benchmark knows BLAS=openblas only)
endif

$(BUILD)/obj/bench/peak_%.o: bench/peak_%.c
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) $(ISAFLAGS_$*) -MMD -MP -c $< -o $@

$(BUILD)/obj/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(BENCH_CFLAGS) $(PEAK_DEFS) $(BLAS_CFLAGS) -MMD -MP -c $< -o $@

# A missing package says which one, instead of a compiler error about a header.
NEED_GBENCH = @echo '\#include <benchmark/benchmark.h>' | $(CXX) -x c++ -E - >/dev/null 2>&1 \
  || { echo "make bench needs Google Benchmark: apt-get install libbenchmark-dev"; exit 1; }
NEED_CBLAS  = @echo '\#include <cblas.h>' | $(CC) $(BLAS_CFLAGS) -x c -E - >/dev/null 2>&1 \
  || { echo "BLAS=openblas needs OpenBLAS: apt-get install libopenblas-dev"; exit 1; }

$(BUILD)/obj/bench/bench.o: bench/bench.cc
	$(NEED_GBENCH)
	@mkdir -p $(dir $@)
	$(CXX) $(BENCH_CXXFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/bench/bench-openblas.o: bench/bench.cc
	$(NEED_GBENCH)
	$(NEED_CBLAS)
	@mkdir -p $(dir $@)
	$(CXX) $(BENCH_CXXFLAGS) -DSB_WITH_BLAS $(BLAS_CFLAGS) -MMD -MP -c $< -o $@

$(BENCH_BIN): $(BENCH_MAIN) $(BENCH_COBJS) $(BUILD)/libsdpa.a
	$(CXX) $(BENCH_CXXFLAGS) -o $@ $^ $(BLAS_LIBS) -lbenchmark $(LDLIBS)

$(BUILD)/sdpa-run: tools/sdpa-run.c $(BUILD)/obj/bench/shim.o $(BUILD)/libsdpa.a
	$(CC) $(BENCH_CFLAGS) -o $@ $^ $(LDLIBS)

.PHONY: bench bench-full sdpa-run plot compare
bench: $(BENCH_BIN) $(BUILD)/sdpa-run
	./$(BENCH_BIN) --benchmark_out=$(BENCH_JSON) --benchmark_out_format=json $(BENCH_ARGS)

bench-full: $(BENCH_BIN) $(BUILD)/sdpa-run
	./$(BENCH_BIN) --suite=full --benchmark_out=$(BENCH_JSON) --benchmark_out_format=json \
	  $(BENCH_ARGS)

sdpa-run: $(BUILD)/sdpa-run

plot:
	@$(PYTHON) -c 'import matplotlib' 2>/dev/null || { echo "make plot needs matplotlib" \
	  "for $(PYTHON): apt-get install python3-matplotlib (Debian/Ubuntu)"; exit 1; }
	$(PYTHON) tools/bench-plot.py $(BENCH_JSON) $(BUILD)/bench.png

compare:
	@test -n "$(BASE)" || { echo "usage: make compare BASE=before.json [NEW=after.json]"; exit 2; }
	$(PYTHON) tools/bench-compare.py $(BASE) $(or $(NEW),$(BENCH_JSON))

# ---- aarch64 on an x86 host: cross-compile, run under qemu-user -----------------------
# Builds the library, the suite and the tools with $(AARCH64_CC) into build-aarch64/
# (CFLAGS, WERROR... pass through) and runs the whole suite (both ISAs: scalar and neon)
# under qemu twice: the default CPU with 2 OpenMP threads, and a Cortex-A72 (ARMv8.0
# only: any newer instruction dies with SIGILL) with 1. The threads suite asks for 1, 2,
# 3 and nproc threads itself in both runs. About two minutes per run under emulation;
# the two runs are separate targets, so `make -j2 -O test-aarch64` runs them at once.
# Then sdpa-run --check (plain C, no Google Benchmark) on both CPUs. Emulated times mean
# nothing. Debian packages: gcc-aarch64-linux-gnu libgomp1-arm64-cross qemu-user.
AARCH64_CC   ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
AARCH64_RUN  := build-aarch64/sdpa-run

.PHONY: test-aarch64 aarch64-build aarch64-suite-default aarch64-suite-a72
aarch64-build:
	$(MAKE) CC=$(AARCH64_CC) BUILD=build-aarch64 build-aarch64/sdpa-test \
	  build-aarch64/sdpa-demo $(AARCH64_RUN)
aarch64-suite-default: aarch64-build
	OMP_NUM_THREADS=2 $(QEMU_AARCH64) build-aarch64/sdpa-test
aarch64-suite-a72: aarch64-build
	OMP_NUM_THREADS=1 $(QEMU_AARCH64) -cpu cortex-a72 build-aarch64/sdpa-test
test-aarch64: aarch64-suite-default aarch64-suite-a72
	$(QEMU_AARCH64) $(AARCH64_RUN) --check
	$(QEMU_AARCH64) -cpu cortex-a72 $(AARCH64_RUN) --check --isa neon --threads 1

# ---- hardening: fuzzing, sanitizers, valgrind -----------------------------------------
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_ISA=auto|scalar|avx2|avx512|neon] [FUZZ_ARGS=...]
#                        libFuzzer campaign on sdpa_forward (tests/fuzz/), clang with
#                        -fsanitize=fuzzer,address,undefined; finds go to
#                        build-fuzz/artifacts-<isa>/, the grown corpus to build-fuzz/corpus-<isa>/
#   make fuzz-isas FUZZ_ISAS="scalar avx2"   one campaign per ISA (-jN runs N at once)
#   make fuzz-corpus     regenerate the committed seed corpus tests/fuzz/corpus
#   make tsan            the concurrency suites (soak, threads) under ThreadSanitizer: clang,
#                        libomp with its Archer tool so OpenMP's own synchronisation is seen
#   make valgrind        memcheck on the suite (--quick), once per VALGRIND_ISAS (valgrind 3.19
#                        cannot run AVX-512); VALGRIND_SUITES picks the suites; -j2 runs
#                        two ISAs at once
# Each has its own build directory. The test suite replays the fuzz corpus too
# (tests/test_fuzzcases.c), so its object joins the suite's.
TEST_OBJS += $(BUILD)/obj/tests/fuzz/fuzz_core.o
$(BUILD)/sdpa-test: $(BUILD)/obj/tests/fuzz/fuzz_core.o

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
FUZZ_SRCS    := tests/fuzz/fuzz_main.c tests/fuzz/fuzz_core.c tests/harness.c tests/oracle.c

.PHONY: fuzz fuzz-isas fuzz-corpus tsan valgrind valgrind-build
$(FUZZ_BUILD)/obj/src/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INSTR) $(ISA_DEFS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/kernels/scalar/%.o: kernels/scalar/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INSTR) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/kernels/%.o: kernels/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(ISAFLAGS_$(word 2,$(subst /, ,$<))) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/sdpa-fuzz: $(FUZZ_SRCS) tests/fuzz/fuzz_core.h tests/harness.h $(FUZZ_OBJS)
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
	  ./$(TSAN_BUILD)/sdpa-test --quick soak threads

# memcheck on the gcc build, the process-wide ISA and the suites' ISA both forced, so no
# instruction of another table runs; OpenMP's threads sleep instead of spinning (valgrind
# runs one thread at a time). libgomp keeps its thread pool to the end: only definite
# leaks count. Every suite but sweep and threads (the same code at many more shapes and
# thread counts: over a minute each under valgrind, and the ASan build runs them).
VALGRIND_BUILD  := build-vg
VALGRIND_ISAS   ?= scalar avx2
VALGRIND_SUITES ?= api seeds layout skip traps broken ukernel features layer extremes \
                   fuzzcases soak
valgrind: $(addprefix valgrind-isa-,$(VALGRIND_ISAS))
valgrind-build:
	$(MAKE) BUILD=$(VALGRIND_BUILD) $(VALGRIND_BUILD)/sdpa-test
valgrind-isa-%: valgrind-build
	SDPA_ISA=$* OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive valgrind -q --error-exitcode=99 \
	  --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
	  ./$(VALGRIND_BUILD)/sdpa-test --quick --isa $* $(VALGRIND_SUITES)

# sdpa.pc is written at install time: its paths are the PREFIX of that install.
install: lib
	install -d $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/sdpa.h $(DESTDIR)$(INCDIR)/sdpa.h
	install -m 644 $(BUILD)/libsdpa.a $(DESTDIR)$(LIBDIR)/libsdpa.a
	install -m 755 $(BUILD)/$(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_FILE)
	ln -sf $(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(LIBDIR)/libsdpa.so
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' \
	  'Name: sdpa' 'Description: fused scaled-dot-product attention for CPUs' \
	  'Version: $(VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lsdpa' \
	  'Libs.private: $(OMP_PC) -lm -lpthread' > $(DESTDIR)$(LIBDIR)/pkgconfig/sdpa.pc

uninstall:
	rm -f $(DESTDIR)$(INCDIR)/sdpa.h $(DESTDIR)$(LIBDIR)/libsdpa.a \
	  $(DESTDIR)$(LIBDIR)/$(SO_FILE) $(DESTDIR)$(LIBDIR)/$(SO_NAME) \
	  $(DESTDIR)$(LIBDIR)/libsdpa.so $(DESTDIR)$(LIBDIR)/pkgconfig/sdpa.pc

clean:
	rm -rf build build-*

# Every object depends on the build's configuration stamp (see CONFIG_STAMP).
$(LIB_OBJS) $(TEST_OBJS) $(BENCH_COBJS) $(BENCH_MAIN): $(CONFIG_STAMP)
$(CONFIG_STAMP): ;

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Optional parts of the build, each in its own fragment (mk/*.mk).
include $(wildcard mk/*.mk)
