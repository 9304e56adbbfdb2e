#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Real servers on loopback for the remote-checkpoint tests.

Started by a test with a directory of files to serve; prints one line, "ready {json}", naming the
ports and the CA, then serves until its stdin closes or it gets SIGTERM, and stops everything it
started. What runs:

- nginx over HTTP and over HTTPS (a CA and a server certificate made here with openssl), serving
  the directory, with a path shaped like the Hugging Face Hub's resolve URLs that redirects to the
  file (/hf/ORG/REPO/resolve/REV/FILE), and /private/ that wants a bearer token;
- s3rver (npm, the version scripts/deps installs) holding the same files in bucket "bkt", behind a
  proxy that checks every request's AWS SigV4 signature with botocore (s3rver itself does not
  check SigV4) against the keys aws_endpoints.py knows (the static test keys and every temporary
  key it handed out, whose session token must be sent and signed; an expired one is answered 400
  ExpiredToken, and fault "expired" expires the key of the next N requests under them; /__stats
  counts the requests verified per access key id), and enforces If-Match (s3rver ignores it on
  GET);
- with --s3, the AWS credential endpoints of aws_endpoints.py (STS, container credentials, IMDS)
  on a port of their own ("aws" in the ready line);
- a fault proxy in front of nginx's HTTP port, told what to do by GET /__ctl?k=v&...: answer 503
  SlowDown or 500 to the next N requests, cut the next N answers after K body bytes, stall the next
  N answers for S seconds, or replace a file after N ranged requests for it (a new ETag). GET
  /__stats returns what it saw (requests, ranges, verified signatures) as JSON;
- with --azure, Azurite and an Entra-style token endpoint (tests/remote/azure_servers.py), and a
  fault proxy over plain HTTP in front of Azurite, whose swap re-uploads the blob.
"""
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aws_endpoints  # noqa: E402 - beside this file

S3_KEY = "S3RVER"
S3_SECRET = "S3RVERsecret/0123456789abcdef"  # s3rver checks no signature: any secret
S3_KEY2 = "AKIAROTATED0000TEST"  # a second static key, for rotating a credentials file
S3_SECRET2 = "rotatedSecret/0123456789abcdefghijklmnop"
BUCKET = "bkt"
TOKEN = "hf_testtoken0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


def make_tls(d):
    """A CA and a certificate for 127.0.0.1 and localhost signed by it."""
    def run(*a):
        subprocess.run(a, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ca_key, ca, key, csr, crt = (os.path.join(d, n) for n in
                                 ("ca.key", "ca.pem", "srv.key", "srv.csr", "srv.pem"))
    ext = os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n")
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
        "-days", "2", "-subj", "/CN=weightd test CA")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
        "-subj", "/CN=127.0.0.1")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", crt, "-days", "2", "-extfile", ext)
    return ca, crt, key


def start_nginx(d, root, http_port, https_port, crt, key):
    conf = os.path.join(d, "nginx.conf")
    user = "user root;\n" if os.geteuid() == 0 else ""
    locations = f"""
        root {root};
        location /hf/ {{
            rewrite ^/hf/[^/]+/[^/]+/resolve/[^/]+/(.*)$ /$1 redirect;
        }}
        location /private/ {{
            if ($http_authorization != "Bearer {TOKEN}") {{ return 401; }}
            alias {root}/;
        }}
    """
    with open(conf, "w") as f:
        f.write(f"""{user}worker_processes 2;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
