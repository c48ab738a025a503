# vllm.c build. One library (build/libvllm.a) and the CLI that links it (build/vllmc).
#
#   make            release build
#   make SAN=1      AddressSanitizer + UndefinedBehaviorSanitizer build (into build-san/)
#   make test       set up (Debian/npm packages), build, run the whole suite
#   make run        generate from the bundled model (the main job until the server lands)
#
# Sources are found by wildcard: a new src/<subsystem>/<concept>.c is built without
# touching this file; tests/test_<name>.c becomes build/tests/test_<name>,
# tools/<name>.c build/tools/<name> and bench/<name>.c build/bench/<name>.

CC      ?= cc
OPT     ?= -O2
ARCHFLAGS ?= -march=native
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wvla
CFLAGS  += -std=c17 -D_GNU_SOURCE $(OPT) $(ARCHFLAGS) -g $(WARN) -pthread \
           -Iinclude -Isrc -MMD -MP
LDLIBS  += -lpcre2-8 -ljansson -lxxhash -lutf8proc -lm -pthread
ifeq ($(WERROR),1)
CFLAGS  += -Werror
endif

BUILD   ?= build
ifeq ($(SAN),1)
BUILD   := build-san
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

LIB_SRCS  := $(filter-out src/cli/%,$(wildcard src/*/*.c))
CLI_SRCS  := $(wildcard src/cli/*.c)
TEST_SRCS := $(wildcard tests/test_*.c)
TOOL_SRCS := $(wildcard tools/*.c)
BENCH_SRCS := $(wildcard bench/*.c)
LIB_OBJS  := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)
CLI_OBJS  := $(CLI_SRCS:%.c=$(BUILD)/obj/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TOOL_BINS := $(TOOL_SRCS:tools/%.c=$(BUILD)/tools/%) $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

.PHONY: all test run serve clean setup bench
.SECONDARY:
all: $(BUILD)/vllmc $(TEST_BINS) $(TOOL_BINS)

$(BUILD)/libvllm.a: $(LIB_OBJS)
	@mkdir -p $(@D)
	$(AR) rcs $@ $^

$(BUILD)/vllmc: $(CLI_OBJS) $(BUILD)/libvllm.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(BUILD)/obj/tests/harness.o $(BUILD)/libvllm.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tools/%: $(BUILD)/obj/tools/%.o $(BUILD)/libvllm.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(BUILD)/libvllm.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

setup:
	@scripts/setup.sh

test: setup
	@$(MAKE) --no-print-directory WERROR=1 all
	@tests/run.sh $(BUILD)

run: setup
	@$(MAKE) --no-print-directory all
	$(BUILD)/vllmc generate --max-tokens 200

clean:
	rm -rf build build-san

-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/obj/*/*/*.d)
