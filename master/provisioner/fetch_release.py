"""Download one object with the VM's own identity and check its sha256 (standard library only).

A fresh Ubuntu VM has python3 but no boto3, awscli or gcloud storage, and det (which brings
them) is what is being installed; so the master's and agents' boot scripts carry this file and
run it as ``python3 fetch_release.py URL DEST [SHA256]``:

- ``s3://bucket/key``: S3 GET signed with Signature V4, credentials of the instance role from
  IMDSv2 (``DET_IMDS_URL``, default ``http://169.254.169.254``), region ``AWS_REGION`` or the
  instance's placement; ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` (path-style) for tests.
- ``gs://bucket/object``: the GCS JSON API with the service account's token from the metadata
  server (``GCE_METADATA_HOST``); ``STORAGE_EMULATOR_HOST`` for tests.
- ``http(s)://…``: a plain GET (an organisation's own wheel URL).

Transient failures (connection errors, HTTP 5xx, 429) are retried with backoff; a hash
mismatch is not (the file is removed and the exit code is 3). Exit 0 on success.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

_TIMEOUT = 30


class FetchError(Exception):
    pass


def _open(req: urllib.request.Request) -> http.client.HTTPResponse:
    response: http.client.HTTPResponse = urllib.request.urlopen(req, timeout=_TIMEOUT)
    return response


# -- AWS ---------------------------------------------------------------------------------------


def _imds_base() -> str:
    return os.environ.get("DET_IMDS_URL", "http://169.254.169.254").rstrip("/")


def _imds_get(path: str, token: str) -> str:
    req = urllib.request.Request(
        f"{_imds_base()}/latest/{path}", headers={"X-aws-ec2-metadata-token": token}
    )
    with _open(req) as r:
        return str(r.read().decode())


def _imds_token() -> str:
    req = urllib.request.Request(
        f"{_imds_base()}/latest/api/token",
        method="PUT",
        headers={"X-aws-ec2-metadata-token-ttl-seconds": "300"},
    )
    with _open(req) as r:
        return str(r.read().decode())


def aws_credentials() -> tuple[str, str, str | None, str]:
    """(access key, secret key, session token, region) of the instance role."""
    token = _imds_token()
    role = _imds_get("meta-data/iam/security-credentials/", token).split()[0]
    creds = json.loads(_imds_get(f"meta-data/iam/security-credentials/{role}", token))
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if not region:
        region = _imds_get("meta-data/placement/region", token).strip()
    return creds["AccessKeyId"], creds["SecretAccessKey"], creds.get("Token"), region


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def sigv4_headers(
    method: str,
    url: str,
    *,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    region: str,
    service: str = "s3",
    now: dt.datetime | None = None,
    body: bytes = b"",
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """Signature V4 headers for a request with ``body`` (empty: what ``GET`` needs); ``extra``
    headers (lower-case names) are signed too."""
    now = now or dt.datetime.now(dt.UTC)
    payload = hashlib.sha256(body).hexdigest()
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    date = amz_date[:8]
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc
    path = urllib.parse.quote(urllib.parse.unquote(parts.path or "/"), safe="/~")
    query = "&".join(
        f"{urllib.parse.quote(k, safe='~')}={urllib.parse.quote(v, safe='~')}"
        for k, v in sorted(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    )
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    headers.update(extra or {})
    if session_token:
        headers["x-amz-security-token"] = session_token
    names = sorted(headers)
    canonical = "\n".join(
        [
            method,
            path,
            query,
            "".join(f"{n}:{headers[n].strip()}\n" for n in names),
            ";".join(names),
            payload,
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _sign(
        _sign(_sign(_sign(f"AWS4{secret_key}".encode(), date), region), service), "aws4_request"
    )
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out = {k: v for k, v in headers.items() if k != "host"}
    out["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    return out


def s3_request(bucket: str, key: str) -> urllib.request.Request:
    access, secret, session, region = aws_credentials()
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    quoted = urllib.parse.quote(key, safe="/~")
    if endpoint:
        url = f"{endpoint.rstrip('/')}/{bucket}/{quoted}"
    else:
        url = f"https://{bucket}.s3.{region}.amazonaws.com/{quoted}"
    headers = sigv4_headers(
        "GET", url, access_key=access, secret_key=secret, session_token=session, region=region
    )
    return urllib.request.Request(url, headers=headers)


# -- GCP ---------------------------------------------------------------------------------------


def gcs_request(bucket: str, name: str) -> urllib.request.Request:
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    req = urllib.request.Request(
        f"http://{host}/computeMetadata/v1/instance/service-accounts/default/token",
        headers={"Metadata-Flavor": "Google"},
    )
    with _open(req) as r:
        token = json.load(r)["access_token"]
    base = os.environ.get("STORAGE_EMULATOR_HOST", "https://storage.googleapis.com").rstrip("/")
    url = (
        f"{base}/storage/v1/b/{urllib.parse.quote(bucket, safe='')}"
        f"/o/{urllib.parse.quote(name, safe='')}?alt=media"
    )
    return urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})


# -- any ---------------------------------------------------------------------------------------


def request_for(url: str) -> urllib.request.Request:
    parts = urllib.parse.urlsplit(url)
    key = parts.path.lstrip("/")
    if parts.scheme == "s3":
        return s3_request(parts.netloc, key)
    if parts.scheme == "gs":
        return gcs_request(parts.netloc, key)
    if parts.scheme in ("http", "https"):
        return urllib.request.Request(url)
    raise FetchError(f"unsupported URL {url!r} (s3://, gs://, http(s)://)")


def _transient(error: Exception) -> bool:
    if isinstance(error, urllib.error.HTTPError):
        return error.code >= 500 or error.code in (408, 429)
    return isinstance(error, (urllib.error.URLError, OSError, TimeoutError))


def fetch(url: str, dest: str, sha256: str | None = None, *, attempts: int = 6) -> str:
    """Download ``url`` to ``dest`` (atomically); returns the file's sha256."""
    for attempt in range(1, attempts + 1):
        try:
            with _open(request_for(url)) as response:
                digest = hashlib.sha256()
                tmp = f"{dest}.part"
                with open(tmp, "wb") as f:
                    for chunk in iter(lambda: response.read(1 << 20), b""):
                        digest.update(chunk)
                        f.write(chunk)
            break
        except Exception as e:
            if attempt == attempts or not _transient(e):
                raise FetchError(f"cannot download {url}: {e}") from None
            print(f"fetch_release: {url}: {e} (attempt {attempt}, retrying)", file=sys.stderr)
            time.sleep(min(30, 2**attempt))
    got = digest.hexdigest()
    if sha256 and got != sha256.lower():
        os.unlink(tmp)
        raise FetchError(f"{url}: sha256 is {got}, expected {sha256}")
    os.replace(tmp, dest)
    return got


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: fetch_release.py URL DEST [SHA256]", file=sys.stderr)
        return 2
    try:
        fetch(argv[0], argv[1], argv[2] if len(argv) == 3 else None)
    except FetchError as e:
        print(f"fetch_release: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
