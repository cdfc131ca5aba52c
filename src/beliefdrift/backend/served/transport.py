"""HTTP to one server, the one place every request goes through (`Transport.request`): JSON requests on one
background event loop, at most `concurrency` in flight. Each attempt is bounded in wall-clock time (`timeout`, from
sending the request to the body's last byte) and in size (`max_response_bytes`, compressed and decompressed, read
chunk by chunk); a redirect is never followed. A server that has not answered yet and refuses the connection is one
line at once; 429, 500, 502, 503, 504, timeouts and dropped connections are retried with exponential back-off, at most
`retries` times. Every body is read by one JSON reader (`parse_json`), which refuses a key given twice; every other
failure is a `ServedError` naming the URL and the setting to change."""

from __future__ import annotations

import asyncio
import email.utils
import json
import re
import ssl
import threading
import time
import urllib.parse
import zlib
from collections import Counter
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from beliefdrift.backend.served.options import ServerOptions
from beliefdrift.backend.served.spec import ServedError
from beliefdrift.credentials import register_url_secrets
from beliefdrift.errors import UserError, first_line

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")
#: The most seconds a connection may take to open (or `timeout`, if less): a host silent that long is not serving.
CONNECT_TIMEOUT = 10.0
#: The longest wait before a retry (the back-off's doubling, or a server's Retry-After, stops there).
MAX_WAIT = 30.0
#: Statuses that can pass (too many requests; a server failing, overloaded or restarting behind a gateway): retried.
RETRIED = frozenset({429, 500, 502, 503, 504})
#: The compressions a response may use (`Accept-Encoding`); zlib reads both with a bound on what it writes.
ENCODINGS = ("gzip", "deflate")


class _Loop:
    """One event loop on a daemon thread: the engine is synchronous (and may itself run inside a notebook's loop), so
    every batch of requests is submitted here and waited for."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="beliefdrift-served", daemon=True).start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


@dataclass(frozen=True)
class Response:
    """A response read whole (`Transport.request`): its status, headers and body (decompressed)."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    def json(self) -> Any:
        """The body as JSON (`parse_json`; a ValueError saying why where it is not)."""
        return parse_json(self.content)

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")


def parse_json(content: bytes) -> Any:
    """`content` read as JSON, strictly: a key given twice in one object (of which Python's json keeps the last
    silently) or nesting deeper than Python's recursion reads is a ValueError saying so, as is anything not JSON."""
    try:
        return json.loads(content, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("nested deeper than Python reads") from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """One JSON object's members as a dict; a ValueError naming a key given twice."""
    found = dict(pairs)
    if len(found) < len(pairs):
        twice = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"the key {twice!r} is given twice in one object")
    return found


def _message(response: Response) -> str:
    """The server's error message in `response` (OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or text)."""
    try:
        body = response.json()
    except ValueError:
        return " ".join(response.text.split())[:300]
    if isinstance(body, dict):
        error = body.get("error", body.get("detail", body))
        if isinstance(error, dict) and "message" in error:
            error = error["message"]
        return " ".join(str(error).split())[:300]
    return str(body)[:300]


def refusal(response: Response) -> str:
    """A short "HTTP status: message" of a response that refused a request."""
    return f"HTTP {response.status_code}: {_message(response)[:100]}"


