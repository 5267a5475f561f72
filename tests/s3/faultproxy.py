"""A fault proxy between the S3 clients (s3fs, botocore) and moto's server: the network as it fails.

The hard case is a response lost *after* the request took effect: the client's own retry then meets its own object
(a conditional PutObject answers 412, a completed multipart upload is gone). The proxy forwards each request to
moto and, where a :class:`Rule` says so, does one of

- ``lose``: forward the request, read moto's answer, then close the connection without sending it;
- ``reset``: close the connection (TCP reset) before forwarding anything: the request never took effect;
- ``slowdown``: answer ``503 SlowDown`` without forwarding, as a throttled S3 does (another store's throttle answer
  through *throttle*: Google Cloud Storage's ``429``, Azure's ``503 ServerBusy``).

Where moto differs from S3 on what a fault exposes, the proxy answers as S3 does: a CompleteMultipartUpload of an
upload already completed gets ``404 NoSuchUpload`` (the upload is gone, its object is there; moto answers 200
again), which is what a completion resent after its first answer was lost meets on S3; so does a completion of an
upload aborted meanwhile (moto answers 500 Internal Server Error). Likewise in front of
fake-gcs-server: a Google Cloud Storage resumable upload session that completed answers a resent final request
with the object it made (``200``), as GCS keeps a session for a week; the emulator forgets it (``404``). The
final request is a PUT to the session (GCS's documentation) or a POST (gcsfs sends its chunks so): both are answered.

A rule matches by method, by query parameter (``uploads``, ``uploadId``), by request header (``If-None-Match``) and
by a substring of the path, and fires on every *every*-th matching request, at most *limit* times. What it did is
counted per rule (:meth:`FaultProxy.counts`), so a test can show that its faults were hit.

Loopback only; every loop is bounded: the server stops by itself after *lifetime* seconds (a test that forgets it
leaves no proxy behind), and each forwarded request has a timeout.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ACTIONS = ("lose", "reset", "slowdown")


@dataclass(frozen=True)
class Throttle:
    """An answer the proxy gives in the server's place (a store's to a request it throttles): status, content
    type, body."""

    status: int
    content_type: str
    body: bytes


def _error_xml(code: str, message: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
            "</Message></Error>").encode()


S3_THROTTLE = Throttle(503, "application/xml", _error_xml("SlowDown", "Please reduce your request rate."))
#: S3's answer to a completion of an upload it completed already (moto answers 200 again)
_NO_SUCH_UPLOAD = Throttle(404, "application/xml", _error_xml("NoSuchUpload", "The specified upload does not exist."))


@dataclass
class Rule:
    """Which requests fail and how: every condition given must hold; ``None`` matches anything."""

    action: str
    method: str | None = None
    #: a query parameter the request carries (``uploads``: create a multipart upload; ``uploadId``: its parts,
    #: completion or abort)
    query: str | None = None
    #: a request header it carries (``If-None-Match``: an exclusive create)
    header: str | None = None
    #: a substring of the request path (a record's name)
    path: str | None = None
    #: fire on the every-th matching request (1: each one)
    every: int = 1
    #: fire at most this many times
    limit: int = 1_000_000
    #: let this many matching requests through before the rule starts counting
    after: int = 0
    matched: int = field(default=0, init=False)
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown fault action {self.action!r}: use one of {', '.join(ACTIONS)}")
        if self.every < 1:
            raise ValueError(f"every must be at least 1, got {self.every}")

    def matches(self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str]) -> bool:
        return ((self.method is None or method == self.method)
                and (self.query is None or self.query in query)
                and (self.header is None or self.header.lower() in headers)
                and (self.path is None or self.path in path))

    def describe(self) -> str:
        what = " ".join(f"{k}={v}" for k, v in (("method", self.method), ("query", self.query),
                                                 ("header", self.header), ("path", self.path)) if v)
        after = f" after {self.after}" if self.after else ""
        return f"{self.action} every {self.every}{after} of [{what or 'any'}]"


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of *upstream* (moto's server URL), in a thread of this process."""

    def __init__(self, upstream: str, *, lifetime: float = 600.0, timeout: float = 30.0,
                 throttle: Throttle | None = None) -> None:
        parts = urlsplit(upstream)
        #: what ``slowdown`` answers (default: S3's)
        self.throttle = throttle or S3_THROTTLE
        if parts.hostname not in ("127.0.0.1", "localhost"):
            raise ValueError(f"the fault proxy forwards to loopback only, not {upstream}")
        self.upstream = (parts.hostname, parts.port or 80)
        self.timeout = timeout
        self.rules: list[Rule] = []
        self.requests = 0
        #: upload ids whose completion moto accepted (S3 forgets those: see the module docstring)
        self.completed: set[str] = set()
        self.nosuchupload = 0
        #: GCS resumable sessions the emulator completed: upload_id -> its final answer (see the module docstring)
        self.sessions: dict[str, Throttle] = {}
        self.sessions_replayed = 0
        #: requests the server itself failed to answer (it refused the connection, or timed out)
        self.upstream_errors = 0
        #: ``(method, path, action)`` of every request a fault hit, in order (what a failing test shows)
        self.hits: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + lifetime
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server.timeout = 0.5
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._serve, name="fault-proxy", daemon=True)
        self._stop = threading.Event()

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            self._server.handle_request()
        self._server.server_close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------------ configuration
    def add(self, action: str, **conditions: object) -> Rule:
        """Add a rule (see :class:`Rule`); returns it, so that a test can read its counts."""
        rule = Rule(action, **conditions)  # type: ignore[arg-type]
        with self._lock:
            self.rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def counts(self) -> dict[str, int]:
        """``{rule description: times fired}`` and the requests seen in all."""
        with self._lock:
            return {"requests": self.requests, "NoSuchUpload answered": self.nosuchupload,
                    "completed sessions replayed": self.sessions_replayed,
                    "server errors": self.upstream_errors,
                    **{r.describe(): r.fired for r in self.rules}}

    def _decide(self, method: str, path: str, headers: dict[str, str]) -> str | None:
        split = urlsplit(path)
        query = parse_qs(split.query, keep_blank_values=True)
        with self._lock:
            self.requests += 1
            if method == "POST" and query.get("uploadId", [""])[0] in self.completed:
                self.nosuchupload += 1
                self.hits.append((method, path, "nosuchupload"))
                return "nosuchupload"
            if method in ("PUT", "POST") and query.get("upload_id", [""])[0] in self.sessions:
                self.sessions_replayed += 1
                self.hits.append((method, path, "session"))
                return "session"
            for rule in self.rules:
                if rule.fired < rule.limit and rule.matches(method, split.path, query, headers):
                    rule.matched += 1
                    if rule.matched > rule.after and (rule.matched - rule.after) % rule.every == 0:
                        rule.fired += 1
                        self.hits.append((method, path, rule.action))
                        return rule.action
        return None

    # ------------------------------------------------------------------ the handler
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = proxy.timeout   # a client that sends less than it announced is dropped, not waited for

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    chunks = []
                    for _ in range(1_000_000):
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline()
                    return b"".join(chunks)
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _drop(self, reset: bool) -> None:
                if reset:   # RST instead of FIN: SO_LINGER with a zero timeout
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _handle(self) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                body = self._body()
                action = proxy._decide(self.command, self.path, headers)
                if action == "reset":
                    self._drop(reset=True)
                    return
                session = parse_qs(urlsplit(self.path).query).get("upload_id", [""])[0]
                answer = {"slowdown": proxy.throttle, "nosuchupload": _NO_SUCH_UPLOAD,
                          "session": proxy.sessions.get(session)}.get(action or "")
                if answer is not None:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                    return
                forward = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                if "transfer-encoding" in headers:
                    forward["Content-Length"] = str(len(body))
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=proxy.timeout)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=forward)
                    resp = conn.getresponse()
                    payload = resp.read()
                except OSError:   # the server did not answer: the client sees what a network would show it
                    with proxy._lock:
                        proxy.upstream_errors += 1
                    self._drop(reset=True)
                    return
                finally:
                    conn.close()
                upload = parse_qs(urlsplit(self.path).query).get("uploadId", [""])[0]
                if self.command == "POST" and upload and resp.status == 200 and b"<Error>" not in payload:
                    with proxy._lock:
                        proxy.completed.add(upload)
                if self.command == "POST" and upload and resp.status == 500:   # moto, for an aborted upload
                    with proxy._lock:
                        proxy.nosuchupload += 1
                    resp.status, resp.reason, payload = _NO_SUCH_UPLOAD.status, "Not Found", _NO_SUCH_UPLOAD.body
                if self.command in ("PUT", "POST") and session and resp.status in (200, 201):
                    with proxy._lock:
                        proxy.sessions[session] = Throttle(200, resp.getheader("Content-Type", "application/json"),
                                                           payload)
                if action == "lose":   # it took effect upstream; the client never hears of it
                    self._drop(reset=False)
                    return
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                # a HEAD's length is the object's, not the (empty) body's
                length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(payload))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler



