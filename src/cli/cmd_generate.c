/* cmd_generate.c - placeholder until its subsystem lands. */
#include <stdio.h>

#include "cli/cli.h"

int cmd_generate(int argc, char **argv) {
    fprintf(stderr, "vllmc generate: not built yet\n");
    return 1;
}
