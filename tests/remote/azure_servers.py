# SPDX-License-Identifier: Apache-2.0
"""Azure Blob Storage on loopback for the remote-checkpoint tests (imported by servers.py).

- Azurite (npm, the version scripts/deps installs) over HTTPS with its OAuth check on ("basic":
  a bearer token's issuer, audience and lifetime are checked), holding the served files in
  container "models" of the emulator's account, uploaded here with Shared Key requests signed by
  this module's own implementation of Microsoft's canonical form;
- an account SAS for that account (read, blob service, objects), signed here as well;
- an Entra-style token endpoint over HTTPS: POST /{tenant}/oauth2/v2.0/token accepts a client
  assertion equal to the federated token file's current content (or the client secret), for the
  client id and the storage scope, and GET /metadata/identity/oauth2/token (with "Metadata:
  true") answers as IMDS does. Tokens are JWTs whose issuer and audience Azurite accepts, living
  `lifetime` seconds. GET /__ctl?rotate=1 writes a new federated token (the old one is then
  refused), ?lifetime=N changes the lifetime, ?stale=N makes the next N tokens already expired
  (while the answer says they live `lifetime`); /__stats counts tokens issued and refused.
"""
import base64
import datetime
import email.utils
import hashlib
import hmac
import http.client
import http.server
import json
import os
import secrets
import shutil
import socketserver
import ssl
import subprocess
import threading
import time
import urllib.parse

ACCOUNT = "devstoreaccount1"
# the emulator's published well-known key (not a secret)
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
CONTAINER = "models"
VERSION = "2021-08-06"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CLIENT_SECRET = "azsecret-" + "0123456789abcdef"


def azurite_path():
    p = os.environ.get("WD_AZURITE")
    if p and os.access(p, os.X_OK):
        return p
    for c in ("/usr/local/lib/weightd-test/node_modules/.bin/azurite-blob",):
        if os.access(c, os.X_OK):
            return c
    return shutil.which("azurite-blob")


def shared_key(method, path, query, headers, length=0):
    """Authorization for a request, per Microsoft's Shared Key canonical form."""
    h = {k.lower(): v for k, v in headers.items()}
    sts = "\n".join([method, h.get("content-encoding", ""), h.get("content-language", ""),
                     str(length) if length else "", h.get("content-md5", ""),
                     h.get("content-type", ""), "", h.get("if-modified-since", ""),
                     h.get("if-match", ""), h.get("if-none-match", ""),
                     h.get("if-unmodified-since", ""), h.get("range", "")]) + "\n"
    for k in sorted(k for k in h if k.startswith("x-ms-")):
        sts += f"{k}:{h[k].strip()}\n"
    sts += f"/{ACCOUNT}{path}"
    for k, v in sorted(urllib.parse.parse_qsl(query)):
        sts += f"\n{k.lower()}:{v}"
    sig = hmac.new(base64.b64decode(ACCOUNT_KEY), sts.encode(), hashlib.sha256).digest()
    return f"SharedKey {ACCOUNT}:{base64.b64encode(sig).decode()}"


