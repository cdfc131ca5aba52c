"""Models behind an OpenAI-compatible server (`--model openai:BASE_URL`, backend/served.py), tested against real
llama.cpp servers (tests/servers.py: llama-cpp-python's, and llama.cpp's own llama-server where `make
setup-llama-server` built it; each started once for the session on a free loopback port with the default model's GGUF
file; the tests that need one skip without it) and, for faults, a small proxy in front of llama-cpp-python's.

References: θ from either server equals θ from llama.cpp in process (same weights, same token ids) to 1e-6; every
answer and seed is drawn on our side, so a run through the server resumes, after any fault, to the same numbers (on
llama-server, where its numbers do not depend on its history: `REPRODUCIBLE`).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
import torch
from servers import (
    HAS_LLAMA_CPP,
    NO_LLAMA_CPP,
    SERVERS,
    LoopbackServer,
    Proxy,
    default_gguf,
    forward,
    free_port,
    llama_cpp_python_server,
    llama_cpp_server,
    skip_without_llama_server,
)

from beliefdrift.backend.served import ServerOptions, nucleus_logits
from beliefdrift.cli.main import main
from beliefdrift.cot.generation import nucleus_sampler
from beliefdrift.engine.resampling import make_generator
from beliefdrift.errors import UserError

needs_server = pytest.mark.skipif(not HAS_LLAMA_CPP, reason=NO_LLAMA_CPP)


# ---------------------------------------------------------------------------------------------- no server needed


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0, 1.6])
@pytest.mark.parametrize("top_p", [0.8, 0.95, 1.0])
def test_nucleus_logits_draw_what_the_full_logits_draw(temperature, top_p):
    """From the top L log-probabilities alone, the nucleus sampler keeps the same tokens with the same weights as on
    the full logits whenever `nucleus_logits` says they determine it (the same generator then draws the same
    tokens), and says so for L = vocabulary always, and for some smaller L."""
    vocab, rows = 300, 64
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 3
    banned = [5, 17]
    full = logits.clone()
    full[:, banned] = float("-inf")
    expected = nucleus_sampler(temperature, top_p, make_generator(0, "draws"))(full)
    log_probs = torch.log_softmax(logits.double(), -1)
    determined = {}
    for size in (4, 30, vocab):
        top = log_probs.topk(size, -1)
        made = [nucleus_logits(i.tolist(), v.tolist(), vocab, temperature, top_p, banned)
                for i, v in zip(top.indices, top.values, strict=True)]
        determined[size] = sum(m is not None for m in made)
        if determined[size] < rows:
            continue
        surrogate = torch.stack(made)
        surrogate[:, banned] = float("-inf")
        drawn = nucleus_sampler(temperature, top_p, make_generator(0, "draws"))(surrogate)
        assert torch.equal(drawn, expected)
    assert determined[vocab] == rows
    if temperature == 0:
        assert determined[4] == rows  # greedy needs the top token only
    if top_p == 1.0 and temperature > 0:
        assert determined[30] == 0  # the whole vocabulary is the nucleus
    # each row on its own: where determined, its draw matches the full logits' draw for every uniform
    top = log_probs.topk(30, -1)
    checked = 0
    for row in range(rows):
        made = nucleus_logits(top.indices[row].tolist(), top.values[row].tolist(), vocab, temperature, top_p, banned)
        if made is None:
            continue
        checked += 1
        made[banned] = float("-inf")
        for seed in range(20):
            mine = nucleus_sampler(temperature, top_p, make_generator(seed, row))(made[None])
            theirs = nucleus_sampler(temperature, top_p, make_generator(seed, row))(full[row][None])
            assert mine == theirs
    if temperature == 0 or (temperature, top_p) in ((0.7, 0.8), (0.7, 0.95), (1.0, 0.8)):
        assert checked > 0  # (a flat tail at T > 1, or top_p = 1, needs the whole vocabulary)


def test_server_options_are_checked():
    assert ServerOptions.from_args({"concurrency": 4, "timeout": 2.5, "served_model": "m"}) == ServerOptions(
        served_model="m", concurrency=4, timeout=2.5)
    with pytest.raises(UserError, match="not an option of a served model"):
        ServerOptions.from_args({"low_cpu_mem_usage": True})
    with pytest.raises(UserError, match="concurrency=0: expected an integer ≥ 1"):
        ServerOptions.from_args({"concurrency": 0})
    with pytest.raises(UserError, match="retries=x"):
        ServerOptions.from_args({"retries": "x"})
    with pytest.raises(UserError, match="api=chats: expected one of completions, chat"):
        ServerOptions.from_args({"api": "chats"})


def test_train_refuses_a_served_model(capsys):
    assert main(["train", "--model", "openai:http://127.0.0.1:9/v1", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train needs the model's gradients" in err


# ---------------------------------------------------------------------------------------------- a real server


@pytest.fixture(scope="session")
def server() -> Iterator[str]:
    """One llama-cpp-python server for the session: its OpenAI API root."""
    if not HAS_LLAMA_CPP:
        pytest.skip(NO_LLAMA_CPP)
    with llama_cpp_python_server(free_port()) as url:
        yield url


@pytest.fixture(scope="session")
def cpp_server() -> Iterator[str]:
    """One llama.cpp llama-server for the session: its OpenAI API root."""
    skip_without_llama_server()
    with llama_cpp_server(free_port()) as url:
        yield url


#: Requests made quickly: few retries with short back-off (the faults below are injected on purpose).
QUICK = "retries=3,backoff=0.02,concurrency=4"


def served(url: str, model_args: str = QUICK) -> list[str]:
    return ["--model", f"openai:{url}", "--model-args", model_args]


def evaluate_args(url: str, out: Path, template: str, model_args: str = QUICK, n: int = 2) -> list[str]:
    """One question per batch (a served model's default is 16): llama.cpp's arithmetic depends on how it batches a
    context's tokens (measured on the default model: θ up to 0.05 apart between one and 16 questions per batch,
    docs/serving.md), so the runs compared for equality share one batching, and a killed run has a question stored
    before the last."""
    return ["-q", "evaluate", *served(url, model_args), "-n", str(n), "-J", "2", "-N", "3", "--methods", "direct",
            "ppr", "ppr-seed1", "--template", template, "--bootstrap", "10", "--batch-questions", "1",
            "--out", str(out)]


def stored_results(out: Path) -> dict[tuple[str, str], tuple]:
    """Every stored result row's numbers by (question, method)."""
    from beliefdrift.runs.store import STORE_FILE, RunStore

    with RunStore.open(out / STORE_FILE, read_only=True) as store:
        rows = store.rows()
        return {(r.question_id, r.method): (r.probs.tolist(), None if r.thetas is None else r.thetas.tolist(),
                                            None if r.answers is None else r.answers.tolist(),
                                            None if r.seeds is None else r.seeds.tolist(), r.valid_mass.tolist())
                for r in rows}


