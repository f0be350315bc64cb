# libsdpa - fused scaled-dot-product attention for CPUs.
#
#   make                 build/libsdpa.a, build/libsdpa.so (soname libsdpa.so.$(SOVERSION))
#   make test            build and run the test suite (ends with "N passed, N failed")
#   make demo            build and run tools/sdpa-demo (fused vs reference, errors, times)
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

.PHONY: all lib test demo install uninstall clean
all: lib

lib: $(BUILD)/libsdpa.a $(BUILD)/libsdpa.so

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

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
