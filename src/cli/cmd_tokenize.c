/* cmd_tokenize.c - placeholder until its subsystem lands. */
#include <stdio.h>

#include "cli/cli.h"

int cmd_tokenize(int argc, char **argv) {
    fprintf(stderr, "vllmc tokenize: not built yet\n");
    return 1;
}
