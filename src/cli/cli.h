/* cli.h - the vllmc subcommands. Each parses its own flags (vLLM's names) and
 * returns the process exit status; only these functions print errors for the user. */
#ifndef VLLM_CLI_CLI_H
#define VLLM_CLI_CLI_H

int cmd_generate(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_structured(int argc, char **argv);
int cmd_proxy(int argc, char **argv);

/* The model used when no --model is given: the bundled stories260K, found
 * next to the binary (../models/stories260K) or via $VLLMC_MODEL_DIR. */
const char *cli_default_model_dir(void);

#endif
