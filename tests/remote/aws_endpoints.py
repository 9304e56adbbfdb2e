# SPDX-License-Identifier: Apache-2.0
"""AWS credential endpoints on loopback for the remote-checkpoint tests, answering as AWS documents.

One HTTP server (started by servers.py with --s3) plays:

- STS (POST /, form-encoded, API version 2011-06-15): AssumeRoleWithWebIdentity, unsigned, whose
  WebIdentityToken must equal the token the test wrote (else 403 AccessDenied "Not authorized to
  perform sts:AssumeRoleWithWebIdentity"); AssumeRole, whose SigV4 signature (service sts) must
  verify with keys this module knows. Answers are the documented XML, errors an ErrorResponse.
- a container credentials endpoint (GET /creds) that wants the Authorization header to be the
  token the test wrote (else 401), answering the documented JSON;
- EC2 instance metadata: PUT /latest/api/token (with X-aws-ec2-metadata-token-ttl-seconds) gives
  a session token, which GET /latest/meta-data/iam/security-credentials/[ROLE] then wants in
  X-aws-ec2-metadata-token (IMDSv1 refused with 401 unless allowed); no role: 404.

Every key it hands out is kept in KEYS with its secret, session token and expiry, so that the
SigV4 proxy in front of s3rver can check a request's signature and token and refuse an expired
one with 400 ExpiredToken. A source keeps handing out the same keys while more than half of their
life is left (so two clients asking in turn, weightd and botocore, get the same ones), then new
ones. GET /__ctl?k=v sets ttl (seconds), web_token, container_token, role, imds_role ("" for
none), imds_v1 (1: allowed), rotate=1 (every source mints new keys at its next call), expire=KEY
(that key expires now); GET /__stats says what it issued and was asked.
"""
import base64
import datetime
import http.server
import json
import os
import socketserver
import threading
import time
import urllib.parse

ROLE_ARN = "arn:aws:iam::123456789012:role/weightd-test"
WEB_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6d2VpZ2h0ZCJ9.c2ln"
CONTAINER_TOKEN = "pod-identity-token-0123456789abcdef"
IMDS_ROLE = "weightd-node-role"

LOCK = threading.Lock()
# access key id -> {"secret", "token" (or None), "expires" (Unix seconds or None), "source"}
KEYS = {}
STATE = {"ttl": 3600, "web_token": WEB_TOKEN, "container_token": CONTAINER_TOKEN,
         "role": ROLE_ARN, "imds_role": IMDS_ROLE, "imds_v1": 0, "serial": 0}
CURRENT = {}  # source -> access key id it hands out now
STATS = {"sts": 0, "sts_denied": 0, "assume_role": 0, "container": 0, "container_denied": 0,
         "imds_token": 0, "imds_creds": 0, "imds_v1": 0, "issued": []}
IMDS_TOKENS = set()


def add_static(key, secret):
    with LOCK:
        KEYS[key] = {"secret": secret, "token": None, "expires": None, "source": "static"}


def lookup(key):
    """The record of an access key id, or None."""
    with LOCK:
        k = KEYS.get(key)
        return dict(k) if k else None


def expire(key):
    """The key expires now, and its source hands out new keys at its next call."""
    with LOCK:
        k = KEYS.get(key)
        if k and k["token"]:
            k["expires"] = time.time() - 1
            for s, cur in list(CURRENT.items()):
                if cur == key:
                    del CURRENT[s]


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def issue(source):
    """The keys `source` hands out now: the same until half their life is gone, then new ones."""
    now = time.time()
    with LOCK:
        cur = CURRENT.get(source)
        k = KEYS.get(cur) if cur else None
        if k and k["expires"] - now > (k["expires"] - k["issued"]) / 2:
            return cur, k
        STATE["serial"] += 1
        n = STATE["serial"]
        key = "ASIA%s%04d" % (source.upper()[:4].ljust(4, "X"), n)
        k = {"secret": base64.b64encode(os.urandom(30)).decode(),
             "token": "IQoJb3JpZ2luX2VjE" + base64.b64encode(os.urandom(120)).decode(),
             "issued": now, "expires": now + STATE["ttl"], "source": source}
        KEYS[key] = k
        CURRENT[source] = key
        # the secrets too: tests look for them where they must never be (logs, describe, ...)
        STATS["issued"].append([source, key, int(now), int(k["expires"]), k["secret"], k["token"]])
        return key, dict(k)


def sts_xml(action, key, k):
    return (f'<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/">\n'
            f"  <{action}Result>\n"
            "    <SubjectFromWebIdentityToken>system:serviceaccount:weightd:weightd"
            "</SubjectFromWebIdentityToken>\n"
            "    <AssumedRoleUser>\n"
            f"      <Arn>{STATE['role']}/weightd</Arn>\n"
            "      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:weightd</AssumedRoleId>\n"
            "    </AssumedRoleUser>\n"
            "    <Credentials>\n"
            f"      <SessionToken>{k['token']}</SessionToken>\n"
            f"      <SecretAccessKey>{k['secret']}</SecretAccessKey>\n"
            f"      <Expiration>{iso(k['expires'])}</Expiration>\n"
            f"      <AccessKeyId>{key}</AccessKeyId>\n"
            "    </Credentials>\n"
            "    <Audience>sts.amazonaws.com</Audience>\n"
            f"  </{action}Result>\n"
            "  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId>"
            "</ResponseMetadata>\n"
            f"</{action}Response>\n").encode()