def proxied_store(proxy: FaultProxy, root: str, *, retries: int = 5) -> Any:
    """An :class:`~airflow_commit_provider.protocol.stores.S3Store` for *root* (``s3://bucket/path``) whose
    requests go through *proxy*.

    The client retries as s3fs does (*retries* tries, waits from 0.1 s growing 1.7 times), and botocore's own retry
    is off: its waits (up to 2**n seconds, in standard mode also a retry quota) would make every faulty cell take
    tens of seconds, and s3fs's retry of a request whose answer was lost is the same resend as botocore's. A 503
    without the word SlowDown (a throttled HEAD has no body), which botocore would retry and s3fs does not, is
    retried within :func:`retrying_throttles`."""
    import s3fs

    from airflow_commit_provider.protocol.stores import S3Store

    fs = s3fs.S3FileSystem(endpoint_url=proxy.url, use_listings_cache=False, skip_instance_cache=True,
                           config_kwargs={"retries": {"total_max_attempts": 1}})
    fs.retries = retries
    return S3Store(fs, root)



@contextlib.contextmanager
def retrying_throttles() -> Iterator[None]:
    """s3fs retries every 503 in the block, as botocore (off in :func:`proxied_store`) would: through s3fs's
    public hook for errors it should retry, which is process-wide, so it is put back afterwards."""
    import s3fs.core

    saved = s3fs.core.CUSTOM_ERROR_HANDLER
    s3fs.core.set_custom_error_handler(
        lambda exc: getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode") == 503)
    try:
        yield
    finally:
        s3fs.core.set_custom_error_handler(saved)


__all__ = ["ACTIONS", "S3_THROTTLE", "FaultProxy", "Rule", "Throttle", "proxied_store", "retrying_throttles"]
