# vllm.c build: the library, the CLI (build/vllmc), tests, tools and benchmarks.
#
#   make            release build
#   make SAN=1      AddressSanitizer + UndefinedBehaviorSanitizer build (into build-san/;
#                   LeakSanitizer on): tests/run.sh build-san
#   make PIC=1      position-independent build (into build-pic/) for the Python
#                   extension (python/setup.py runs it)
#   make TSAN=1     ThreadSanitizer build (into build-tsan/): tests/run.sh build-tsan
#   make tsan       the ThreadSanitizer build and, on it, the threaded tests (the files
#                   tagged tsan: engine, frontend, HTTP, thread pool, the server scripts)
#   make fuzz       libFuzzer targets fuzz/fuzz_*.c built with clang into build-fuzz/,
#                   each run FUZZ_SECONDS (60) from its seed corpus; needs
#                   scripts/setup.sh --fuzz (see docs/fuzzing.md)
#   make test       set up (Debian/npm packages), build release, ASan+UBSan and TSan, run
#                   the whole suite on the first two and the threaded tests on TSan
#   make run        generate from the bundled model
#   make soak       full-size soak of vllmc serve (10,000 requests, 64 clients; tests/test_soak.sh)
#   make serve      start the OpenAI-compatible server on the bundled model (PORT=8000);
#                   MODEL=smollm2|gemma3 fetches that real chat model first
#                   (scripts/fetch_models.sh) and serves it under that name;
#                   MODEL=PATH serves a model directory or .gguf file
#
# Three archives, in build/ (build-san/, ...), from the objects of src/*/*.c:
#   libvllm.a           the library we ship. It exports the public API only, the
#                       vllm_* functions of include/vllm/vllm.h and status.h, so a
#                       program that links it cannot collide with our internal
#                       names (scheduler_schedule, tokenizer_load, ...). The library
#                       objects are compiled -fvisibility=hidden, the public headers
#                       push default visibility, and the archive holds ONE object:
#                       `ld -r` of them all, then `objcopy --localize-hidden`, which
#                       makes every hidden name local to it. It holds the subsystems
#                       the public API reaches (PUB_SRCS: the engine and what it
#                       runs on), not the server, templates or metrics, so it needs
#                       no HTTP library (LIB_LDLIBS). examples/<name>.c are built
#                       against it alone (include/ only, no -Isrc) into
#                       build/examples/<name>.
#   libvllm_internal.a  the same objects as a plain archive, every module's names
#                       global: what our own programs link (vllmc, tests, tools/,
#                       bench/, fuzz/), which call the modules directly.
#   libvllm_cli.a       src/cli/ without main.o (vllmc's code, not the library's):
#                       every test links it too, for the CLI helpers a test checks
#                       (test_bench_stats: bench_stats, bench_rng, bench_dataset);
#                       an archive, so a test that uses none of it gets none of it.
# tests/test_symbols.sh checks libvllm.a's exports and each object's module prefixes.
#
# Sources are found by wildcard: a new src/<subsystem>/<concept>.c is built without
# touching this file; tests/test_<name>.c becomes build/tests/test_<name>,
# tools/<name>.c build/tools/<name>, bench/<name>.c build/bench/<name> and
# examples/<name>.c build/examples/<name>.

CC      ?= cc
OPT     ?= -O2
ARCHFLAGS ?= -march=native
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wvla
CFLAGS  += -std=c17 -D_GNU_SOURCE $(OPT) $(ARCHFLAGS) -g $(WARN) -pthread \
           -Iinclude -Isrc -MMD -MP
OBJCOPY ?= objcopy
# What a program linking libvllm.a needs after it; vllmc adds libmicrohttpd and GnuTLS (serve, --ssl-*)
# and libcurl (bench serve).
LIB_LDLIBS := -lpcre2-8 -ljansson -lxxhash -lutf8proc -lm -pthread
LDLIBS  += -lmicrohttpd -lgnutls -lcurl -lzmq $(LIB_LDLIBS)
# Open MPI (libopenmpi-dev) for tensor/pipeline parallelism (src/dist/tp_*, mpi_*; docs/deploy.md)
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null || echo -I/usr/lib/x86_64-linux-gnu/openmpi/include)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null || echo -lmpi)
CFLAGS  += $(MPI_CFLAGS)
LDLIBS  += $(MPI_LIBS)
ifeq ($(WERROR),1)
CFLAGS  += -Werror
endif

BUILD   ?= build
ifeq ($(SAN),1)
BUILD   := build-san
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif
# Position-independent objects (into build-pic/), for libvllm.a inside a shared
# object: the Python package's extension (python/setup.py builds
# build-pic/libvllm.a and build-pic/vllmc this way).
ifeq ($(PIC),1)
BUILD   := build-pic
CFLAGS  += -fPIC
endif
ifeq ($(TSAN),1)
BUILD   := build-tsan
CFLAGS  += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS += -fsanitize=thread
endif
# libFuzzer: the library and targets in clang with coverage hooks, ASan, UBSan
# (clang-16, which scripts/setup.sh --fuzz installs: clang 14 rejects _Float16 on x86)
FUZZ_CC      ?= $(firstword $(foreach c,clang-16 clang,$(shell command -v $(c) 2>/dev/null)) clang-16)
FUZZ_SECONDS ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ifeq ($(FUZZ),1)
BUILD   := build-fuzz
CC      := $(FUZZ_CC)
CFLAGS  += -fsanitize=fuzzer-no-link $(FUZZ_SAN)
endif

