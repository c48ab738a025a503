#!/usr/bin/env bash
# test_server_tls.sh - `vllmc serve` over HTTPS (--ssl-keyfile, --ssl-certfile,
# --ssl-ca-certs, --ssl-cert-reqs, as vLLM passes them to uvicorn) and on a
# Unix domain socket (--uds), driven by curl and the official openai npm
# client, with certificates this test makes with openssl: a CA, the server's
# certificate for localhost/127.0.0.1, a client certificate from that CA, a
# self-signed one nobody trusts, and one from the CA that expired in 2020.
# The greedy text is llama2.c's (models/stories260K/reference_bos_greedy200.json).
# After every refusal the server must still answer.
#
# checks: 21
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
REF=models/stories260K/reference_bos_greedy200.json
tmp=$(mktemp -d)
trap 'server_stop_all; rm -rf "$tmp"' EXIT
ids8=$(jq -c '.greedy_ids[0:8]' $REF)
greedy='{"model":"tiny","prompt":[1],"max_tokens":8,"temperature":0,"return_token_ids":true}'

# ---- certificates -------------------------------------------------------------
mk() { openssl "$@" > "$tmp/openssl.log" 2>&1 || { echo "openssl $*: $(tail -2 "$tmp/openssl.log")" >&2; return 1; }; }
(
  cd "$tmp" || exit 1
  mk req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 -subj "/CN=vllmc test CA" &&
  mk req -newkey rsa:2048 -nodes -keyout srv.key -out srv.csr -subj "/CN=localhost" &&
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > srv.ext &&
  mk x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -set_serial 2 -out srv.pem -days 30 -extfile srv.ext &&
  mk req -newkey rsa:2048 -nodes -keyout other.key -out other.csr -subj "/CN=other" &&
  mk req -newkey rsa:2048 -nodes -keyout cli.key -out cli.csr -subj "/CN=client" &&
  mk x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -set_serial 3 -out cli.pem -days 30 &&
  mk req -x509 -newkey rsa:2048 -nodes -keyout self.key -out self.pem -days 30 -subj "/CN=client" &&
  # an expired one: `openssl ca` is the command that takes explicit dates
  mkdir -p ca.db && : > ca.db/index.txt && echo 10 > ca.db/serial &&
  cat > ca.cnf <<'EOF' &&
[ca]
default_ca = test
[test]
dir = ca.db
database = ca.db/index.txt
serial = ca.db/serial
new_certs_dir = ca.db
default_md = sha256
policy = any
[any]
commonName = supplied
EOF
  mk ca -batch -config ca.cnf -cert ca.pem -keyfile ca.key -in cli.csr -out old.pem \
     -startdate 20200101000000Z -enddate 20200102000000Z
) || { for n in $(seq 21); do echo "FAIL tls_certificates_$n: openssl could not make the test certificates"; done; exit 0; }

