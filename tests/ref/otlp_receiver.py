"""A minimal OTLP/HTTP trace receiver for the tests: decodes every POST with
the opentelemetry-proto package's generated classes (an implementation
independent of ours) and appends one JSON line per span to OUT.

    python otlp_receiver.py OUT PORT_FILE [--fail N]

Listens on 127.0.0.1 (a free port, written to PORT_FILE once listening).
--fail N: answer the first N exports with HTTP 503 (they are still decoded
and counted in OUT.requests, but their spans are not written).
Each line: {"path", "content_type", "resource": {...}, "scope": name,
"name", "kind", "trace_id", "span_id", "parent_span_id" (hex; "" when
none), "trace_state", "flags", "start", "end" (ns), "attributes": {...}}.
Exits 3 when opentelemetry-proto cannot be imported (the test skips).
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
except ImportError as e:  # the test reports itself skipped
    print(f"opentelemetry-proto is not importable: {e}", file=sys.stderr)
    sys.exit(3)

out_path, port_file = sys.argv[1], sys.argv[2]
fail_left = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--fail" else 0


def any_value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attrs(kvs):
    return {kv.key: any_value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        global fail_left
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        req = trace_service_pb2.ExportTraceServiceRequest()
        try:
            req.ParseFromString(body)
        except Exception as e:  # a malformed message is the test's failure
            with open(out_path + ".errors", "a") as f:
                f.write(f"{e}\n")
            self.send_response(400)
            self.end_headers()
            return
        with open(out_path + ".requests", "a") as f:
            f.write(json.dumps({"path": self.path, "bytes": len(body),
                                "content_type": self.headers.get("Content-Type"),
                                "x_test": self.headers.get("X-Test")}) + "\n")
        if fail_left > 0:
            fail_left -= 1
            self.send_response(503)
            self.end_headers()
            return
        lines = []
        for rs in req.resource_spans:
            resource = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    lines.append(json.dumps({
                        "path": self.path, "content_type": self.headers.get("Content-Type"),
                        "resource": resource, "scope": ss.scope.name, "name": s.name,
                        "kind": s.kind, "trace_id": s.trace_id.hex(), "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(), "trace_state": s.trace_state,
                        "flags": s.flags, "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano, "attributes": attrs(s.attributes)}))
        with open(out_path, "a") as f:
            f.write("".join(line + "\n" for line in lines))
        payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os  # noqa: E402
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
