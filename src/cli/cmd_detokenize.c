/* cmd_detokenize.c - placeholder until its subsystem lands. */
#include <stdio.h>

#include "cli/cli.h"

int cmd_detokenize(int argc, char **argv) {
    fprintf(stderr, "vllmc detokenize: not built yet\n");
    return 1;
}
