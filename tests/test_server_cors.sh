#!/usr/bin/env bash
# test_server_cors.sh - CORS (--allowed-origins/-methods/-headers,
# --allow-credentials) and X-Request-Id (--enable-request-id-headers) on
# `vllmc serve`, checked against Starlette's own CORSMiddleware
# (tests/ref/cors_ref.py, what vLLM mounts): each case is sent to our server
# with curl-like raw HTTP (Python's http.client) and to the middleware; the
# status and body of a preflight (the middleware's own answer) and the
# Access-Control-* and Vary headers of every answer must be equal.
# Then what Starlette alone cannot say (vLLM's middleware order: auth outside
# CORS, X-Request-Id outermost) and a headless Chromium fetch() when Debian's
# chromium is installed (else that check is skipped).
# checks: 18
# tags: tsan
cd "$(dirname "$0")/.." || exit 1
. tests/server_helpers.sh
py=.venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; server_stop_all' EXIT
names=(cors_preflight_default cors_preflight_unknown_path cors_preflight_no_request_headers cors_simple_get
       cors_simple_cookie cors_no_origin cors_not_preflight_options cors_post_error cors_stream
       cors_list_preflight_ok cors_list_preflight_refused cors_list_simple_ok cors_list_simple_other)
if ! $py -c "import starlette" 2>/dev/null; then
  for n in "${names[@]}"; do echo "skip $n: no starlette in .venv (scripts/setup.sh)"; done
  n_ref=0
else
  n_ref=1
fi
server_start A --model models/stories260K --enable-request-id-headers || exit 1
server_start B --model models/stories260K --allowed-origins '["http://ok.example"]' \
  --allowed-methods '["GET", "POST"]' --allowed-headers '["X-Foo", "authorization"]' --allow-credentials || exit 1
server_start K --model models/stories260K --api-key sekrit || exit 1

LIST='{"allowed_origins":["http://ok.example"],"allowed_methods":["GET","POST"],"allowed_headers":["X-Foo","authorization"],"allow_credentials":true}'
O='"Origin":"http://app.example"'
PF='"Access-Control-Request-Method":"POST"'
cat > "$tmp/cases.json" <<JSON
[
 {"name":"cors_preflight_default","server":"A","method":"OPTIONS","path":"/v1/chat/completions","headers":{$O,$PF,"Access-Control-Request-Headers":"content-type, authorization"}},
 {"name":"cors_preflight_unknown_path","server":"A","method":"OPTIONS","path":"/no/such/route","headers":{$O,"Access-Control-Request-Method":"DELETE"}},
 {"name":"cors_preflight_no_request_headers","server":"A","method":"OPTIONS","path":"/v1/models","headers":{$O,"Access-Control-Request-Method":"GET"}},
 {"name":"cors_simple_get","server":"A","method":"GET","path":"/v1/models","headers":{$O}},
 {"name":"cors_simple_cookie","server":"A","method":"GET","path":"/health","headers":{$O,"Cookie":"a=b"}},
 {"name":"cors_no_origin","server":"A","method":"GET","path":"/v1/models","headers":{}},
 {"name":"cors_not_preflight_options","server":"A","method":"OPTIONS","path":"/v1/models","headers":{$O}},
 {"name":"cors_post_error","server":"A","method":"POST","path":"/v1/completions","headers":{$O,"Content-Type":"application/json"},"body":"{\"prompt\":\"a\",\"n\":0}"},
 {"name":"cors_stream","server":"A","method":"POST","path":"/v1/completions","headers":{$O,"Content-Type":"application/json"},"body":"{\"prompt\":\"a\",\"max_tokens\":3,\"stream\":true}"},
 {"name":"cors_list_preflight_ok","server":"B","config":$LIST,"method":"OPTIONS","path":"/v1/completions","headers":{"Origin":"http://ok.example",$PF,"Access-Control-Request-Headers":"X-FOO , Content-Type,authorization"}},
 {"name":"cors_list_preflight_refused","server":"B","config":$LIST,"method":"OPTIONS","path":"/v1/completions","headers":{"Origin":"http://evil.example","Access-Control-Request-Method":"PUT","Access-Control-Request-Headers":"x-foo, x-bar"}},
 {"name":"cors_list_simple_ok","server":"B","config":$LIST,"method":"GET","path":"/version","headers":{"Origin":"http://ok.example"}},
 {"name":"cors_list_simple_other","server":"B","config":$LIST,"method":"GET","path":"/version","headers":{"Origin":"http://evil.example"}}
]
JSON
if [ $n_ref = 1 ]; then
  if ! $py tests/ref/cors_ref.py < "$tmp/cases.json" > "$tmp/ref.json" 2> "$tmp/err"; then
    for n in "${names[@]}"; do echo "FAIL $n: reference failed: $(tail -1 "$tmp/err")"; done
  else
    A="$A_URL" B="$B_URL" $py - "$tmp/cases.json" "$tmp/ref.json" <<'PY'
