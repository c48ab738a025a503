"""cors_ref.py - Starlette's own CORSMiddleware (what vLLM mounts, with
vLLM's arguments) as the reference for tests/test_server_cors.sh.

    .venv/bin/python tests/ref/cors_ref.py < CASES_JSON

CASES_JSON: a list of {"config": {"allowed_origins", "allowed_methods",
"allowed_headers", "allow_credentials"} (vLLM's flags; absent = vLLM's
default), "method", "path", "headers": {name: value}}. Each request goes
through CORSMiddleware around an app that answers 200 "app"; printed: a list
of {"status", "body", "cors": {lower-cased header: value}} with the
Access-Control-* and Vary headers, and status/body only when the middleware
answered itself (a preflight), else null.
"""
import asyncio
import json
import sys

from starlette.middleware.cors import CORSMiddleware


async def app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"app"})


async def run(case):
    cfg = case.get("config", {})
    mw = CORSMiddleware(app, allow_origins=cfg.get("allowed_origins", ["*"]),
                        allow_methods=cfg.get("allowed_methods", ["*"]),
                        allow_headers=cfg.get("allowed_headers", ["*"]),
                        allow_credentials=cfg.get("allow_credentials", False))
    scope = {"type": "http", "method": case["method"], "path": case["path"], "query_string": b"",
             "headers": [(k.lower().encode(), v.encode()) for k, v in case["headers"].items()]}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(m):
        sent.append(m)
    await mw(scope, receive, send)
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:]).decode()
    cors = {}
    for k, v in start["headers"]:
        k = k.decode().lower()
        if k.startswith("access-control-") or k == "vary":
            cors[k] = v.decode()
    own = body != "app"
    return {"status": start["status"] if own else None, "body": body if own else None, "cors": cors}


cases = json.load(sys.stdin)
print(json.dumps([asyncio.run(run(c)) for c in cases]))