def stored_identity(out: Path) -> dict:
    from beliefdrift.runs.store import STORE_FILE, RunStore

    with RunStore.open(out / STORE_FILE, read_only=True) as store:
        return store.config()


@pytest.fixture(scope="session")
def reference(server: str, history_template: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An evaluation through the session's server, uninterrupted: the numbers every faulty run must end up with."""
    out = tmp_path_factory.mktemp("served") / "reference"
    assert main(evaluate_args(server, out, history_template)) == 0
    return out


#: What makes each server's numbers independent of what it computed before, so that a run resumed on a restarted server
#: can store what an uninterrupted one stored: (server arguments, --model-args added). llama-server's arithmetic
#: depends on its history in two ways that the client's adaptive top log-probabilities reach (it asks again, for 8 times
#: as many, when an option is missing, and keeps the larger count for the rest of the run, so a resumed run asks
#: otherwise): a context asked again re-evaluates its last token alone from the prompt cache, which rounds otherwise
#: (two evaluations through fresh servers, one asking 160 from the start, stored θ up to 1.2e-2 apart), and its softmax
#: sums the vocabulary in float32 in an order that depends on how many top log-probabilities are asked (θ 6e-8 apart
#: without the cache). So: no prompt cache, and one count for every request.
REPRODUCIBLE = {"llama-cpp-python": ((), ""),
                "llama-server": (("--no-cache-prompt",), ",logprobs=160,max_logprobs=160")}


@pytest.fixture(scope="session")
def cpp_reference(history_template: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same evaluation through a llama-server as `REPRODUCIBLE` has it."""
    skip_without_llama_server()
    args, model_args = REPRODUCIBLE["llama-server"]
    out = tmp_path_factory.mktemp("served") / "cpp-reference"
    with llama_cpp_server(free_port(), *args) as url:
        assert main(evaluate_args(url, out, history_template, QUICK + model_args)) == 0
    return out


def completions(path: str) -> bool:
    return path.endswith("/completions")


def one_line_error(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("beliefdrift evaluate: error: "), err
    for word in words:
        assert word in err, err
    return err


def nothing_stored(out: Path) -> bool:
    from beliefdrift.runs.store import STORE_FILE

    return not (out / STORE_FILE).exists() or not stored_results(out)


#: The session fixtures of each server (`servers.SERVERS`): its API root, and an uninterrupted evaluation through it.
FIXTURES = {"llama-cpp-python": ("server", "reference"), "llama-server": ("cpp_server", "cpp_reference")}
#: Whether a server's valid_mass is held to its value relative to the vocabulary's float32 rounding: llama-server
#: normalises its probabilities with a serial float32 sum over the vocabulary (`get_token_probabilities` in
#: tools/server/server-common.cpp), whose relative error is at most (V − 1)·ε₃₂ (2.9e-3 for 49,152 tokens; 2.4e-4
#: measured, and the server's mass equal to that serial sum's to the last bit); llama-cpp-python's is numpy's
#: log-softmax, as in process. θ is a ratio of the options' probabilities, so the normaliser cancels there.
SERIAL_SOFTMAX = {"llama-cpp-python": False, "llama-server": True}


@needs_server
@pytest.mark.parametrize("name", SERVERS)
def test_theta_from_the_server_is_llama_cpp_in_process(name, request, history_template, question):
    """Direct query and every step of PPR paths (prompt, seeds and sampled answers as token ids): θ and valid_mass
    from the server equal softmax over the options of llama.cpp's own log-softmax on the same ids, in process (the
    same llama.cpp: llama-server is built from the copy llama-cpp-python vendors)."""
    from llama_cpp import Llama

    from beliefdrift.backend import load_model
    from beliefdrift.engine.resampling import QuestionRunner, direct_tokens

    url = request.getfixturevalue(FIXTURES[name][0])
    lm = load_model(f"openai:{url}", model_args={"concurrency": 4})
    runner = QuestionRunner(lm, question, history_template)
    trajectories = runner.ppr(2, 3, make_generator(0, "served"), num_seeds=1)
    local = Llama(model_path=str(default_gguf()), logits_all=True, n_ctx=2048, n_threads=1, n_threads_batch=1,
                  verbose=False)

    def thetas(ids: list[int], labels: tuple[int, ...], at: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """θ [len(at), K] and valid_mass after ids[:i] for each i of `at`: one pass of llama.cpp over `ids`."""
        local.reset()
        local.eval(ids)
        log_probs = np.stack([Llama.logits_to_logprobs(local.scores[i - 1]) for i in at])[:, list(labels)]
        mass = np.exp(log_probs.astype(np.float64)).sum(-1)
        return np.exp(log_probs.astype(np.float64)) / mass[:, None], mass

    tokens = direct_tokens(lm, question)
    served = [(runner.direct.probs.numpy()[None], runner.direct.valid_mass.numpy().reshape(1))]
    in_process = [thetas(list(tokens.prompt_ids), tokens.label_ids, [len(tokens.prompt_ids)])]
    ppr = runner.ppr_prompt.tokens
    for path in range(2):
        answers = [*trajectories.seeds[path].tolist(), *trajectories.answers[path].tolist()]
        ids = list(ppr.prompt_ids) + [t for a in answers for t in ppr.answer_ids(a)]
        after = [len(ppr.prompt_ids) + (1 + step) * ppr.step_length for step in range(4)]  # the seed, then 3 answers
        served.append((trajectories.thetas[path].numpy(), trajectories.valid_mass[path].numpy()))
        in_process.append(thetas(ids, ppr.label_ids, after))
    mass_rtol = (len(lm.tokenizer) - 1) * float(np.finfo(np.float32).eps) if SERIAL_SOFTMAX[name] else 0.0
    for (theta, mass), (theta_here, mass_here) in zip(served, in_process, strict=True):
        np.testing.assert_allclose(theta, theta_here, atol=1e-6, rtol=0)
        np.testing.assert_allclose(mass, mass_here, atol=1e-6, rtol=mass_rtol)


@needs_server
@pytest.mark.parametrize("name", SERVERS)
def test_the_probe_is_answered_alike_after_other_prompts(name, request):
    """The probe the client asks again after a reconnect (`endpoint.PROBE_TOLERANCE`): its top log-probabilities,
    asked after other prompts (one sharing its token), equal those asked first, to the last digit, on both servers."""
    from beliefdrift.backend.served.endpoint import PROBE_LOGPROBS

    url = request.getfixturevalue(FIXTURES[name][0])

    def top(prompt: str) -> dict[str, float]:
        body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": PROBE_LOGPROBS}).encode()
        logprobs = json.loads(forward(url + "/completions", "POST", body)[1])["choices"][0]["logprobs"]
        if "content" in logprobs:  # llama-server's
            return {entry["token"]: entry["logprob"] for entry in logprobs["content"][0]["top_logprobs"]}
        return logprobs["top_logprobs"][0]

    first = top("Hello")
    for other in ("The capital of France is", "Hello world, the sky is blue."):
        top(other)
        assert top("Hello") == first


@needs_server
def test_commands_run_through_the_server(server, reference, history_template, tmp_path):
    """evaluate, drift and emd through the server store their units with the server in the run identity (never the
    request settings), and a second start finds everything done and changes nothing."""
    identity = stored_identity(reference)
    assert identity["model"] == f"openai:{server}" and identity["served_model"] == str(default_gguf())
    assert identity["server"]["id"] == str(default_gguf()) and "dtype" not in identity
    assert "model_args" not in identity and "concurrency" not in json.dumps(identity)
    first = stored_results(reference)
    assert len(first) == 6 and all(len(v[0]) >= 2 for v in first.values())
    assert main(evaluate_args(server, reference, history_template, "concurrency=2")) == 0  # operational only
    assert stored_results(reference) == first
    base = [*served(server), "-n", "1", "-J", "2", "--methods", "ppr", "--template", history_template]
    drift, emd = tmp_path / "drift", tmp_path / "emd"
    assert main(["-q", "drift", *base, "-N", "3", "--plot-questions", "0", "--out", str(drift)]) == 0
    assert main(["-q", "emd", *base, "-N", "2", "-K", "2", "--prefix-lengths", "0", "--burn-in", "1", "-k", "2",
                 "--noise-floor-replicates", "0", "--out", str(emd)]) == 0
    for out in (drift, emd):
        assert stored_identity(out)["served_model"] == str(default_gguf())
        assert (out / "records.csv").is_file()


@needs_server
def test_injected_429_and_500_change_no_number(server, reference, history_template, tmp_path):
    """Every third completion answered 429 and every fifth 500 (retried with back-off, the model checked again after
    each): the run stores the numbers of the uninterrupted one."""
    def fault(method: str, path: str, count: int) -> int | None:
        return (429 if count % 3 == 0 else 500 if count % 5 == 0 else None) if completions(path) else None

    with Proxy(server, fault) as url:
        out = tmp_path / "faulty"
        assert main(evaluate_args(url, out, history_template, "retries=4,backoff=0.01,concurrency=4")) == 0
    assert stored_results(out) == stored_results(reference)


@needs_server
@pytest.mark.parametrize("name", SERVERS)
def test_a_killed_server_resumes_to_the_same_numbers(name, request, history_template, tmp_path, capsys):
    """The server killed while a run is under way: the run ends with one line (exit 2) keeping the question it
    finished; against a restarted server serving another model the run is refused; against the same model it resumes
    to the numbers of an uninterrupted run."""
    start, (args, model_args) = SERVERS[name], REPRODUCIBLE[name]
    reference = request.getfixturevalue(FIXTURES[name][1])
    capsys.readouterr()  # what making the reference said
    port, out, quick = free_port(), tmp_path / "killed", QUICK + model_args
    codes: list[int] = []
    with start(port, *args) as url:
        run = threading.Thread(target=lambda: codes.append(main(evaluate_args(url, out, history_template, quick))))
        run.start()
        while run.is_alive():
            with contextlib.suppress(Exception):
                if stored_results(out):
                    break
            time.sleep(0.05)
    run.join(timeout=120)
    assert codes == [2]
    one_line_error(capsys, "nothing answers at", "now", "(after 4 attempts")
    partial = stored_results(out)
    assert partial and len(partial) < 6 and all(row == stored_results(reference)[key] for key, row in partial.items())
    gguf = f"{quick},tokenizer={default_gguf()}"
    with start(port, *args, alias="another-model"):
        assert main(evaluate_args(url, out, history_template, gguf)) == 2
    one_line_error(capsys, "different configuration", "another-model")
    with start(port, *args):
        assert main(evaluate_args(url, out, history_template, quick)) == 0
    assert stored_results(out) == stored_results(reference)


def test_evaluate_through_llama_server(cpp_server, tmp_path):
    """`evaluate --dataset demo -n 3 -J 4 -N 5` (the paper's PPR prompt) through llama.cpp's own server, with token-id
    prompts and log-probabilities named by id and text: both methods' three questions stored, and the run identity
    holds what llama-server says about itself (/v1/models, /props). Two of the four default methods, for time (all four
    took 78 s on a loaded 2-core machine)."""
    out = tmp_path / "demo"
    assert main(["-q", "evaluate", *served(cpp_server), "--dataset", "demo", "-n", "3", "-J", "4", "-N", "5",
                 "--methods", "direct", "ppr", "--out", str(out)]) == 0
    rows = stored_results(out)
    assert sorted(rows) == sorted((q, m) for q in {q for q, _ in rows} for m in ("direct", "ppr")) and len(rows) == 6
    for probs, *_ in rows.values():
        assert abs(sum(probs) - 1) < 1e-5
    facts = stored_identity(out)["server"]
    assert facts["id"] == str(default_gguf()) and facts["owned_by"] == "llamacpp"
    assert facts["model_path"] == str(default_gguf()) and facts["build_info"]


@needs_server
@pytest.mark.parametrize("case", ["unreachable", "wrong model", "401", "too few log-probabilities", "truncated",
                                  "model changed", "other tokenizer"])
def test_bad_servers_are_one_line_and_store_nothing(case, server, history_template, tiny_model_dir, tmp_path,
                                                    capsys):
    out = tmp_path / "bad"
    changed = {"on": False}

    def renamed(status: int, data: bytes) -> tuple[int, bytes]:
        listing = json.loads(data)
        listing["data"][0]["id"] = "another-model"
        return status, json.dumps(listing).encode()

    def fault(method: str, path: str, count: int) -> object:
        if case == "401":
            return 401
        if case == "truncated" and completions(path) and count > 2:
            return lambda status, data: (status, data[: len(data) // 2])
        if case == "model changed":
            if completions(path) and count == 6:
                changed["on"] = True
                return 500
            if path.endswith("/models") and changed["on"]:
                return renamed
        return None

    model_args = {"wrong model": f"{QUICK},served_model=nope", "too few log-probabilities": f"{QUICK},max_logprobs=1",
                  "other tokenizer": f"{QUICK},tokenizer={tiny_model_dir}"}.get(case, QUICK)
    expected = {"unreachable": ["nothing answers at"], "wrong model": ["served_model=nope", "serves"],
                "401": ["HTTP 401", "api_key_env"],
                "too few log-probabilities": ["top 1 log-probabilities", "leave out", "max_logprobs"],
                "truncated": ["not complete JSON"], "model changed": ["changed during the run", "another-model"],
                "other tokenizer": ["as our tokenizer", "tokenizer="]}[case]
    with Proxy(server, fault) as url:
        if case == "unreachable":
            url = f"http://127.0.0.1:{free_port()}/v1"
        assert main(evaluate_args(url, out, history_template, model_args)) == 2
    one_line_error(capsys, *expected)
    assert case == "model changed" or nothing_stored(out)
    if case == "model changed":  # what was stored came before the change, from the run's model
        assert all(row == stored_results(out)[key] for key, row in stored_results(out).items())


@needs_server
def test_a_server_without_log_probabilities(history_template, tmp_path, capsys):
    with llama_cpp_python_server(free_port(), "--logits_all", "false") as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template, "retries=0")) == 2
    one_line_error(capsys, "logits_all")
    assert nothing_stored(tmp_path / "out")


class TokenIdServer(LoopbackServer):
    """What vLLM's completions endpoint does for beliefdrift, over llama.cpp in process (one request at a time):
    token-id prompts, `logprob_token_ids`, keys "token_id:N" (`return_tokens_as_token_ids`), the log-softmax in
    float32 as llama-cpp-python computes it. (llama-cpp-python's server cannot serve sampled thoughts exactly: it names
    tokens by text, and several of the default model's tokens read " " there.)"""

    def __init__(self) -> None:
        from llama_cpp import Llama

        super().__init__()
        self.llama = Llama(model_path=str(default_gguf()), logits_all=True, n_ctx=512, n_threads=1,
                           n_threads_batch=1, verbose=False)
        self.lock = threading.Lock()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        if request.command == "GET":
            answer = {"object": "list", "data": [{"id": "llama-ids", "object": "model"}]}
        else:
            answer = self.complete(json.loads(request.rfile.read(int(request.headers["Content-Length"]))))
        self.reply(request, 200, json.dumps(answer).encode())

    def complete(self, body: dict) -> dict:
        from llama_cpp import Llama

        ids = [int(t) for t in body["prompt"]]
        with self.lock:
            done = self.llama.n_tokens
            shared = next((i for i, (a, b) in enumerate(zip(self.llama.input_ids[:done], ids, strict=False))
                           if a != b),
                          min(done, len(ids)))
            self.llama.n_tokens = min(shared, len(ids) - 1)  # at least one token evaluated, for its logits
            self.llama.eval(ids[self.llama.n_tokens:])
            log_probs = Llama.logits_to_logprobs(self.llama.scores[self.llama.n_tokens - 1])
        wanted = body.get("logprob_token_ids") or np.argsort(-log_probs, kind="stable")[: body["logprobs"]].tolist()
        top = {f"token_id:{t}": float(log_probs[t]) for t in wanted}
        return {"model": "llama-ids", "usage": {"prompt_tokens": len(ids)},
                "choices": [{"text": "", "finish_reason": "length", "logprobs": {"top_logprobs": [top]}}]}



@needs_server
def test_token_id_prompts_give_the_text_servers_theta(server, reference, history_template, tmp_path):
    """Through a server that takes token ids and names tokens by id (as vLLM does), over the same llama.cpp weights,
    an evaluation stores the numbers of the one through llama-cpp-python's text server."""
    with TokenIdServer() as url:
        out = tmp_path / "ids"
        args = evaluate_args(url, out, history_template, f"{QUICK},tokenizer={default_gguf()}")
        assert main(args) == 0
    mine, theirs = stored_results(out), stored_results(reference)
    assert mine.keys() == theirs.keys()
    for key, row in mine.items():
        assert row[2:4] == theirs[key][2:4]  # answers and seeds
        np.testing.assert_allclose(np.array(row[0]), np.array(theirs[key][0]), atol=1e-6)


class ChatServer(LoopbackServer):
    """What vLLM's chat completions endpoint does for beliefdrift, over the session's llama.cpp server: the
    conversation rendered with the model's chat template as vLLM renders it (transformers' `continue_final_message`;
    `system` adds a system turn: a server whose template is not ours), completed there, its top log-probabilities
    returned in the chat format; /tokenize takes messages."""

    def __init__(self, upstream: str, system: str | None = None):
        from beliefdrift.backend.served import _load_tokenizer

        super().__init__()
        self.upstream = upstream.removesuffix("/v1")
        self.system = system
        self.tokenizer = _load_tokenizer(str(default_gguf()), None, False)

    def render(self, body: dict) -> str:
        system = [{"role": "system", "content": self.system}] if self.system else []
        return self.tokenizer.apply_chat_template(system + body["messages"], tokenize=False,
                                                  add_generation_prompt=body.get("add_generation_prompt", True),
                                                  continue_final_message=body.get("continue_final_message", False))

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        if request.command == "GET":
            return self.reply(request, *forward(self.upstream + request.path, "GET", b""))
        if request.path not in ("/v1/tokenize", "/v1/chat/completions"):
            return self.reply(request, 404, b'{"error": {"message": "not found"}}')
        asked = json.loads(body)
        if request.path == "/v1/tokenize":
            status, data = forward(self.upstream + "/extras/tokenize", "POST",
                                   json.dumps({"input": self.render(asked)}).encode())
            return self.reply(request, status, data)
        sent = {"model": asked["model"], "prompt": self.render(asked), "max_tokens": asked["max_tokens"],
                "temperature": asked["temperature"], "logprobs": asked["top_logprobs"]}
        if "logit_bias" in asked:
            sent["logit_bias"] = asked["logit_bias"]
        status, data = forward(self.upstream + "/v1/completions", "POST", json.dumps(sent).encode())
        if status != 200:
            return self.reply(request, status, data)
        completion = json.loads(data)
        choice = completion["choices"][0]
        top = (choice.get("logprobs") or {}).get("top_logprobs") or []
        content = [{"token": choice["text"], "top_logprobs": [{"token": token, "logprob": value}
                                                              for token, value in top[0].items()]}] if top else []
        answer = {"object": "chat.completion", "model": completion["model"], "usage": completion["usage"],
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": choice["text"]},
                               "finish_reason": choice["finish_reason"], "logprobs": {"content": content}}]}
        self.reply(request, 200, json.dumps(answer).encode())


@needs_server
def test_chat_requests_give_the_completions_theta(server, reference, history_template, tmp_path):
    """Through a chat endpoint that renders the conversation with the model's own chat template (`api=chat`), an
    evaluation stores the numbers of the one through the completions endpoint; the run's identity says so."""
    with ChatServer(server) as url:
        out = tmp_path / "chat"
        assert main(evaluate_args(url, out, history_template, f"{QUICK},api=chat")) == 0
    assert stored_identity(out)["api"] == "chat" and "api" not in stored_identity(reference)
    mine, theirs = stored_results(out), stored_results(reference)
    assert mine.keys() == theirs.keys()
    for key, row in mine.items():
        assert row[2:4] == theirs[key][2:4]  # answers and seeds
        np.testing.assert_allclose(np.array(row[0]), np.array(theirs[key][0]), atol=1e-6)


@needs_server
def test_a_chat_server_with_another_template_is_refused(server, history_template, tmp_path, capsys):
    """A chat server that renders the conversation otherwise (here with a system turn) reads other tokens than we
    meant: one line naming the chat template, nothing stored."""
    with ChatServer(server, system="Answer briefly.") as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template, f"{QUICK},api=chat")) == 2
    one_line_error(capsys, "chat template")
    assert nothing_stored(tmp_path / "out")