daemon off;
events {{ worker_connections 512; }}
http {{
    access_log {d}/nginx-access.log;
    client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi;
    uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
    keepalive_requests 100000;
    sendfile on;
    server {{ listen 127.0.0.1:{http_port}; {locations} }}
    server {{
        listen 127.0.0.1:{https_port} ssl;
        ssl_certificate {crt}; ssl_certificate_key {key};
        {locations}
    }}
}}
""")
    p = subprocess.Popen(["nginx", "-c", conf, "-p", d], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "nginx.out"), "w"))
    wait_port(http_port, p, "nginx")
    wait_port(https_port, p, "nginx")
    return p


def s3rver_path():
    p = os.environ.get("WD_S3RVER")
    if p and os.access(p, os.X_OK):
        return p
    for c in ("/usr/local/lib/weightd-test/node_modules/.bin/s3rver",):
        if os.access(c, os.X_OK):
            return c
    return shutil.which("s3rver")


def start_s3rver(d, root, port):
    exe = s3rver_path()
    if not exe:
        raise RuntimeError("s3rver is not installed (scripts/deps installs it)")
    data = os.path.join(d, "s3data")
    os.mkdir(data)
    p = subprocess.Popen([exe, "-d", data, "-a", "127.0.0.1", "-p", str(port), "--silent",
                          "--service-endpoint", "localhost", "--configure-bucket", BUCKET], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "s3rver.out"), "w"))
    wait_port(port, p, "s3rver")
    import botocore.config
    import botocore.session
    c = botocore.session.get_session().create_client(
        "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
        aws_access_key_id=S3_KEY, aws_secret_access_key=S3_SECRET,
        config=botocore.config.Config(s3={"addressing_style": "path"}))
    for base, _, files in os.walk(root):
        for n in files:
            path = os.path.join(base, n)
            key = os.path.relpath(path, root)
            with open(path, "rb") as f:
                c.put_object(Bucket=BUCKET, Key=key, Body=f.read())
    return p


def verify_sigv4(method, path, headers):
    """None when the request's SigV4 signature is right, else why not (botocore recomputes it)
    with the secret and session token aws_endpoints knows for its access key: the static test
    keys, or the temporary ones its STS, container and IMDS endpoints handed out."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    auth = headers.get("Authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization header"
    try:
        parts = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
        signed = parts["SignedHeaders"].split(";")
        cred = parts["Credential"].split("/")
    except (ValueError, KeyError):
        return "malformed Authorization header"
    k = aws_endpoints.lookup(cred[0])
    if not k:
        return "unknown access key"
    for must in ("host", "x-amz-date", "x-amz-content-sha256"):
        if must not in signed:
            return f"{must} is not signed"
    if k["token"] and headers.get("x-amz-security-token") != k["token"]:
        return "the session token is missing or not the key's"
    if k["token"] and "x-amz-security-token" not in signed:
        return "the session token is not signed"
    hdrs = {h: v for h, v in headers.items() if h.lower() in signed}
    req = AWSRequest(method=method, url="http://" + headers["Host"] + path, headers=hdrs)
    req.context["timestamp"] = headers.get("X-Amz-Date", "")
    a = S3SigV4Auth(Credentials(cred[0], k["secret"], k["token"]), cred[3], cred[2])
    want = a.signature(a.string_to_sign(req, a.canonical_request(req)), req)
    return None if want == parts["Signature"] else "signature does not match"


def access_key_of(headers):
    auth = headers.get("Authorization", "")
    at = auth.find("Credential=")
    return auth[at + 11:].split("/", 1)[0] if at >= 0 else ""


def s3_error(code, message):
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()


class Proxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port, upstream_port, root, sigv4=False, if_match=False,
                 upstream_tls=None, on_swap=None):
        self.upstream_port = upstream_port
        self.upstream_tls = upstream_tls  # an ssl context: the upstream is HTTPS
        self.on_swap = on_swap  # replaces the object itself (a store that is not the directory)
        self.root = root
        self.sigv4 = sigv4
        self.if_match = if_match
        self.lock = threading.Lock()
        self.faults = {}
        self.stats = {"requests": 0, "ranges": [], "verified": 0, "refused": 0}
        super().__init__(("127.0.0.1", port), Handler)

    def take(self, name):
        """Use one of the fault `name`'s remaining count; its settings, or None."""
        with self.lock:
            f = self.faults.get(name)
            if not f or f["n"] <= 0:
                return None
            f["n"] -= 1
            return dict(f)

    def handle_error(self, request, client_address):
        pass  # a client that hangs up mid-answer is what the fault tests do on purpose


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        srv = self.server
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/__ctl":
            q = dict(urllib.parse.parse_qsl(url.query))
            with srv.lock:
                if q.get("reset"):
                    srv.faults.clear()
                    srv.stats = {"requests": 0, "ranges": [], "verified": 0, "refused": 0}
                if "fault" in q:
                    srv.faults[q["fault"]] = {k: (int(v) if v.lstrip("-").isdigit() else v)
                                              for k, v in q.items() if k != "fault"}
            return self.reply(200, b"ok")
        if url.path == "/__stats":
            with srv.lock:
                return self.reply(200, json.dumps(srv.stats).encode())
        with srv.lock:
            srv.stats["requests"] += 1
            srv.stats["ranges"].append([url.path, self.headers.get("Range", "")])
        if srv.sigv4:
            why = verify_sigv4("GET", self.path, self.headers)
            key = access_key_of(self.headers)
            k = aws_endpoints.lookup(key) if why is None else None
            expired = k is not None and k["expires"] is not None and k["expires"] <= time.time()
            if why is None and not expired and srv.take("expired"):
                aws_endpoints.expire(key)  # its token expires under this request
                expired = True
            with srv.lock:
                srv.stats["verified" if why is None and not expired else "refused"] += 1
                if expired:
                    srv.stats["expired"] = srv.stats.get("expired", 0) + 1
                if why is None and not expired:
                    keys = srv.stats.setdefault("keys", {})
                    keys[key] = keys.get(key, 0) + 1
            if why:
                return self.reply(403, s3_error("SignatureDoesNotMatch", why))
            if expired:
                return self.reply(400, s3_error("ExpiredToken",
                                                "The provided token has expired."))
        if srv.take("503"):
            return self.reply(503, s3_error("SlowDown", "Please reduce your request rate."))
        if srv.take("500"):
            return self.reply(500, s3_error("InternalError", "We encountered an internal error."))
        stall = srv.take("stall")
        if stall:
            time.sleep(stall.get("seconds", 5))
        swap = srv.faults.get("swap")
        if swap and url.path == swap["path"] and self.headers.get("Range"):
            with srv.lock:
                swap["after"] -= 1
                do_swap = swap["after"] == 0
            if do_swap and srv.on_swap:
                srv.on_swap(swap["path"])
            elif do_swap:
                p = os.path.join(srv.root, swap["path"].lstrip("/"))
                with open(p, "rb") as f:
                    data = bytearray(f.read())
                data[len(data) // 2] ^= 0xFF
                with open(p + ".new", "wb") as f:
                    f.write(data)
                os.replace(p + ".new", p)
                st = os.stat(p)
                os.utime(p, (st.st_atime, st.st_mtime + 10))
        if srv.upstream_tls:
            up = http.client.HTTPSConnection("127.0.0.1", srv.upstream_port, timeout=60,
                                             context=srv.upstream_tls)
        else:
            up = http.client.HTTPConnection("127.0.0.1", srv.upstream_port, timeout=60)
        fwd = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
        if srv.sigv4 and "Authorization" in fwd:
            # verified above: s3rver checks no signature, only that it knows the access key
            key = access_key_of(self.headers)
            fwd["Authorization"] = fwd["Authorization"].replace(f"Credential={key}/",
                                                                f"Credential={S3_KEY}/")
            fwd.pop("x-amz-security-token", None)
        up.request("GET", self.path, headers=fwd)
        r = up.getresponse()
        etag = r.getheader("ETag")
        want = self.headers.get("If-Match")
        if srv.if_match and want and etag and want != etag and r.status in (200, 206):
            r.read()
            up.close()
            return self.reply(412, s3_error("PreconditionFailed",
                                            "At least one of the pre-conditions you specified did not hold"))
        drop = srv.take("drop") if r.status in (200, 206) else None
        whole = None
        if r.getheader("Content-Length") is None:  # chunked (Azurite's errors): sent with a length
            whole = r.read()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "date", "server"):
                self.send_header(k, v)
        if whole is not None:
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole)
            up.close()
            return
        self.end_headers()
        sent = 0
        while True:
            chunk = r.read(65536)
            if not chunk:
                break
            if drop and sent + len(chunk) > drop.get("after", 0):
                self.wfile.write(chunk[: max(0, drop.get("after", 0) - sent)])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                up.close()
                return
            self.wfile.write(chunk)
            sent += len(chunk)
        up.close()


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, help="the files to serve")
    ap.add_argument("--s3", action="store_true", help="also run s3rver behind the SigV4 proxy")
    ap.add_argument("--azure", action="store_true",
                    help="also run Azurite and a token endpoint, a proxy in front of Azurite")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="wd-remote-")
    procs = []
    proxies = []

    def stop(*_):
        for p in proxies:
            p.shutdown()
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(d, ignore_errors=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        ca, crt, key = make_tls(d)
        http_port, https_port = free_port(), free_port()
        procs.append(start_nginx(d, a.root, http_port, https_port, crt, key))
        info = {"http": http_port, "https": https_port, "ca": ca, "token": TOKEN}
        fault = Proxy(free_port(), http_port, a.root)
        proxies.append(fault)
        info["fault"] = fault.server_address[1]
        if a.s3:
            s3_port = free_port()
            procs.append(start_s3rver(d, a.root, s3_port))
            s3 = Proxy(free_port(), s3_port, a.root, sigv4=True, if_match=True)
            proxies.append(s3)
            info.update(s3=s3.server_address[1], s3_key=S3_KEY, s3_secret=S3_SECRET, bucket=BUCKET)
            aws_endpoints.add_static(S3_KEY, S3_SECRET)
            aws_endpoints.add_static(S3_KEY2, S3_SECRET2)
            info.update(s3_key2=S3_KEY2, s3_secret2=S3_SECRET2)
            aws = aws_endpoints.start(free_port())
            proxies.append(aws)
            info.update(aws=aws.server_address[1], role_arn=aws_endpoints.ROLE_ARN,
                        web_token=aws_endpoints.WEB_TOKEN,
                        container_token=aws_endpoints.CONTAINER_TOKEN)
        if a.azure:
            import azure_servers
            az, tok, az_info = azure_servers.start(d, a.root, crt, key, ca, free_port)
            procs.append(az.proc)
            proxies.append(tok)
            azp = Proxy(free_port(), az.port, a.root, upstream_tls=az.ctx, on_swap=az.replace)
            proxies.append(azp)
            info.update(az_info, az=azp.server_address[1])
        started = (aws_endpoints.Server,)  # these serve on their own threads already
        if a.azure:
            started += (azure_servers.TokenServer,)
        for p in proxies:
            if not isinstance(p, started):
                threading.Thread(target=p.serve_forever, daemon=True).start()
        print("ready " + json.dumps(info), flush=True)
        sys.stdin.read()  # until the test closes our stdin (or dies)
    except Exception as e:  # noqa: BLE001 - say what failed, then clean up
        print(f"error {e}", flush=True)
    stop()


if __name__ == "__main__":
    main()
