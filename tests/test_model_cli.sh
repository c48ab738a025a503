#!/usr/bin/env bash
# The CLI on broken model directories: every bad-file case of the loader ends in
# a message naming the file and the problem, and a non-zero exit, never a crash.
# (tests/test_loader.c covers the same cases at the API level in more detail.)
# Prints "ok NAME" / "FAIL NAME: why".
# checks: 8
set -u
cd "$(dirname "$0")/.."
VLLMC=${VLLMC:-build/vllmc}
src=models/stories260K
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fresh() { rm -rf "$tmp/m"; cp -r "$src" "$tmp/m"; chmod -R u+w "$tmp/m"; }

# expect NAME PATTERN...: runs generate on $tmp/m; wants exit 1 and every pattern in stderr
expect() {
  local name=$1; shift
  "$VLLMC" generate --model "$tmp/m" --max-tokens 1 >/dev/null 2>"$tmp/err"
  local rc=$?
  if [ $rc -ne 1 ]; then echo "FAIL $name: exit $rc (want 1): $(tail -2 "$tmp/err")"; return; fi
  for p in "$@"; do
    if ! grep -q -- "$p" "$tmp/err"; then echo "FAIL $name: no '$p' in: $(tail -2 "$tmp/err")"; return; fi
  done
  echo "ok $name"
}

fresh; truncate -s 500000 "$tmp/m/model.safetensors"
expect cli_truncated_safetensors model.safetensors
fresh; printf '\xff\xff\xff\xff\xff\xff\x00\x00{}' > "$tmp/m/model.safetensors"
expect cli_header_beyond_file model.safetensors header
fresh; /usr/bin/python3 - "$tmp/m/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h['model.norm.weight']['data_offsets'] = [10**9, 10**9 + 256]
s = json.dumps(h).encode(); s += b' ' * ((8 - (8 + len(s)) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(s)) + s + b[8 + n:])
PY
expect cli_offset_outside_file model.safetensors model.norm.weight
fresh; /usr/bin/python3 - "$tmp/m/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h['model.norm.weight']['shape'] = [32, 2]
s = json.dumps(h).encode(); s += b' ' * ((8 - (8 + len(s)) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(s)) + s + b[8 + n:])
PY
expect cli_wrong_shape model.norm.weight
fresh; sed -i 's/LlamaForCausalLM/GPTNeoXForCausalLM/' "$tmp/m/config.json"
expect cli_unknown_architecture GPTNeoXForCausalLM config.json
fresh; printf '{"hidden_size": 64,' > "$tmp/m/config.json"
expect cli_malformed_config config.json
fresh; rm "$tmp/m/config.json"
expect cli_missing_config config.json
fresh; /usr/bin/python3 - "$tmp/m/model.safetensors" <<'PY'
import json, struct, sys
p = sys.argv[1]; b = open(p, 'rb').read()
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
h['model.layers.3.mlp.up_proj.weightX'] = h.pop('model.layers.3.mlp.up_proj.weight')
s = json.dumps(h).encode(); s += b' ' * ((8 - (8 + len(s)) % 8) % 8)
open(p, 'wb').write(struct.pack('<Q', len(s)) + s + b[8 + n:])
PY
expect cli_missing_tensor model.layers.3.mlp.up_proj.weight
