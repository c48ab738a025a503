#!/usr/bin/env bash
# test_server_openai.sh - starts `vllmc serve` on stories260K and runs
# tests/test_server_openai.mjs (the official openai npm client) against it.
# Engine steps are slowed a little (VLLMC_DEBUG_STEP_DELAY_US) so that a
# stream aborted after a few chunks is certainly still running.
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
if [ ! -d tests/ref/node_modules/openai ]; then
  echo "FAIL test_server_openai: tests/ref/node_modules/openai missing (run scripts/setup.sh)"; exit 1
fi
VLLMC_DEBUG_STEP_DELAY_US=1000 server_start S --served-model-name tiny || exit 1
timeout 300 node tests/test_server_openai.mjs "$S_URL"