@needs_server
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.8, 0.9)])
def test_thoughts_through_the_server_are_drawn_as_on_the_full_logits(temperature, top_p):
    """Chain-of-thought tokens drawn through a server (its top log-probabilities, as many as determine the nucleus)
    are the tokens the same sampler, with the same generator, draws from llama.cpp's full logits in process."""
    from llama_cpp import Llama

    from beliefdrift.backend import load_model
    from beliefdrift.cot.generation import DecodeConfig, PromptCache, _end_of_sequence_ids, generate_rollouts
    from beliefdrift.prompts import chat_context

    steps, rows = 8, 2
    with TokenIdServer() as url:
        lm = load_model(f"openai:{url}", model_args={"concurrency": 2, "tokenizer": str(default_gguf()), "logprobs": 2})
        cache = PromptCache.from_text(lm, chat_context(lm.tokenizer, "What is 12 + 30? Think step by step."))
        config = DecodeConfig(num_pairs=4, max_new_tokens=steps, nucleus=(temperature, top_p))
        draw = nucleus_sampler(temperature, top_p, make_generator(0, "cot"))
        served = generate_rollouts(cache, [""] * rows, config, draw, collect_hidden=False)
    locals_ = [Llama(model_path=str(default_gguf()), logits_all=True, n_ctx=512, n_threads=1, n_threads_batch=1,
                     verbose=False) for _ in range(rows)]
    for local in locals_:
        local.eval(list(cache.prompt_ids))
    sampler = nucleus_sampler(temperature, top_p, make_generator(0, "cot"))
    eos, generated = _end_of_sequence_ids(lm), [[] for _ in range(rows)]
    running = list(range(rows))
    while running:
        logits = torch.zeros(rows, len(lm.tokenizer))
        for r in running:
            logits[r] = torch.from_numpy(np.array(locals_[r].scores[locals_[r].n_tokens - 1][: len(lm.tokenizer)]))
        drawn = sampler(logits).tolist()
        for r in list(running):
            if drawn[r] in eos:
                running.remove(r)
                continue
            generated[r].append(drawn[r])
            locals_[r].eval([drawn[r]])
            if len(generated[r]) == steps:
                running.remove(r)
    assert [rollout.token_ids for rollout in served] == generated
    assert temperature == 0 or lm.model.generation_logprobs > 2  # the nucleus needed more than the first 2


@needs_server
def test_reasoning_through_a_server_needs_sentence_embeddings(server, tmp_path, capsys):
    args = ["-q", "reasoning", *served(server), "--dataset", "demo", "-n", "1", "-J", "1", "-N", "1", "-m", "0",
            "--tau", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "cot")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--embedding sentence" in err