def sts_error(code, message, kind="Sender"):
    return ('<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">\n'
            f"  <Error><Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message></Error>\n"
            "  <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>\n"
            "</ErrorResponse>\n").encode()


def creds_json(key, k, imds=False):
    d = {"AccessKeyId": key, "SecretAccessKey": k["secret"], "Token": k["token"],
         "Expiration": iso(k["expires"])}
    if imds:
        d = {"Code": "Success", "LastUpdated": iso(k["issued"]), "Type": "AWS-HMAC", **d}
    else:
        d["RoleArn"] = STATE["role"]
    return json.dumps(d).encode()


def verify_signed(method, path, headers, body, service):
    """None when a SigV4-signed request verifies against KEYS (service, body hashed), else why."""
    from botocore.auth import SigV4Auth
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
    k = lookup(cred[0])
    if not k:
        return "unknown access key"
    if k["token"] and headers.get("x-amz-security-token") != k["token"]:
        return "the session token is missing or not the key's"
    if k["token"] and "x-amz-security-token" not in signed:
        return "the session token is not signed"
    hdrs = {h: v for h, v in headers.items() if h.lower() in signed}
    req = AWSRequest(method=method, url="http://" + headers["Host"] + path, headers=hdrs, data=body)
    req.context["timestamp"] = headers.get("X-Amz-Date", "")
    a = SigV4Auth(Credentials(cred[0], k["secret"], k["token"]), service, cred[2])
    want = a.signature(a.string_to_sign(req, a.canonical_request(req)), req)
    return None if want == parts["Signature"] else "signature does not match"


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port):
        super().__init__(("127.0.0.1", port), Handler)

    def handle_error(self, request, client_address):
        pass


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, status, body=b"", ctype="text/plain"):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def count(self, what):
        with LOCK:
            STATS[what] += 1

    def imds_allowed(self):
        tok = self.headers.get("X-aws-ec2-metadata-token")
        if tok is not None:
            return tok in IMDS_TOKENS
        if STATE["imds_v1"]:
            self.count("imds_v1")
            return True
        return False

    def do_PUT(self):
        if self.path != "/latest/api/token":
            return self.reply(404)
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.reply(400)
        if STATE.get("imds_no_v2"):
            return self.reply(403)
        tok = base64.b64encode(os.urandom(40)).decode()
        with LOCK:
            IMDS_TOKENS.add(tok)
            STATS["imds_token"] += 1
        return self.reply(200, tok.encode())

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/__ctl":
            q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
            with LOCK:
                for k in ("web_token", "container_token", "role", "imds_role"):
                    if k in q:
                        STATE[k] = q[k]
                for k in ("ttl", "imds_v1", "imds_no_v2"):
                    if k in q:
                        STATE[k] = int(q[k])
                if q.get("rotate"):
                    CURRENT.clear()
                if q.get("expire") in KEYS:
                    KEYS[q["expire"]]["expires"] = time.time() - 1
            return self.reply(200, b"ok")
        if url.path == "/__stats":
            with LOCK:
                return self.reply(200, json.dumps(STATS).encode(), "application/json")
        if url.path == "/creds":
            if self.headers.get("Authorization") != STATE["container_token"]:
                self.count("container_denied")
                return self.reply(401, json.dumps({"code": "AccessDenied", "message":
                                                   "the authorization token is not valid"}).encode(),
                                  "application/json")
            self.count("container")
            key, k = issue("container")
            return self.reply(200, creds_json(key, k), "application/json")
        base = "/latest/meta-data/iam/security-credentials/"
        if url.path.startswith(base):
            if not self.imds_allowed():
                return self.reply(401)
            role = url.path[len(base):]
            if not STATE["imds_role"]:
                return self.reply(404)
            if role == "":
                return self.reply(200, STATE["imds_role"].encode())
            if role != STATE["imds_role"]:
                return self.reply(404)
            self.count("imds_creds")
            key, k = issue("imds")
            return self.reply(200, creds_json(key, k, imds=True), "application/json")
        return self.reply(404)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n) if 0 < n <= 65536 else b""
        q = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace")))
        action = q.get("Action")
        if q.get("Version") != "2011-06-15":
            return self.reply(400, sts_error("InvalidAction", "Could not find operation"))
        if action == "AssumeRoleWithWebIdentity":
            self.count("sts")
            if (q.get("WebIdentityToken") != STATE["web_token"] or q.get("RoleArn") != STATE["role"]
                    or not q.get("RoleSessionName")):
                self.count("sts_denied")
                return self.reply(403, sts_error(
                    "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity"))
            key, k = issue("web")
            return self.reply(200, sts_xml(action, key, k), "text/xml")
        if action == "AssumeRole":
            self.count("assume_role")
            why = verify_signed("POST", self.path, self.headers, body, "sts")
            if why:
                return self.reply(403, sts_error("SignatureDoesNotMatch", why))
            if q.get("RoleArn") != STATE["role"] or not q.get("RoleSessionName"):
                return self.reply(403, sts_error(
                    "AccessDenied", "Not authorized to perform sts:AssumeRole"))
            key, k = issue("role")
            return self.reply(200, sts_xml(action, key, k), "text/xml")
        return self.reply(400, sts_error("InvalidAction", f"Could not find operation {action}"))


def start(port):
    s = Server(port)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s