import http.client, json, os, sys, urllib.parse
cases = json.load(open(sys.argv[1])); refs = json.load(open(sys.argv[2]))
for c, ref in zip(cases, refs):
    u = urllib.parse.urlparse(os.environ[c["server"]])
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    body = c.get("body")
    conn.request(c["method"], c["path"], body=body.encode() if body else None, headers=c["headers"])
    r = conn.getresponse()
    data = r.read().decode(errors="replace")
    cors = {k.lower(): v for k, v in r.getheaders() if k.lower().startswith("access-control-") or k.lower() == "vary"}
    why = []
    if cors != ref["cors"]:
        why.append(f"headers {cors} != Starlette's {ref['cors']}")
    if ref["status"] is not None and (r.status, data) != (ref["status"], ref["body"]):
        why.append(f"answer {r.status} {data!r} != Starlette's {ref['status']} {ref['body']!r}")
    if ref["status"] is None and c["name"] == "cors_stream" and "data: [DONE]" not in data:
        why.append(f"stream incomplete: {data[:200]!r}")
    print(f"FAIL {c['name']}: " + "; ".join(why) if why else f"ok {c['name']}")
PY
  fi
fi

# vLLM's middleware order: auth is outside CORS (a 401 carries no CORS header),
# preflights pass auth (OPTIONS is exempt), X-Request-Id is outermost.
req POST "$K_URL/v1/completions" '{"prompt":"a"}' -H 'Origin: http://app.example'
if [ "$STATUS" = 401 ] && ! grep -qi '^access-control-' <<< "$HEADERS"; then echo "ok cors_auth_401_plain"
else echo "FAIL cors_auth_401_plain: status $STATUS, headers: $(grep -i '^access-control-' <<< "$HEADERS" | tr -d '\r' | tr '\n' ' ')"; fi
req OPTIONS "$K_URL/v1/completions" '' -H 'Origin: http://app.example' -H 'Access-Control-Request-Method: POST'
if [ "$STATUS" = 200 ] && grep -qi '^access-control-allow-origin: \*' <<< "$HEADERS"; then echo "ok cors_auth_preflight"
else echo "FAIL cors_auth_preflight: status $STATUS: $(tr -d '\r' <<< "$HEADERS" | tr '\n' ' ')"; fi
req GET "$A_URL/v1/models" '' -H 'X-Request-Id: my-id-42'
a=$(tr -d '\r' <<< "$HEADERS" | grep -i '^x-request-id:')
req POST "$A_URL/v1/completions" '{"prompt":"a","max_tokens":2}'
b=$(tr -d '\r' <<< "$HEADERS" | grep -i '^x-request-id:')
req GET "$B_URL/v1/models" ''
c=$(tr -d '\r' <<< "$HEADERS" | grep -i '^x-request-id:')
if [ "$a" = "X-Request-Id: my-id-42" ] && [[ "$b" =~ ^X-Request-Id:\ [0-9a-f]{32}$ ]] && [ -z "$c" ]; then echo "ok request_id_headers"
else echo "FAIL request_id_headers: echoed '$a', fresh '$b', without the flag '$c'"; fi
req POST "$A_URL/v1/completions" '{"prompt":"a","max_tokens":2}' -H 'X-Request-Id: abc'
check request_id_in_response_id '.id == "cmpl-abc"'

# A page on another origin calling the server with fetch() (preflighted: JSON body)
if ! command -v chromium > /dev/null; then
  echo "skip cors_chromium_fetch: Debian's chromium is not installed"
else
  page=$tmp/page.html
  cat > "$page" <<HTML
<html><body><pre id="out">pending</pre><script>
fetch("$A_URL/v1/completions", {method: "POST", headers: {"Content-Type": "application/json", "Authorization": "Bearer x"},
  body: JSON.stringify({prompt: "Once", max_tokens: 3})})
  .then(r => r.json()).then(j => { document.getElementById("out").textContent = "RESULT " + j.object; })
  .catch(e => { document.getElementById("out").textContent = "ERROR " + e; });
</script></body></html>
HTML
  out=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/chromium" \
        --virtual-time-budget=20000 --dump-dom "file://$page" 2>/dev/null)
  if grep -q "RESULT text_completion" <<< "$out"; then echo "ok cors_chromium_fetch"
  else echo "FAIL cors_chromium_fetch: the page shows: $(grep -o '<pre id="out">[^<]*' <<< "$out")"; fi
fi
