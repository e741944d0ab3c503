"""An S3-like SigV4 verifier built on botocore's own signer, written
independently of pkg/sigv4: the server side of the SigV4 tests.

verify() recomputes a request's signature the way botocore signs (the
header fields the request's Authorization names, its x-amz-date, the
payload hash it sends) and compares. Two modes:

  verifier.py check          JSON requests on stdin, one per line, each
                             {"method","host","path","query","headers",
                             "body" (base64),"secret","region","service"};
                             prints one JSON result per line.
  verifier.py serve CONFIG   an HTTPS server on the listening socket
                             inherited as fd 3 (CONFIG: {"certs": {server
                             name: [cert file, key file]}, "keys":
                             {access key id: secret}, "region",
                             "service"}): it verifies every request,
                             keeps PUT bodies and serves them to GET, and
                             prints one JSON line per request.

Run with Debian's /usr/bin/python3 (python3-botocore).
"""

import base64
import hashlib
import hmac
import http.server
import json
import socket
import ssl
import sys

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def parse_authorization(value):
    if not value.startswith("AWS4-HMAC-SHA256 "):
        return None
    out = {}
    for part in value[len("AWS4-HMAC-SHA256 "):].split(","):
        k, _, v = part.strip().partition("=")
        out[k] = v
    cred = out.get("Credential", "").split("/")
    if len(cred) != 5:
        return None
    return {"akid": cred[0], "date": cred[1], "region": cred[2], "service": cred[3],
            "signed": out.get("SignedHeaders", "").split(";"), "signature": out.get("Signature", "")}


def verify(method, host, path, query, headers, body, keys, region, service):
    """headers: list of (name, value). Returns (ok, reason, details)."""
    hmap = {}
    for name, value in headers:
        hmap.setdefault(name.lower(), []).append(value)
    auth = parse_authorization(",".join(hmap.get("authorization", [""])))
    if auth is None:
        return False, "AuthorizationMissing", {}
    if auth["region"] != region:
        return False, "AuthorizationHeaderMalformed", {"region": auth["region"]}
    if auth["service"] != service:
        return False, "InvalidService", {"service": auth["service"]}
    secret = keys.get(auth["akid"])
    if secret is None:
        return False, "InvalidAccessKeyId", {}
    amz_date = ",".join(hmap.get("x-amz-date", [""]))
    payload = ",".join(hmap.get("x-amz-content-sha256", [""]))
    if payload not in ("", "UNSIGNED-PAYLOAD", "STREAMING-UNSIGNED-PAYLOAD-TRAILER") and \
            payload != hashlib.sha256(body).hexdigest():
        return False, "XAmzContentSHA256Mismatch", {}
    url = "https://" + host + path + ("?" + query if query else "")
    req_headers = {}
    for name in auth["signed"]:
        if name == "host":
            req_headers["Host"] = host
        elif name in hmap:
            req_headers[name] = ",".join(hmap[name])
    req = AWSRequest(method=method, url=url, headers=req_headers, data=body)
    req.context["timestamp"] = amz_date
    signer_cls = S3SigV4Auth if service == "s3" else SigV4Auth
    token = ",".join(hmap.get("x-amz-security-token", [""])) or None
    signer = signer_cls(Credentials(auth["akid"], secret, token), service, region)
    canonical = signer.canonical_request(req)
    sts = signer.string_to_sign(req, canonical)
    expected = signer.signature(sts, req)
    if not hmac.compare_digest(expected, auth["signature"]):
        return False, "SignatureDoesNotMatch", {"canonical": canonical}
    return True, "", {"signed": auth["signed"], "payload": payload}


def check():
    for line in sys.stdin:
        r = json.loads(line)
        ok, reason, details = verify(r["method"], r["host"], r["path"], r["query"],
                                     [tuple(h) for h in r["headers"]], base64.b64decode(r["body"]),
                                     {r["akid"]: r["secret"]}, r["region"], r["service"])
        print(json.dumps({"ok": ok, "reason": reason, "details": details}), flush=True)


def serve(config_path):
    with open(config_path) as f:
        cfg = json.load(f)
    objects = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def handle_any(self):
            path, _, query = self.path.partition("?")
            if self.headers.get("Expect", "").lower() == "100-continue":
                expect = True
            else:
                expect = False
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n) if n else b""
            ok, reason, details = verify(self.command, self.headers.get("Host", ""), path, query,
                                         list(self.headers.items()), body, cfg["keys"],
                                         cfg["region"], cfg["service"])
            record = {"method": self.command, "path": path, "ok": ok, "reason": reason,
                      "payload": self.headers.get("x-amz-content-sha256", ""),
                      "expect": expect, "length": n,
                      "authorization": self.headers.get("Authorization", ""),
                      "token": self.headers.get("X-Amz-Security-Token", "")}
            print(json.dumps(record), flush=True)
            if not ok:
                out = ("<Error><Code>%s</Code></Error>" % reason).encode()
                self.send_response(403)
            elif self.command == "PUT":
                objects[path] = body
                out = b""
                self.send_response(200)
                self.send_header("ETag", '"%s"' % hashlib.md5(body).hexdigest())
            elif self.command in ("GET", "HEAD") and path in objects:
                out = objects[path]
                self.send_response(200)
            else:
                out = b"<Error><Code>NoSuchKey</Code></Error>"
                self.send_response(404)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(out)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = handle_any

    class Server(http.server.ThreadingHTTPServer):
        def server_bind(self):
            pass

        def server_activate(self):
            pass

    srv = Server(("", 0), Handler, bind_and_activate=False)
    srv.socket = socket.socket(fileno=3)
    contexts = {}
    for name, (cert, key) in cfg["certs"].items():
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        c.load_cert_chain(cert, key)
        contexts[name] = c
    ctx = next(iter(contexts.values()))

    def pick(sock, name, _):
        if name in contexts:
            sock.context = contexts[name]

    ctx.sni_callback = pick
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    print(json.dumps({"ready": True}), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "check":
        check()
    else:
        serve(sys.argv[2])
