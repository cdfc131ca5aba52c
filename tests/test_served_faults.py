"""A broken or hostile server against the served client's HTTP side (backend/served/transport.py; issues 49 and 51):
each fault comes from a double of a server (tests/servers.py: a `Proxy` that misbehaves, `MadeUpModel`), and each
ends in one line naming the setting to change, within the request's deadline and without reading more than
`max_response_bytes`; nothing but a whole, valid answer is taken as one. lm-eval's `--model_args` names, custom headers
and TLS settings are read; a run through a server that turns faulty mid-run stores only whole questions and resumes
to the numbers of an uninterrupted run."""

from __future__ import annotations

import email.utils
import json
import re
import shutil
import ssl
import subprocess
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from servers import (
    LoopbackServer,
    MadeUpModel,
    Proxy,
    Sends,
    compressed,
    dropped,
    endless,
    free_port,
    gzip_bomb,
    redirected,
    trickled,
)

from beliefdrift.backend.served import ServedError, ServerOptions
from beliefdrift.cli.main import main
from beliefdrift.errors import UserError

pytest.importorskip("httpx")

from beliefdrift.backend.served.model import served_options  # noqa: E402 (needs httpx)
from beliefdrift.backend.served.spec import base_url  # noqa: E402
from beliefdrift.backend.served.transport import Transport, retry_after  # noqa: E402

MODELS = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()


def ask(url: str, path: str = "/models", method: str = "GET", body: Any = None, **options: Any) -> Any:
    """The JSON answer to one request through a fresh `Transport` (no retries unless asked)."""
    transport = Transport(url, ServerOptions(**{"retries": 0, **options}))
    try:
        return transport.run(transport.json(method, path, body))
    finally:
        transport.close()


def answered(action: Any, path: str = "/models", method: str = "GET", body: Any = None, **options: Any) -> Any:
    """`ask` a server that answers every request with `action` (a `Proxy` of nothing)."""
    with Proxy(None, always(action)) as url:
        return ask(url, path, method, body, **options)


def always(action: Any) -> Callable[[str, str, int], Any]:
    """A fault that answers every request with `action`."""
    return lambda method, path, count: action


def error_line(capsys: pytest.CaptureFixture[str], command: str = "evaluate") -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"beliefdrift {command}: error: "), err
    return err


# ---------------------------------------------------------------------------------------------- time and size


def test_a_trickled_body_ends_at_the_deadline():
    """One byte every 50 ms (each read quick, the whole 5 s): `timeout` bounds the whole request, not each read."""
    with Proxy(None, always(trickled(0.05, MODELS.ljust(100)))) as url:
        started = time.monotonic()
        with pytest.raises(ServedError, match=r"no complete answer within 1 s \(--model-args timeout=…\)"):
            ask(url, timeout=1)
        assert time.monotonic() - started < 3


def test_an_endless_body_is_cut_at_the_size_limit():
    """A chunked body that never ends is read up to `max_response_bytes`, then refused by name."""
    with pytest.raises(ServedError, match=r"larger than 1048576 bytes \(--model-args max_response_bytes=…\)"):
        answered(endless(), max_response_bytes=1 << 20, timeout=30)


def test_a_compression_bomb_is_cut_at_the_size_limit():
    """64 MiB of zeros gzip-compressed into 64 kB: decompressed no further than `max_response_bytes` (the memory
    allocated stays near that); a body whose declared size is past the limit is refused before it is read."""
    bomb = gzip_bomb(64 << 20)
    assert len(bomb) < 100_000
    with Proxy(None, always(compressed(bomb))) as url:
        tracemalloc.start()
        try:
            with pytest.raises(ServedError, match=r"larger than 1048576 bytes \(--model-args max_response_bytes"):
                ask(url, max_response_bytes=1 << 20)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 8 << 20
    with Proxy(None, always((200, bytes(2 << 20)))) as url, pytest.raises(ServedError, match="larger than 1048576"):
        ask(url, max_response_bytes=1 << 20)


def test_a_corrupt_gzip_body_is_one_line():
    with Proxy(None, always(compressed(b"this is not gzip"))) as url, pytest.raises(
            ServedError, match="the response's gzip body is corrupt"):
        ask(url)
    with Proxy(None, always(compressed(gzip_bomb(1000)[:20]))) as url, pytest.raises(
            ServedError, match="the response's gzip body is cut short"):
        ask(url)
    with Proxy(None, always(compressed(b"{}", "br"))) as url, pytest.raises(
            ServedError, match="compressed with 'br'; beliefdrift reads gzip or deflate"):
        ask(url)


