"""HTTP to one server, the one place every request goes through (`Transport.request`): JSON requests on one
background event loop, at most `concurrency` in flight; 429, 5xx, timeouts and dropped connections retried with
exponential back-off; every other failure a `ServedError` naming the URL."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from beliefdrift.backend.served.options import ServerOptions
from beliefdrift.backend.served.spec import ServedError
from beliefdrift.errors import UserError, first_line

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")


class _Loop:
    """One event loop on a daemon thread: the engine is synchronous (and may itself run inside a notebook's loop), so
    every batch of requests is submitted here and waited for."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="beliefdrift-served", daemon=True).start()

    def run(self, coroutine: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def _message(response: httpx.Response) -> str:
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


def refusal(response: httpx.Response) -> str:
    """A short "HTTP status: message" of a response that refused a request."""
    return f"HTTP {response.status_code}: {_message(response)[:100]}"


def _httpx() -> Any:
    """The httpx module (the `serve` extra)."""
    try:
        import httpx
    except ImportError:
        raise UserError("a served model needs httpx: pip install 'beliefdrift[serve]'") from None
    return httpx


class Transport:
    """HTTP to the server at the API root `url`: JSON requests with retries and back-off, `concurrency` at a time."""

    def __init__(self, url: str, options: ServerOptions):
        _httpx()
        self.url = url
        self.options = options
        self.headers = options.headers()
        self.retried = False  # a request needed a retry since the flag was last cleared
        self._loop = _Loop()
        self._client: httpx.AsyncClient | None = None
        self._slots: asyncio.Semaphore | None = None

    def run(self, coroutine: Awaitable[T]) -> T:
        """Run `coroutine` on the transport's event loop and wait for its result."""
        return self._loop.run(coroutine)

    def close(self) -> None:
        """Close the connections and stop the event loop's thread."""
        if self._client is not None:
            self.run(self._client.aclose())
        self._loop.close()

    async def request(self, method: str, path: str, body: Any = None, retry: bool = True) -> httpx.Response:
        """The response to one request: 429 and 5xx are retried like timeouts and dropped connections,
        `options.retries` times with back-off (not at all without `retry`, which returns them), and a ServedError once
        the retries are spent."""
        httpx = _httpx()
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self.url, headers=self.headers,
                                             timeout=httpx.Timeout(self.options.timeout),
                                             limits=httpx.Limits(max_connections=self.options.concurrency))
            self._slots = asyncio.Semaphore(self.options.concurrency)
        assert self._slots is not None
        attempts = self.options.retries + 1 if retry else 1
        for attempt in range(attempts):
            wait = self.options.backoff * 2**attempt
            try:
                async with self._slots:
                    response = await self._client.request(method, path, json=body)
            except httpx.TimeoutException:
                failure = f"no answer within {self.options.timeout:g} s (--model-args timeout=…)"
            except httpx.TransportError as err:
                failure = f"{type(err).__name__}: {first_line(err)}"
            else:
                if (response.status_code != 429 and response.status_code < 500) or not retry:
                    return response
                failure = f"HTTP {response.status_code}: {_message(response)}"
                after = response.headers.get("retry-after", "")
                wait = float(after) if after.replace(".", "", 1).isdigit() else wait
            if attempt + 1 < attempts:
                self.retried = True
                await asyncio.sleep(min(wait, 30.0))
        tries = f" (after {attempts} attempts; --model-args retries=…)" if attempts > 1 else ""
        raise ServedError(f"{self.where(path)}: {failure}{tries}")

    def where(self, path: str) -> str:
        """The URL of `path` (below the API root, or absolute)."""
        return path if path.startswith(("http://", "https://")) else self.url + path

    def read_json(self, response: httpx.Response, path: str) -> Any:
        """The JSON body of a successful response to a request to `path`: an error status is a ServedError with the
        server's message (401 and 403 name the API key setting), a body that is not JSON one saying the response was
        cut short."""
        if response.status_code >= 400:
            status = f"HTTP {response.status_code}: {_message(response)}"
            if response.status_code in (401, 403):
                raise ServedError(f"{self.where(path)}: the server refused the request ({status}); give its API key "
                                  "in an environment variable named by --model-args api_key_env=VAR")
            raise ServedError(f"{self.where(path)}: {status}")
        try:
            return response.json()
        except ValueError:
            raise ServedError(f"{self.where(path)}: the response is not complete JSON (cut short?): "
                              f"{response.text[-80:]!r}") from None

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