# ---- HTTPS, no client certificates ----------------------------------------------
server_start S --served-model-name tiny --ssl-keyfile "$tmp/srv.key" --ssl-certfile "$tmp/srv.pem" || exit 0
U=$S_URL
[[ $U == https://127.0.0.1:* ]] && echo "ok https_startup_line" || echo "FAIL https_startup_line: '$U'"
H=https://localhost:${U##*:}
req GET $H/health "" --cacert "$tmp/ca.pem"; check_status https_health 200
req POST $H/v1/completions "$greedy" --cacert "$tmp/ca.pem"
check https_greedy_is_reference "(.choices[0].token_ids | tojson) == \"$ids8\""
# curl's own verification refuses a server it cannot trust: the certificate is real TLS
req GET $H/health ""; [ "$STATUS" = 000 ] && echo "ok https_untrusted_by_default" ||
  echo "FAIL https_untrusted_by_default: status $STATUS without --cacert"
# plain HTTP to the TLS port: no HTTP answer, and the server keeps serving
req GET http://127.0.0.1:${U##*:}/health ""
[ "$STATUS" != 200 ] && echo "ok https_plain_http_refused" || echo "FAIL https_plain_http_refused: 200 over plain HTTP"
req GET $H/health "" --cacert "$tmp/ca.pem"; check_status https_healthy_after_plain_http 200
# the official openai client, trusting the test CA
out=$(NODE_EXTRA_CA_CERTS="$tmp/ca.pem" timeout 60 node --input-type=module -e '
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
const require = createRequire(process.cwd() + "/tests/ref/package.json");
const { default: OpenAI } = await import(pathToFileURL(require.resolve("openai")).href);
const c = new OpenAI({ baseURL: process.argv[1] + "/v1", apiKey: "x", maxRetries: 0 });
const r = await c.completions.create({ model: "tiny", prompt: [1], max_tokens: 8, temperature: 0, return_token_ids: true });
console.log(JSON.stringify(r.choices[0].token_ids));' "$H" 2>&1)
[ "$out" = "$ids8" ] && echo "ok https_openai_client" || echo "FAIL https_openai_client: $(tail -c 300 <<<"$out")"
server_stop_all

# ---- client certificates required ------------------------------------------------
server_start R --served-model-name tiny --ssl-keyfile "$tmp/srv.key" --ssl-certfile "$tmp/srv.pem" \
  --ssl-ca-certs "$tmp/ca.pem" --ssl-cert-reqs 2 || exit 0
H=https://localhost:${R_URL##*:}
req POST $H/v1/completions "$greedy" --cacert "$tmp/ca.pem" --cert "$tmp/cli.pem" --key "$tmp/cli.key"
check required_trusted_client_served "(.choices[0].token_ids | tojson) == \"$ids8\""
req GET $H/health "" --cacert "$tmp/ca.pem"
check_status required_no_certificate_403 403
check required_no_certificate_says_why '.error.message | contains("client certificate required")'
req GET $H/health "" --cacert "$tmp/ca.pem" --cert "$tmp/self.pem" --key "$tmp/self.key"
[ "$STATUS" = 403 ] && grep -qi "not trusted" <<<"$BODY" && echo "ok required_untrusted_refused" ||
  echo "FAIL required_untrusted_refused: $STATUS $(head -c 300 <<<"$BODY")"
req GET $H/health "" --cacert "$tmp/ca.pem" --cert "$tmp/old.pem" --key "$tmp/cli.key"
[ "$STATUS" = 403 ] && grep -q "expired" <<<"$BODY" && echo "ok required_expired_refused" ||
  echo "FAIL required_expired_refused: $STATUS $(head -c 300 <<<"$BODY")"
req GET $H/health "" --cacert "$tmp/ca.pem" --cert "$tmp/cli.pem" --key "$tmp/cli.key"
check_status required_healthy_after_refusals 200
server_stop_all

# ---- optional: none is fine, a bad one is not ---------------------------------------
server_start O --served-model-name tiny --ssl-keyfile "$tmp/srv.key" --ssl-certfile "$tmp/srv.pem" \
  --ssl-ca-certs "$tmp/ca.pem" --ssl-cert-reqs 1 || exit 0
H=https://localhost:${O_URL##*:}
req GET $H/health "" --cacert "$tmp/ca.pem"; check_status optional_none_served 200
req GET $H/health "" --cacert "$tmp/ca.pem" --cert "$tmp/self.pem" --key "$tmp/self.key"
check_status optional_untrusted_403 403
server_stop_all

# ---- start-up errors name the file or the flag -------------------------------------------
bad_start() { # name expected-message args...
  local name=$1 want=$2; shift 2
  "$VLLMC" serve --port 0 "$@" > "$tmp/bad.log" 2>&1; local rc=$?
  if [ $rc -ne 0 ] && grep -qF -- "$want" "$tmp/bad.log"; then echo "ok $name"
  else echo "FAIL $name: exit $rc, want '$want': $(tail -2 "$tmp/bad.log")"; fi
}
bad_start start_key_mismatch "--ssl-certfile $tmp/srv.pem with --ssl-keyfile $tmp/other.key:" \
  --ssl-keyfile "$tmp/other.key" --ssl-certfile "$tmp/srv.pem"
bad_start start_required_needs_ca "--ssl-cert-reqs 2 needs --ssl-ca-certs" \
  --ssl-keyfile "$tmp/srv.key" --ssl-certfile "$tmp/srv.pem" --ssl-cert-reqs 2
bad_start start_missing_keyfile "--ssl-keyfile $tmp/none.key: No such file or directory" \
  --ssl-keyfile "$tmp/none.key" --ssl-certfile "$tmp/srv.pem"

# ---- Unix domain socket -------------------------------------------------------------
sock=$tmp/vllmc.sock
server_start X --served-model-name tiny --uds "$sock" || exit 0
[ "$X_URL" = "http+unix:$sock" ] && echo "ok uds_startup_line" || echo "FAIL uds_startup_line: '$X_URL'"
STATUS=$(curl -s --max-time 60 --unix-socket "$sock" -o "$tmp/body" -w '%{http_code}' \
  -H 'Content-Type: application/json' -d "$greedy" http://localhost/v1/completions)
BODY=$(cat "$tmp/body")
check uds_greedy_is_reference "(.choices[0].token_ids | tojson) == \"$ids8\""
server_stop_all
[ ! -e "$sock" ] && echo "ok uds_socket_removed_at_exit" || echo "FAIL uds_socket_removed_at_exit: $sock is still there"
exit 0