# ---------------------------------------------------------------------------------------------- what is an answer


def test_a_redirect_is_not_an_answer():
    """A 302 whose body is a completion (or empty) names where it points; it is not followed, nor read."""
    completion = json.dumps({"choices": [{"text": "A", "logprobs": {"top_logprobs": [{"A": -0.1}]}}]}).encode()

    with pytest.raises(ServedError, match=r"/v1/completions: the server redirects \(HTTP 302\) to "
                                          r"http://elsewhere.example/v1/completions; redirects are not followed"):
        answered(redirected("http://elsewhere.example/v1/completions"), "/completions", "POST", {"prompt": "x"})
    with pytest.raises(ServedError, match="redirects"):
        answered(Sends(lambda request, status, data: LoopbackServer.reply(request, 302, completion, Location="/v2")),
                 "/completions", "POST", {})


@pytest.mark.parametrize("body, expected", [
    (b'{"data": [{"id": "a", "id": "b"}]}', "the key 'id' is given twice in one object"),
    (b"[" * 100_000, "nested deeper than Python reads"),
    (b'{"data": [' + b"1" * 5000 + b"]}", "Exceeds the limit"),
    (b'{"data": [{"id": "a"}]', r"not complete JSON \(cut short\?\)"),
    (b'{"data": nope}', r"not JSON \(Expecting value"),
])
def test_a_body_json_cannot_read_is_one_line(body, expected):
    """Duplicate keys (which json would resolve silently, keeping the last), nesting past Python's recursion, an
    integer past Python's digits, a body cut short, text that is not JSON: each one line saying which."""
    with Proxy(None, always((200, body))) as url, pytest.raises(ServedError, match=expected):
        ask(url)


# ---------------------------------------------------------------------------------------------- reaching the server


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/v1", "http://[::1/v1", "http://[::1]x/v1",
                                 "http://127.0.0.1:0/v1", "ftp://127.0.0.1/v1"])
def test_a_url_no_server_can_have_is_one_line(url, tmp_path, capsys):
    assert main(["-q", "evaluate", "--model", f"openai:{url}", "-n", "1", "--out", str(tmp_path / "out")]) == 2
    assert "expected openai:http://HOST:PORT/v1" in error_line(capsys)