def account_sas():
    """An account SAS: read, blob service, objects, valid for a day."""
    sp, ss, srt, sv = "r", "b", "o", "2019-12-12"
    se = (datetime.datetime.utcnow() + datetime.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    sts = "\n".join([ACCOUNT, sp, ss, srt, "", se, "", "", sv, ""])
    sig = base64.b64encode(hmac.new(base64.b64decode(ACCOUNT_KEY), sts.encode(),
                                    hashlib.sha256).digest()).decode()
    return urllib.parse.urlencode({"sv": sv, "ss": ss, "srt": srt, "sp": sp, "se": se,
                                   "sig": sig})


class Azurite:
    def __init__(self, d, root, crt, key, ca):
        exe = azurite_path()
        if not exe:
            raise RuntimeError("azurite is not installed (scripts/deps installs it)")
        from servers import free_port, wait_port
        self.port = free_port()
        self.ctx = ssl.create_default_context(cafile=ca)
        self.proc = subprocess.Popen(
            [exe, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), "--silent", "--cert", crt, "--key", key, "--oauth", "basic",
             "--disableTelemetry", "--inMemoryPersistence"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(d, "azurite.out"), "w"))
        wait_port(self.port, self.proc, "azurite")
        self.request("PUT", f"/{ACCOUNT}/{CONTAINER}", "restype=container")
        for base, _, files in os.walk(root):
            for n in files:
                path = os.path.join(base, n)
                with open(path, "rb") as f:
                    self.put(os.path.relpath(path, root), f.read())

    def request(self, method, path, query="", body=b"", extra=None):
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": VERSION}
        headers.update(extra or {})
        headers["Authorization"] = shared_key(method, path, query, headers, len(body))
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)
        c.request(method, path + ("?" + query if query else ""), body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status >= 300:
            raise RuntimeError(f"azurite {method} {path}: {r.status} {data[:300]!r}")
        return r

    def put(self, name, data):
        self.request("PUT", f"/{ACCOUNT}/{CONTAINER}/{name}", body=data,
                     extra={"x-ms-blob-type": "BlockBlob",
                            "Content-Type": "application/octet-stream"})

    def replace(self, path):
        """The blob at request path `path` (/account/container/name), one byte flipped."""
        name = path.split("/", 3)[3]
        r_path = f"/{ACCOUNT}/{CONTAINER}/{name}"
        headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": VERSION}
        headers["Authorization"] = shared_key("GET", r_path, "", headers)
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)
        c.request("GET", r_path, headers=headers)
        data = bytearray(c.getresponse().read())
        c.close()
        data[len(data) // 2] ^= 0xFF
        self.put(name, bytes(data))


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class TokenServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, d, crt, key):
        self.fed_file = os.path.join(d, "azure-federated-token")
        self.lock = threading.Lock()
        self.lifetime = 3600
        self.stale = 0
        self.stats = {"issued": 0, "refused": 0, "imds": 0, "last_refusal": ""}
        self.rotate()
        super().__init__(("127.0.0.1", port), TokenHandler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)

    def rotate(self):
        tmp = self.fed_file + ".new"
        with open(tmp, "w") as f:
            f.write("eyJhbGciOiJSUzI1NiJ9." + b64url(secrets.token_bytes(96)) + ".sig\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.fed_file)

    def token(self):
        now = int(time.time())
        if self.stale > 0:
            self.stale -= 1
            now -= self.lifetime + 60
        claims = {"aud": "https://storage.azure.com", "iss": f"https://sts.windows.net/{TENANT}/",
                  "iat": now, "nbf": now - 5, "exp": now + self.lifetime, "tid": TENANT,
                  "appid": CLIENT_ID, "oid": CLIENT_ID, "sub": CLIENT_ID}
        head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        body = b64url(json.dumps(claims).encode())
        sig = b64url(hmac.new(b"weightd-test", f"{head}.{body}".encode(), hashlib.sha256).digest())
        return f"{head}.{body}.{sig}", now + self.lifetime


class TokenHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def refuse(self, error, why):
        srv = self.server
        with srv.lock:
            srv.stats["refused"] += 1
            srv.stats["last_refusal"] = why
        return self.reply(400 if error != "unauthorized_client" else 401,
                          {"error": error, "error_description": why})

    def do_GET(self):
        srv = self.server
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/__ctl":
            with srv.lock:
                if "lifetime" in q:
                    srv.lifetime = int(q["lifetime"])
                if "stale" in q:
                    srv.stale = int(q["stale"])
                if q.get("rotate"):
                    srv.rotate()
                if q.get("reset"):
                    srv.stats = {"issued": 0, "refused": 0, "imds": 0, "last_refusal": ""}
            return self.reply(200, {"ok": True})
        if url.path == "/__stats":
            with srv.lock:
                return self.reply(200, srv.stats)
        if url.path == "/metadata/identity/oauth2/token":
            if self.headers.get("Metadata") != "true":
                return self.refuse("invalid_request", "Required metadata header not specified")
            if q.get("resource") != "https://storage.azure.com/" or not q.get("api-version"):
                return self.refuse("invalid_resource", "resource or api-version is wrong")
            with srv.lock:
                tok, _ = srv.token()
                srv.stats["issued"] += 1
                srv.stats["imds"] += 1
            return self.reply(200, {"access_token": tok,
                                    "expires_on": str(int(time.time()) + srv.lifetime),
                                    "expires_in": str(srv.lifetime),
                                    "resource": "https://storage.azure.com/",
                                    "token_type": "Bearer"})
        return self.reply(404, {"error": "not_found"})

    def do_POST(self):
        srv = self.server
        n = int(self.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(self.rfile.read(min(n, 1 << 20)).decode()))
        if self.path != f"/{TENANT}/oauth2/v2.0/token":
            return self.refuse("invalid_tenant", f"AADSTS90002: Tenant not found: {self.path}")
        if form.get("grant_type") != "client_credentials":
            return self.refuse("unsupported_grant_type", "grant_type must be client_credentials")
        if form.get("client_id") != CLIENT_ID:
            return self.refuse("unauthorized_client", "AADSTS700016: Application not found")
        if form.get("scope") != "https://storage.azure.com/.default":
            return self.refuse("invalid_scope", "AADSTS70011: the scope is not valid")
        if "client_secret" in form:
            if form["client_secret"] != CLIENT_SECRET:
                return self.refuse("invalid_client", "AADSTS7000215: Invalid client secret")
        else:
            if form.get("client_assertion_type") != \
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
                return self.refuse("invalid_request", "client_assertion_type is wrong")
            with open(srv.fed_file) as f:
                want = f.read().strip()
            if form.get("client_assertion") != want:
                return self.refuse("invalid_client",
                                   "AADSTS700024: Client assertion is not within its valid "
                                   "time range or is not the current one")
        with srv.lock:
            tok, _ = srv.token()
            srv.stats["issued"] += 1
        return self.reply(200, {"token_type": "Bearer", "expires_in": srv.lifetime,
                                "ext_expires_in": srv.lifetime, "access_token": tok})


def start(d, root, crt, key, ca, free_port):
    """Azurite and the token endpoint; what the test needs to know, and what to stop."""
    az = Azurite(d, root, crt, key, ca)
    tok = TokenServer(free_port(), d, crt, key)
    threading.Thread(target=tok.serve_forever, daemon=True).start()
    info = {"az_direct": az.port, "az_token": tok.server_address[1], "az_account": ACCOUNT,
            "az_key": ACCOUNT_KEY, "az_container": CONTAINER, "az_sas": account_sas(),
            "az_tenant": TENANT, "az_client": CLIENT_ID, "az_secret": CLIENT_SECRET,
            "az_fed_file": tok.fed_file}
    return az, tok, info