LIB_SRCS  := $(filter-out src/cli/%,$(wildcard src/*/*.c))
ifeq ($(FUZZ),1)  # the targets reach only the parsers; the kernels need not build with clang
LIB_SRCS  := $(filter-out src/kernels/% src/engine/%,$(LIB_SRCS))
endif
CLI_SRCS  := $(wildcard src/cli/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
TOOL_SRCS := $(wildcard tools/*.c)
BENCH_SRCS := $(wildcard bench/*.c)
EXAMPLE_SRCS := $(wildcard examples/*.c)
PUB_SRCS  := $(filter src/base/% src/engine/% src/kernels/% src/model/% src/sample/% src/spec/% src/structured/% src/template/% \
                      src/tokenizer/%,$(LIB_SRCS))
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
PUB_OBJS  := $(PUB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_LIB_OBJS := $(filter-out %/main.o,$(CLI_OBJS))
# tests/kernels_probe: which kernel paths the machine has, for tests/run.sh (not a test)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%) $(BUILD)/tests/kernels_probe
TOOL_BINS := $(TOOL_SRCS:tools/%.c=$(BUILD)/tools/%) $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)
EXAMPLE_BINS := $(EXAMPLE_SRCS:examples/%.c=$(BUILD)/examples/%)
FUZZ_BINS := $(patsubst fuzz/%.c,$(BUILD)/fuzz/%,$(wildcard fuzz/fuzz_*.c))

.PHONY: all test tsan run serve clean setup fuzz fuzz-build fuzz-bins soak FORCE
.SECONDARY:
all: $(BUILD)/vllmc $(TEST_BINS) $(TOOL_BINS) $(BUILD)/libvllm.a $(EXAMPLE_BINS)

$(BUILD)/libvllm.a: $(PUB_OBJS)
	@mkdir -p $(BUILD)/obj
	$(LD) -r -o $(BUILD)/obj/libvllm.o $^
	$(OBJCOPY) --localize-hidden $(BUILD)/obj/libvllm.o
	@rm -f $@
	$(AR) rcs $@ $(BUILD)/obj/libvllm.o

$(BUILD)/libvllm_internal.a: $(LIB_OBJS)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libvllm_cli.a: $(CLI_LIB_OBJS)
	@mkdir -p $(@D)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/vllmc: $(CLI_OBJS) $(BUILD)/libvllm_internal.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/harness.o $(BUILD)/libvllm_cli.a $(BUILD)/libvllm_internal.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/fuzz/%: $(BUILD)/obj/fuzz/%.o $(BUILD)/libvllm_internal.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $^ $(LDLIBS)

$(BUILD)/tools/%: $(BUILD)/obj/tools/%.o $(BUILD)/libvllm_internal.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libvllm_internal.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/examples/%: $(BUILD)/obj/examples/%.o $(BUILD)/libvllm.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIB_LDLIBS)

# Every object depends on the compile flags ($(BUILD)/obj/flags, rewritten when
# they change, -Werror aside), so new flags rebuild it instead of leaving it stale.
FLAGS_STAMP := $(BUILD)/obj/flags
$(FLAGS_STAMP): FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(filter-out -Werror,$(CFLAGS))' | cmp -s - $@ || \
	    echo '$(CC) $(filter-out -Werror,$(CFLAGS))' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

# Library objects: only what the public headers declare keeps default visibility.
$(LIB_OBJS): $(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=hidden -c -o $@ $<

# The examples see the public headers only.
$(BUILD)/obj/examples/%.o: examples/%.c $(FLAGS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(filter-out -Isrc,$(CFLAGS)) -c -o $@ $<

setup:
	@scripts/setup.sh

# The suite runs on the release build and on the ASan+UBSan build (LeakSanitizer
# on), and its threaded tests (tagged tsan) on the ThreadSanitizer build, the
# three passes at the same time (tests/run.sh), with one "N passed, N failed,
# N skipped" total at the end.
# The three builds compile with JOBS jobs (one per CPU) unless make was given -j.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
JFLAG = $(if $(filter -j%,$(MAKEFLAGS)),,-j$(JOBS))

test: setup
	@$(MAKE) --no-print-directory $(JFLAG) WERROR=1 all
	@$(MAKE) --no-print-directory $(JFLAG) WERROR=1 SAN=1 all
	@$(MAKE) --no-print-directory $(JFLAG) WERROR=1 TSAN=1 all
	@tests/run.sh build,build-san,build-tsan:tsan

# The threaded tests (tests tagged "tsan", tests/run.sh) under ThreadSanitizer.
tsan: setup
	@$(MAKE) --no-print-directory $(JFLAG) WERROR=1 TSAN=1 all
	@tests/run.sh build-tsan:tsan

run: setup
	@$(MAKE) --no-print-directory all
	$(BUILD)/vllmc generate --temperature 0 --max-tokens 200

fuzz-build:
	@$(MAKE) --no-print-directory FUZZ=1 fuzz-bins
fuzz-bins: $(FUZZ_BINS)

fuzz: fuzz-build
	@fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

soak: all
	SOAK_REQUESTS=10000 SOAK_CLIENTS=64 SOAK_SECONDS=600 BUILD_DIR=$(CURDIR)/$(BUILD) \
	    VLLMC=$(CURDIR)/$(BUILD)/vllmc tests/test_soak.sh

PORT ?= 8000
MODEL ?=
serve: setup
	@$(MAKE) --no-print-directory all
ifeq ($(MODEL),)
	$(BUILD)/vllmc serve --port $(PORT) --served-model-name stories260K
else
	@case "$(MODEL)" in smollm2|gemma3) scripts/fetch_models.sh $(MODEL) > /dev/null;; esac
	$(BUILD)/vllmc serve $(MODEL) --port $(PORT)
endif

clean:
	rm -rf build build-san build-tsan build-fuzz build-pic

-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/obj/*/*/*.d)