def test_nothing_listening_fails_fast(tmp_path, capsys):
    """Connection refused by a server that never answered: one line within seconds naming the URL, no retries."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    assert main(["-q", "evaluate", "--model", f"openai:{url}", "-n", "1", "--out", str(tmp_path / "out")]) == 2
    assert time.monotonic() - started < 5
    err = error_line(capsys)
    assert f"nothing answers at {url} (" in err and "(after" not in err


def test_only_what_can_pass_is_retried():
    """429, 500 and 502–504 are retried, a dropped connection too (and the transport says so: `retried`); 400, 404
    and 501 are returned at once; once the retries are spent the line says how many attempts, over how long."""
    def fault(method: str, path: str, count: int) -> Any:
        return {1: 503, 2: dropped(), 3: 429}.get(count, (200, MODELS))

    with Proxy(None, fault) as url:
        transport = Transport(url, ServerOptions(retries=3, backoff=0.01))
        try:
            assert transport.run(transport.json("GET", "/models"))["data"] == [{"id": "m"}]
            assert transport.retried
        finally:
            transport.close()
    for status in (400, 404, 501):
        with Proxy(None, always(status)) as url, pytest.raises(ServedError, match=f"HTTP {status}: injected"):
            ask(url, retries=3, backoff=0.01)
    with Proxy(None, always(500)) as url, pytest.raises(
            ServedError, match=r"HTTP 500: injected 500 \(after 3 attempts in 0 s; --model-args retries=…\)"):
        ask(url, retries=2, backoff=0.01)


def test_retry_after_is_read_as_rfc_9110_says():
    """Delta-seconds or an HTTP date; anything else (`²`, which str.isdigit accepts, a fraction, a sign) is ignored for
    the default back-off, and a 429 carrying it is retried."""
    assert retry_after("3") == 3.0 and retry_after(" 12 ") == 12.0
    for ignored in ("²", "1.5", "-1", "", None, "soon", "9" * 5000):
        assert retry_after(ignored) is None
    later = email.utils.formatdate(time.time() + 60, usegmt=True)
    assert 55 < retry_after(later) <= 60
    assert retry_after(email.utils.formatdate(time.time() - 60, usegmt=True)) == 0.0

    def fault(method: str, path: str, count: int) -> Any:
        if count == 1:
            return Sends(lambda request, status, data: LoopbackServer.reply(request, 429, b"{}", Retry_After="²"))
        return 200, MODELS

    with Proxy(None, fault) as url:
        assert ask(url, retries=1, backoff=0.01)["data"] == [{"id": "m"}]


# ---------------------------------------------------------------------------------------------- keys and headers


def test_a_key_in_the_url_query_travels_with_every_request_and_is_never_shown(monkeypatch):
    """`openai:http://host/v1?api_key=KEY`: the query is sent after each path (not joined into it), and the key is
    in no error; an API key from `api_key_env` that an HTTP header cannot carry is one line without its value."""
    key = "sk-query-0123456789"
    proxy = Proxy(None, lambda method, path, count: (200, MODELS) if path == "/v1/models" else 404)
    with proxy as url:
        ask(f"{url}?api_key={key}")
        with pytest.raises(ServedError) as refused:
            ask(f"{url}?api_key={key}", "/nowhere")
    assert [path for _, path, _ in proxy.requests] == [f"/v1/models?api_key={key}", f"/v1/nowhere?api_key={key}"]
    assert key not in str(refused.value) and "HTTP 404" in str(refused.value)
    monkeypatch.setenv("BELIEFDRIFT_TEST_KEY", "sk-ключ")
    with pytest.raises(UserError, match="api_key_env=BELIEFDRIFT_TEST_KEY: BELIEFDRIFT_TEST_KEY holds a non-ASCII"):
        ask("http://127.0.0.1:9/v1", api_key_env="BELIEFDRIFT_TEST_KEY")


def test_lm_eval_model_args_are_read():
    """lm-eval's `num_concurrent`, `max_retries` (attempts in all), `tokenizer_backend`, `header`, `verify_certificate`
    and `ca_cert_path`; a name given twice, a backend other than the model's tokenizer, a header HTTP cannot carry:
    one line each."""
    options = ServerOptions.from_args({"num_concurrent": 3, "max_retries": 4, "tokenizer_backend": "huggingface",
                                       "header.X-Team": "blue", "verify_certificate": False})
    assert options == ServerOptions(concurrency=3, retries=3, header=(("X-Team", "blue"),), verify_certificate=False)
    assert ServerOptions.from_args({"header": {"X-A": "1", "X-B": 2}}).header == (("X-A", "1"), ("X-B", "2"))
    refused = {"concurrency=2,num_concurrent=3": "concurrency, num_concurrent: the same option (concurrency) given "
                                                 "twice",
               "tokenizer_backend=tiktoken": "expected one of huggingface, remote",
               "max_retries=0": "max_retries=0: expected an integer ≥ 1",
               "verify_certificate=1": "verify_certificate=1: expected true or false",
               "header.X Y=1": "not an HTTP header name", "header=x": "expected header.NAME=VALUE",
               "timeout=.inf": "timeout=inf: expected a number ≥ 1"}
    from beliefdrift.config.options import parse_model_args

    for args, message in refused.items():
        with pytest.raises(UserError, match=re.escape(message)):
            ServerOptions.from_args(parse_model_args(args))
    with pytest.raises(UserError, match="its value is not one line of printable ASCII"):
        ServerOptions.from_args({"header.X-Key": "a\r\nX-Injected: 1"})
    with pytest.raises(ServedError, match="tokenizer_backend=remote: tokenizing on the server is not implemented: .*"
                       "chat template, end-of-sequence ids and vocabulary size; .*tokenizer="):
        served_options("openai:http://h/v1", {"tokenizer_backend": "remote"})


def test_the_serving_page_lists_every_setting():
    """docs/serving.md's table of `--model-args` names every option of a served model (`header` as `header.NAME`) and
    every lm-eval alias, each in its row."""
    from dataclasses import fields

    from beliefdrift.backend.served.options import ALIASES, HEADER_PREFIX

    page = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in page.splitlines() if line.startswith("| `")}
    named = {name.strip("` ") for key in rows for name in key.split(",")}
    options = {f.name for f in fields(ServerOptions)} - {"header"} | {f"{HEADER_PREFIX}NAME"}
    assert options <= named, options - named
    for alias, ours in ALIASES.items():
        assert any(f"`{alias}`" in line for key, line in rows.items() if f"`{ours}`" in key), alias


def test_custom_headers_are_sent_and_a_secret_one_is_never_shown():
    secret = "sk-header-0123456789"
    proxy = Proxy(None, always(401))
    with proxy as url, pytest.raises(ServedError) as refused:
        ask(url, header=(("X-Team", "blue"), ("X-Api-Key", secret)))
    sent = proxy.requests[0][2]
    assert sent["X-Team"] == "blue" and sent["X-Api-Key"] == secret
    assert "HTTP 401" in str(refused.value)
    from beliefdrift.credentials import redact

    ServerOptions.from_args({"header.X-Api-Key": secret})
    assert redact(f"echo {secret}") == "echo ***"
    with pytest.raises(UserError, match="api_key_env=BELIEFDRIFT_TEST_KEY and header.Authorization: give the key one"):
        ServerOptions(api_key_env="BELIEFDRIFT_TEST_KEY", header=(("Authorization", "Bearer x"),)).headers()


def test_the_full_endpoint_is_a_base_url():
    """lm-eval's `base_url` names the endpoint: `…/v1/completions` is the API root …/v1, `…/v1/chat/completions`
    also says api=chat (another `api` is refused); a trailing / and the query are kept apart."""
    assert base_url("openai:http://h:8/v1/completions") == "http://h:8/v1"
    assert base_url("openai:http://h:8/v1/chat/completions/") == "http://h:8/v1"
    assert base_url("openai:http://h:8/v1/?api_key=K") == "http://h:8/v1?api_key=K"
    assert served_options("openai:http://h/v1/chat/completions", {}).api == "chat"
    assert served_options("openai:http://h/v1/completions", {}).api == "completions"
    with pytest.raises(ServedError, match="names the chat endpoint and --model-args api=completions another"):
        served_options("openai:http://h/v1/chat/completions", {"api": "completions"})


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def test_tls_certificates_are_checked_as_asked(certificate, tmp_path):
    """An https server with a self-signed certificate: refused in one line naming the settings; trusted with
    `ca_cert_path=` (lm-eval's name) or not checked with `verify_certificate=false`."""
    cert, key = certificate
    server = Proxy(None, always((200, MODELS)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.http.socket = context.wrap_socket(server.http.socket, server_side=True)
    with server as url:
        url = url.replace("http://", "https://")
        with pytest.raises(ServedError, match=r"the TLS connection failed .*ca_cert_path=FILE \(or "
                                              r"verify_certificate=false\)"):
            ask(url)
        assert ask(url, ca_cert_path=str(cert))["data"] == [{"id": "m"}]
        assert ask(url, verify_certificate=False)["data"] == [{"id": "m"}]
    (tmp_path / "not.pem").write_text("nothing")
    for path in (tmp_path / "not.pem", tmp_path / "missing.pem"):
        with pytest.raises(ServedError, match=f"ca_cert_path={path}: .*expected a PEM file"):
            ask(url, ca_cert_path=str(path))


# ---------------------------------------------------------------------------------------------- whole runs


@pytest.fixture(scope="module")
def made_up(tiny_model_dir: Path) -> Iterator[tuple[MadeUpModel, str]]:
    """A made-up model served under the tiny model's directory (so its tokenizer is the tiny model's), and its API
    root."""
    model = MadeUpModel(str(tiny_model_dir), vocab=256)
    with model as url:
        yield model, url


def run_args(url: str, out: Path, template: str, model_args: str = "retries=1,backoff=0.01,timeout=5") -> list[str]:
    """An evaluation of two questions, one per batch (so the first is stored before the second is asked)."""
    return ["-q", "evaluate", "--model", f"openai:{url}", "--model-args", model_args, "-n", "2", "-J", "2", "-N", "3",
            "--methods", "direct", "ppr", "--template", template, "--bootstrap", "10", "--batch-questions", "1",
            "--out", str(out)]


def stored(out: Path) -> dict[tuple[str, str], tuple]:
    from beliefdrift.runs.store import STORE_FILE, RunStore

    if not (out / STORE_FILE).exists():
        return {}
    with RunStore.open(out / STORE_FILE, read_only=True) as store:
        return {(r.question_id, r.method): (r.probs.tolist(), None if r.thetas is None else r.thetas.tolist(),
                                            None if r.answers is None else r.answers.tolist(), r.valid_mass.tolist())
                for r in store.rows()}


@pytest.fixture(scope="module")
def reference(made_up: tuple[MadeUpModel, str], history_template: str,
              tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """An uninterrupted evaluation through the made-up model, and how many completions it asked for (the last few
    of them are the second question's)."""
    out = tmp_path_factory.mktemp("made-up") / "reference"
    proxy = Proxy(made_up[1], always(None))
    with proxy as url:
        assert main(run_args(url, out, history_template)) == 0
    assert len(stored(out)) == 4
    return out, proxy.counts["/v1/completions"]


FAULTS: dict[str, tuple[Any, str]] = {
    "trickled": (trickled(0.2), r"no complete answer within 1 s \(--model-args timeout=…\) \(after 2 attempts"),
    "endless": (endless(), r"larger than 100000 bytes \(--model-args max_response_bytes=…\)"),
    "gzip bomb": (compressed(gzip_bomb(10 << 20)), r"larger than 100000 bytes"),
    "redirect": (redirected("http://elsewhere.example/v1/completions"), "redirects are not followed"),
    "duplicate keys": (lambda status, data: (status, data.replace(b'"model": ', b'"model": "x", "model": ')),
                       "the key 'model' is given twice"),
    "dropped": (dropped(), r"RemoteProtocolError: Server disconnected without sending a response\. \(after 2"),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_a_server_turning_faulty_mid_run_stores_whole_questions_and_resumes(fault, made_up, reference,
                                                                             history_template, tmp_path, capsys):
    """From the middle of the run on, every completion misbehaves: the run ends with one line naming the setting,
    within its deadline (2 attempts of 1 s here), keeps only whole questions with the numbers of an uninterrupted
    run, and once the server is healthy resumes to exactly those numbers."""
    (action, message), (expected, asked) = FAULTS[fault], reference
    out = tmp_path / "faulty"
    model_args = "retries=1,backoff=0.01,timeout=1,max_response_bytes=100000"

    def faulty(method: str, path: str, count: int) -> Any:
        return action if path == "/v1/completions" and count > asked - 3 else None

    proxy = Proxy(made_up[1], faulty)
    with proxy as url:
        started = time.monotonic()
        assert main(run_args(url, out, history_template, model_args)) == 2
        assert time.monotonic() - started < 15
        assert re.search(message, error_line(capsys))
        partial = stored(out)
        assert partial and len(partial) < 4 and all(stored(expected)[key] == row for key, row in partial.items())
        proxy.fault = always(None)  # healthy again
        assert main(run_args(url, out, history_template)) == 0
    assert stored(out) == stored(expected)


def test_a_model_swapped_under_the_same_name_is_refused(made_up, reference, history_template, tmp_path, capsys):
    """The server drops one connection mid-run and comes back serving another model under the same name (same
    /v1/models entry): the probe asked at connect, asked again after the retry, answers otherwise, so the run stops
    with one line and keeps only what came before the swap."""
    (expected, asked), (model, upstream) = reference, made_up
    out = tmp_path / "swapped"

    def swap(method: str, path: str, count: int) -> Any:
        if path == "/v1/completions" and count == asked - 3:
            model.seed = 1
            return dropped()
        return None

    try:
        with Proxy(upstream, swap) as url:
            assert main(run_args(url, out, history_template)) == 2
    finally:
        model.seed = 0
    err = error_line(capsys)
    assert "answers the probe" in err and "the served model changed during the run" in err
    partial = stored(out)
    assert len(partial) < 4 and all(stored(expected)[key] == row for key, row in partial.items())


@pytest.mark.parametrize("fault, probes", [(503, 0), (429, 0), (dropped(), 1), (trickled(0.5), 1)])
def test_the_probe_is_asked_again_after_a_reconnect_only(fault, probes, made_up, reference, history_template,
                                                        tmp_path):
    """One completion failing mid-run: after a 503 or 429 (the server alive) the run checks /v1/models only; after a
    dropped or timed-out connection (perhaps a restarted server) it asks the probe again too. Either way it stores
    the uninterrupted run's numbers (the made-up model's do not depend on what it computed before)."""
    expected, asked = reference
    proxy = Proxy(made_up[1], lambda method, path, count: fault if path == "/v1/completions" and count == 5 else None)
    with proxy as url:
        assert main(run_args(url, tmp_path / "out", history_template, "retries=1,backoff=0.01,timeout=1")) == 0
    assert proxy.counts["/v1/completions"] == asked + 1 + probes and proxy.counts["/v1/models"] == 2
    assert stored(tmp_path / "out") == stored(expected)


def test_a_full_endpoint_url_runs(made_up, reference, history_template, tmp_path):
    """`--model openai:…/v1/completions` (lm-eval's base_url) runs, and names the same run as `…/v1`."""
    from beliefdrift.runs.store import STORE_FILE, RunStore

    out = tmp_path / "endpoint"
    with Proxy(made_up[1], always(None)) as url:
        assert main(run_args(f"{url}/completions", out, history_template)) == 0
    assert stored(out) == stored(reference[0])
    with RunStore.open(out / STORE_FILE, read_only=True) as store:
        assert store.config()["model"] == f"openai:{url}"
