#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The credentials botocore (Debian's python3-botocore) resolves from this process's environment.

Prints one JSON line: {"access_key", "has_token", "method"} (never the secret or the token), or
{"error": "..."}; the remote-credential tests compare it with what weightd resolved from the same
environment, files and endpoints. Two gaps of the botocore Debian 12 ships are bridged, each
with the variable the newer botocore reads: AWS_ENDPOINT_URL_STS (read since 1.31) is given to
the STS client its credential providers make, and AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read
since 1.33) is read into AWS_CONTAINER_AUTHORIZATION_TOKEN.
"""
import json
import os
import sys


def main():
    import botocore.session
    tf = os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE")
    if tf and not os.environ.get("AWS_CONTAINER_AUTHORIZATION_TOKEN"):
        with open(tf) as f:
            os.environ["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = f.read().strip()
    s = botocore.session.get_session()
    sts = os.environ.get("AWS_ENDPOINT_URL_STS")
    if sts:
        plain = s.create_client

        def create_client(name, *a, **kw):
            if name == "sts":
                kw["endpoint_url"] = sts
            return plain(name, *a, **kw)
        s.create_client = create_client
    try:
        c = s.get_credentials()
        if c is None:
            print(json.dumps({"error": "botocore found no credentials"}))
            return
        f = c.get_frozen_credentials()
        print(json.dumps({"access_key": f.access_key, "has_token": bool(f.token),
                          "method": getattr(c, "method", "")}))
    except Exception as e:  # noqa: BLE001 - the test shows botocore's reason
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))


if __name__ == "__main__":
    sys.exit(main())