def retry_after(value: str | None) -> float | None:
    """The seconds a Retry-After header asks to wait (RFC 9110: delta-seconds, or an HTTP date); None where there is
    none or it is neither."""
    value = (value or "").strip()
    if re.fullmatch(r"[0-9]{1,9}", value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _httpx() -> Any:
    """The httpx module (the `serve` extra)."""
    try:
        import httpx
    except ImportError:
        raise UserError("a served model needs httpx: pip install 'beliefdrift[serve]'") from None
    return httpx


class _Body:
    """A response body read chunk by chunk (`add`), decompressed where its Content-Encoding is one of `ENCODINGS`:
    more than `limit` bytes, compressed or decompressed, is a ServedError naming the setting; zlib never writes past
    the bytes left, so a compression bomb costs at most `limit` bytes."""

    def __init__(self, encoding: str, limit: int, where: str):
        self.encoding = encoding.strip().lower()
        if self.encoding not in ("", "identity", *ENCODINGS):
            raise ServedError(f"{where}: the response is compressed with {encoding!r}; beliefdrift reads "
                              f"{' or '.join(ENCODINGS)} (it asks for them)")
        self.decoder = zlib.decompressobj(32 + zlib.MAX_WBITS) if self.encoding in ENCODINGS else None
        self.limit = limit
        self.where = where
        self.received = 0  # bytes as sent
        self.size = 0  # bytes decompressed
        self.parts: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        self.received += len(chunk)
        if self.received > self.limit:
            raise _too_large(self.where, self.limit)
        if self.decoder is None:
            piece = chunk
        else:
            try:
                piece = self.decoder.decompress(chunk, self.limit - self.size + 1)
            except zlib.error as err:
                raise ServedError(f"{self.where}: the response's {self.encoding} body is corrupt ({err})") from None
        self.size += len(piece)
        if self.size > self.limit:
            raise _too_large(self.where, self.limit)
        self.parts.append(piece)

    def content(self) -> bytes:
        """The whole body; a compressed body that ends before its end is a ServedError."""
        if self.decoder is not None and not self.decoder.eof:
            raise ServedError(f"{self.where}: the response's {self.encoding} body is cut short")
        return b"".join(self.parts)


def _too_large(where: str, limit: int) -> ServedError:
    """The error for a response to `where` larger than `limit` bytes."""
    return ServedError(f"{where}: the response is larger than {limit} bytes (--model-args max_response_bytes=…)")


def _verify(options: ServerOptions) -> ssl.SSLContext | bool:
    """How an https server's certificate is checked: against `ca_cert_path`'s authorities, the usual ones, or not
    at all (`verify_certificate=false`)."""
    if options.ca_cert_path is None:
        return options.verify_certificate
    if not options.verify_certificate:
        raise ServedError(f"--model-args ca_cert_path={options.ca_cert_path} and verify_certificate=false: give one")
    try:
        return ssl.create_default_context(cafile=options.ca_cert_path)
    except (OSError, ssl.SSLError) as err:
        raise ServedError(f"--model-args ca_cert_path={options.ca_cert_path}: {first_line(err)}; expected a PEM file "
                          "of certificate authorities") from None


class Transport:
    """HTTP to the server at the API root `url` (its query, e.g. a key, sent with every request): JSON requests with
    retries and back-off, `concurrency` at a time."""

    def __init__(self, url: str, options: ServerOptions):
        http = _httpx()
        register_url_secrets(url)
        try:
            http.URL(url)
        except http.InvalidURL as err:
            raise ServedError(f"--model openai:{url}: not a URL ({first_line(err)}); expected "
                              "openai:http://HOST:PORT/v1") from None
        parts = urllib.parse.urlsplit(url)
        self.url = urllib.parse.urlunsplit(parts._replace(query=""))
        self.query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        self.options = options
        self.headers = {**options.headers(), "Accept-Encoding": ", ".join(ENCODINGS)}
        self.verify = _verify(options)
        self.retried = False  # a request needed a retry since the flag was last cleared
        self.reconnected = False  # … after its connection failed (refused, dropped or silent): the server may be new
        self.answered = False  # the server has answered a request (so a refused connection may pass: a restart)
        self._loop = _Loop()
        self._client: httpx.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the transport's event loop and wait for its result."""
        return self._loop.run(coroutine)

    def close(self) -> None:
        """Close the connections and stop the event loop's thread."""
        if self._client is not None:
            self.run(self._client.aclose())
        self._loop.close()

    async def request(self, method: str, path: str, body: Any = None, retry: bool = True) -> Response:
        """The response to one request (`path` below the API root, or an absolute URL), read whole within `timeout`
        s and `max_response_bytes`. 429, 500, 502–504, timeouts and dropped connections are retried
        `options.retries` times, waiting backoff·2^attempt s (or the server's Retry-After; at most `MAX_WAIT`), so
        one request takes at most (retries + 1)·timeout + the waits; without `retry` they are returned or raised
        at once. A server that never answered and refuses the connection, and every failure once the retries are
        spent, is a ServedError."""
        httpx = _httpx()
        if self._client is None:
            timeout = self.options.timeout
            self._client = httpx.AsyncClient(base_url=self.url, params=self.query, headers=self.headers,
                                             verify=self.verify, follow_redirects=False,
                                             timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
                                             limits=httpx.Limits(max_connections=self.options.concurrency))
            self._slots = asyncio.Semaphore(self.options.concurrency)
        assert self._slots is not None
        attempts = self.options.retries + 1 if retry else 1
        started = time.monotonic()
        for attempt in range(attempts):
            wait = self.options.backoff * 2**attempt
            try:
                async with self._slots:
                    response = await asyncio.wait_for(self._read(method, path, body), self.options.timeout)
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                if not self.answered:
                    raise ServedError(self._unreachable(err)) from None
                failure, connection = f"nothing answers at {self.url} now ({first_line(err)})", True
            except (asyncio.TimeoutError, httpx.TimeoutException):
                failure = f"no complete answer within {self.options.timeout:g} s (--model-args timeout=…)"
                connection = True
            except httpx.TransportError as err:
                failure = f"{type(err).__name__}: {first_line(err) if str(err) else 'the connection was dropped'}"
                connection = True
            else:
                connection = False
                self.answered = True
                if response.status_code not in RETRIED or not retry:
                    return response
                failure = f"HTTP {response.status_code}: {_message(response)}"
                asked = retry_after(response.headers.get("retry-after"))
                wait = wait if asked is None else asked
            if attempt + 1 < attempts:
                self.retried = True
                self.reconnected |= connection
                await asyncio.sleep(min(wait, MAX_WAIT))
        tries = (f" (after {attempts} attempts in {time.monotonic() - started:.0f} s; --model-args retries=…)"
                 if attempts > 1 else "")
        raise ServedError(f"{self.where(path)}: {failure}{tries}")

    async def _read(self, method: str, path: str, body: Any) -> Response:
        """One attempt: the response to the request, its body read chunk by chunk within `max_response_bytes`."""
        assert self._client is not None
        limit, where = self.options.max_response_bytes, self.where(path)
        async with self._client.stream(method, path, json=body) as response:
            declared = response.headers.get("content-length", "")
            if re.fullmatch(r"[0-9]{1,30}", declared) and int(declared) > limit:
                raise _too_large(where, limit)
            reader = _Body(response.headers.get("content-encoding", ""), limit, where)
            async for chunk in response.aiter_raw():
                reader.add(chunk)
            return Response(response.status_code, response.headers, reader.content())

    def _unreachable(self, err: Exception) -> str:
        """Why nothing answered at the API root: the connection refused or silent, or its TLS refused."""
        reason = first_line(err)
        if "SSL" in reason or "certificate" in reason.lower():
            return (f"{self.url}: the TLS connection failed ({reason}); check http:// or https://, or trust the "
                    "server's certificate with --model-args ca_cert_path=FILE (or verify_certificate=false)")
        return (f"nothing answers at {self.url} ({reason}); start the server there, or give its OpenAI API root as "
                "--model openai:http://HOST:PORT/v1")

    def where(self, path: str) -> str:
        """The URL of `path` (below the API root, or absolute)."""
        return path if path.startswith(("http://", "https://")) else self.url + path

    def read_json(self, response: Response, path: str) -> Any:
        """The JSON body of a successful response to a request to `path` (`parse_json`): a redirect, or an error
        status, is a ServedError (401 and 403 name the API key setting, a redirect where it points), and so is a body
        that is not JSON (cut short, a key given twice, …)."""
        where, status = self.where(path), response.status_code
        if 300 <= status < 400:
            location = (response.headers.get("location") or "no Location")[:200]
            raise ServedError(f"{where}: the server redirects (HTTP {status}) to {location}; redirects are not "
                              "followed: give the server's OpenAI API root as --model openai:…")
        if status >= 400:
            message = f"HTTP {status}: {_message(response)}"
            if status in (401, 403):
                raise ServedError(f"{where}: the server refused the request ({message}); give its API key in an "
                                  "environment variable named by --model-args api_key_env=VAR")
            raise ServedError(f"{where}: {message}")
        try:
            return response.json()
        except json.JSONDecodeError as err:
            if err.msg.startswith("Unterminated") or err.pos >= len(err.doc.rstrip()):
                raise ServedError(f"{where}: the response is not complete JSON (cut short?): "
                                  f"{response.text[-80:]!r}") from None
            raise ServedError(f"{where}: the response is not JSON ({first_line(err)})") from None
        except ValueError as err:
            raise ServedError(f"{where}: the response is not JSON that can be read ({first_line(err)})") from None

    async def json(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON body of a successful request (`read_json`)."""
        return self.read_json(await self.request(method, path, body), path)

    async def optional(self, path: str) -> Any:
        """GET `path`'s JSON (a path below the API root, or an absolute URL), or None where the server has no such
        endpoint (or any error)."""
        try:
            response = await self.request("GET", path, retry=False)
            return response.json() if response.status_code == 200 else None
        except (ServedError, ValueError):
            return None

    @property
    def root(self) -> str:
        """The server's root (the API root without /v1), where vLLM's /version and llama.cpp's /props live."""
        return self.url.removesuffix("/v1")
