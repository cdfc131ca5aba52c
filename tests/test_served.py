"""Models behind an OpenAI-compatible server (`--model openai:BASE_URL`, backend/served.py), tested against real
llama.cpp servers (tests/servers.py: llama-cpp-python's, and llama.cpp's own llama-server where `make
setup-llama-server` built it; each started once for the session on a free loopback port with the default model's GGUF
file; the tests that need one skip without it) and, for faults, a small proxy in front of llama-cpp-python's.

References: θ from either server equals θ from llama.cpp in process (same weights, same token ids) to 1e-6; every
answer and seed is drawn on our side, so a run through the server resumes, after any fault, to the same numbers. The
doubles of tests/server_doubles.py (vLLM, SGLang, llama-server, llama-cpp-python, as their sources answer) compute
with the tiny model in process, and a run through each stores what that model stores here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from server_doubles import TRIMMING_TEMPLATE, Backend, Mangle, double
from servers import (
    HAS_LLAMA_CPP,
    NO_LLAMA_CPP,
    SERVERS,
    Proxy,
    default_gguf,
    forward,
    free_port,
    killed_once_stored,
    llama_cpp_python_server,
    llama_cpp_server,
    skip_without_llama_server,
)
from tiny_model import CHATML, plain_logits, save_tiny_model

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


@pytest.fixture(scope="session")
def cpp_reference(cpp_server: str, history_template: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same evaluation through the session's llama-server."""
    out = tmp_path_factory.mktemp("served") / "cpp-reference"
    assert main(evaluate_args(cpp_server, out, history_template)) == 0
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
    assert identity["prompts"] == "completions text, tokenized at /extras/tokenize"
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
    to the numbers of an uninterrupted run. On llama-server that needs every context asked the same counts of top
    log-probabilities whatever came before (its softmax sums the vocabulary in an order that depends on the count: θ
    6e-8 apart), and a context asked again evaluated whole, not from its prompt cache (`endpoint.LLAMA_CPP`); its
    cache's other effect, on prompts as long as the paper's, is in docs/serving.md."""
    start = SERVERS[name]
    reference = request.getfixturevalue(FIXTURES[name][1])
    capsys.readouterr()  # what making the reference said
    port, out, quick = free_port(), tmp_path / "killed", QUICK
    url, codes = killed_once_stored(start, port, lambda url: main(evaluate_args(url, out, history_template, quick)),
                                    lambda: stored_results(out))
    assert codes == [2]
    one_line_error(capsys, "nothing answers at", "now", "(after 4 attempts")
    partial = stored_results(out)
    assert partial and len(partial) < 6 and all(row == stored_results(reference)[key] for key, row in partial.items())
    gguf = f"{quick},tokenizer={default_gguf()}"
    with start(port, alias="another-model"):
        assert main(evaluate_args(url, out, history_template, gguf)) == 2
    one_line_error(capsys, "different configuration", "another-model")
    with start(port):
        assert main(evaluate_args(url, out, history_template, quick)) == 0
    assert stored_results(out) == stored_results(reference)


def test_evaluate_through_llama_server(cpp_server, tmp_path):
    """`evaluate --dataset demo -n 1 -J 3 -N 3` (the paper's PPR prompt) through llama.cpp's own server, with token-id
    prompts, several to a request (the three paths' contexts of each step), and log-probabilities named by id and
    text: both methods' results stored, and the run identity holds what llama-server says about itself (/v1/models,
    /props). One question and two of the four default methods, for time: each context of the paper's prompt is
    evaluated whole on one thread (about a second each)."""
    out = tmp_path / "demo"
    assert main(["-q", "evaluate", *served(cpp_server), "--dataset", "demo", "-n", "1", "-J", "3", "-N", "3",
                 "--methods", "direct", "ppr", "--out", str(out)]) == 0
    rows = stored_results(out)
    assert sorted(method for _, method in rows) == ["direct", "ppr"] and len({q for q, _ in rows}) == 1
    for probs, *_ in rows.values():
        assert abs(sum(probs) - 1) < 1e-5
    identity = stored_identity(out)
    facts = identity["server"]
    assert facts["id"] == str(default_gguf()) and facts["owned_by"] == "llamacpp"
    assert facts["model_path"] == str(default_gguf()) and facts["build_info"] and identity["prompts"] == "token ids"


def test_chat_through_llama_server_is_held_to_our_ids(cpp_server, cpp_reference, history_template, tmp_path):
    """`api=chat` through llama-server: every prompt with its answers, rendered at /apply-template and tokenized at
    /tokenize, is our ids (the empty assistant turn of PPR's first step goes as the generation prompt: llama-server
    renders a continued empty message without the assistant's header), and the run stores the completions run's
    numbers."""
    out = tmp_path / "chat"
    assert main(evaluate_args(cpp_server, out, history_template, f"{QUICK},api=chat")) == 0
    assert stored_identity(out)["prompts"] == "chat text, tokenized at /apply-template"
    assert_same_numbers(out, cpp_reference, atol=1e-6)


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


@needs_server
def test_reasoning_through_a_server_needs_sentence_embeddings(server, tmp_path, capsys):
    args = ["-q", "reasoning", *served(server), "--dataset", "demo", "-n", "1", "-J", "1", "-N", "1", "-m", "0",
            "--tau", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "cot")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--embedding sentence" in err


# ---------------------------------------------------------------------------------------------- doubles of each server
# (tests/server_doubles.py: vLLM, SGLang, llama-server and llama-cpp-python as their sources answer, over the tiny
# model in process, so a run through each is held to a run of that model here)


@pytest.fixture(scope="session")
def backend(tiny_model_dir: Path) -> Backend:
    return Backend(tiny_model_dir)


@pytest.fixture(scope="session")
def local_reference(tiny_model_dir: Path, history_template: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The evaluation of `evaluate_args` with the tiny model in process (float32): what a run through a double of any
    server must store."""
    out = tmp_path_factory.mktemp("served") / "local"
    args = evaluate_args("", out, history_template)
    at = args.index("--model")
    args[at:at + 4] = ["--model", str(tiny_model_dir), "--dtype", "float32"]
    assert main(args) == 0
    return out


def assert_same_numbers(out: Path, reference: Path, atol: float = 1e-5) -> None:
    """`out` stores the answers and seeds of `reference`, and its numbers to `atol`."""
    mine, theirs = stored_results(out), stored_results(reference)
    assert mine.keys() == theirs.keys()
    for key, row in mine.items():
        assert row[2:4] == theirs[key][2:4]  # answers and seeds
        for got, expected in zip((row[0], row[1], row[4]), (theirs[key][0], theirs[key][1], theirs[key][4]),
                                 strict=True):
            np.testing.assert_allclose(np.array(got, dtype=float), np.array(expected, dtype=float), atol=atol)


#: How each double is held to reading our tokens (the run identity's `prompts`), by API.
PROMPT_CHECKS = {("vllm", "completions"): "token ids", ("vllm-without-logprob_token_ids", "completions"): "token ids",
                 ("sglang", "completions"): "token ids", ("llama-server", "completions"): "token ids",
                 ("llama-cpp-python", "completions"): "completions text, tokenized at /extras/tokenize",
                 ("vllm", "chat"): "chat text, tokenized at /tokenize", ("sglang", "chat"): "chat text, counted",
                 ("llama-server", "chat"): "chat text, tokenized at /apply-template"}


@pytest.mark.parametrize("name, api", PROMPT_CHECKS)
def test_a_run_through_each_server_stores_the_local_numbers(name, api, backend, local_reference, history_template,
                                                            tmp_path):
    """Through each server as its source answers (token-id prompts, several to a request where taken; log-probabilities
    keyed by id or text, in either shape; vLLM's cap learned from its refusal: 100 for the release without
    logprob_token_ids, so the options outside the tiny model's top 20 are asked for again within it; the chat rendered
    by the server), an evaluation stores the numbers of the tiny model in process, and its identity says how the
    server was held to our tokens (the tokenize route found, a 404 never counted). The tiny model puts its options
    far down its 259 tokens, so vLLM without logprob_token_ids is served with --max-logprobs 258: 160, then 259
    refused with its message, then 258 (its cap, learned)."""
    server = double(name, backend)
    with server as url:
        out = tmp_path / "run"
        assert main(evaluate_args(url, out, history_template, f"{QUICK},api={api}")) == 0
    assert_same_numbers(out, local_reference)
    assert stored_identity(out)["prompts"] == PROMPT_CHECKS[name, api]
    counts = [request.get("logprobs", request.get("top_logprobs")) for request in server.asked]
    if name == "vllm-without-logprob_token_ids":
        assert max(counts) == 258  # 259 refused with vLLM's message, then asked within its cap
    if api == "completions" and name != "llama-cpp-python":
        assert max(server.batches) > 1  # several prompts to a request


def test_each_context_is_asked_what_it_needs_whatever_came_before(backend, history_template, tmp_path):
    """A context whose top 20 log-probabilities leave an option out is asked again for 160, then for the whole
    vocabulary (the tiny model puts some option far down its 259 tokens after every context); every context, even
    after such a one, is asked for 20 first (so a resumed run asks what an uninterrupted one asked: llama-server's
    numbers depend on the count asked)."""
    server = double("vllm-without-logprob_token_ids", backend, max_logprobs=len(backend.tokenizer))
    with server as url:
        assert main(evaluate_args(url, tmp_path / "run", history_template)) == 0
    asked: dict[tuple[int, ...], list[int]] = {}
    for request in server.asked[3:]:  # after the probe's
        asked.setdefault(request["prompt"], []).append(request["logprobs"])
    schedule = [20, 160, len(backend.tokenizer)]
    assert all(counts == schedule[:len(counts)] for counts in asked.values())


def test_an_option_outside_the_servers_cap_names_its_flag(backend, history_template, tmp_path, capsys):
    """vLLM at its default cap (20) without logprob_token_ids, an option outside the top 20: one line naming the cap,
    vLLM's flag and our setting, nothing stored."""
    with double("vllm-without-logprob_token_ids", backend, max_logprobs=20) as url:
        assert main(evaluate_args(url, tmp_path / "run", history_template)) == 2
    one_line_error(capsys, "top 20 log-probabilities leave out", "it gives at most 20", "--max-logprobs",
                   "max_logprobs=")
    assert nothing_stored(tmp_path / "run")


@pytest.mark.parametrize("case", ["trimming template", "no continuation", "another template"])
def test_a_chat_server_that_renders_other_tokens_is_refused_at_connect(case, backend, tiny_model_dir, history_template,
                                                                       tmp_path, capsys):
    """A chat server whose rendering of the assistant's turn differs from ours is refused before any question, in one
    line naming the true cause and the exact path: vLLM continuing a message under a template that trims it
    (Llama-3's `| trim`: each answer's newline lost), llama-cpp-python's server (no continuation: the turn closed and
    a new one opened), a server with another template (here a system turn added)."""
    model_args = f"{QUICK},api=chat"
    if case == "trimming template":
        trimming = save_tiny_model(tmp_path / "trimming", chat_template=TRIMMING_TEMPLATE)
        capsys.readouterr()  # what saving it printed
        server = double("vllm", backend, chat_template=TRIMMING_TEMPLATE, name=str(trimming))
        expected = ["trims message content", "api=completions"]
    elif case == "no continuation":
        server, expected = double("llama-cpp-python", backend), ["does not continue", "api=completions"]
    else:
        server = double("vllm", backend, chat_template="<|im_start|>system\nAnswer briefly.<|im_end|>\n" + CHATML)
        expected = ["another chat template"]
    with server as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template, model_args)) == 2
    one_line_error(capsys, *expected)
    assert nothing_stored(tmp_path / "out")
    assert len({request["prompt"] for request in server.asked}) <= 1  # the probe's only


def mangled(change: Callable[[Any], Any], route: str = "/completions") -> Mangle:
    """A `mangle` applying `change` to the answers of the routes ending in `route`."""
    return lambda path, body, answer: change(answer) if path.endswith(route) and isinstance(answer, dict) else answer


def first_top(answer: dict) -> dict:
    return answer["choices"][0]["logprobs"]["top_logprobs"][0]


def set_first(value: Any) -> Callable[[dict], dict]:
    def change(answer: dict) -> dict:
        top = first_top(answer)
        top[next(iter(top))] = value
        return answer
    return change


def as_json(change: Callable[[dict], dict], old: str, new: str) -> Callable[[dict], bytes]:
    return lambda answer: json.dumps(change(answer)).replace(old, new).encode()


#: A response part broken as a hostile server may break it (issue 49: items 2, 5 and 9): the change to vLLM's answer,
#: the words the one-line error must hold.
BROKEN = {
    "NaN": (set_first(float("nan")), ["is nan, not a finite number"]),
    "Infinity": (set_first(float("inf")), ["is inf, not a finite number"]),
    "-1e309": (as_json(set_first(-7.5), "-7.5", "-1e309"), ["is -inf, not a finite number"]),
    "positive": (set_first(0.5), ["is 0.5 > 0"]),
    "true": (set_first(True), ["is 'True', not a number"]),
    "a list": (set_first([-0.1]), ["is '[-0.1]', not a number"]),
    "mass past 1": (lambda a: first_top(a).update({k: -0.01 for k in first_top(a)}) or a, ["sum to", "> 1"]),
    "token_id:abc": (lambda a: first_top(a).update({"token_id:abc": -9.0}) or a, ["'token_id:abc' names no token id"]),
    "usage as a list": (lambda a: a | {"usage": [3]}, ["usage is '[3]', not an object"]),
    "prompt_tokens as a string": (lambda a: a | {"usage": a["usage"] | {"prompt_tokens": str(a["usage"][
        "prompt_tokens"])}}, ["usage.prompt_tokens is", "not a whole number"]),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_response_is_one_line_and_stores_nothing(case, backend, history_template, tmp_path, capsys):
    change, expected = BROKEN[case]
    with double("vllm", backend, mangle=mangled(change)) as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template)) == 2
    one_line_error(capsys, "/v1/completions: not a completion with log-probabilities", *expected)
    assert nothing_stored(tmp_path / "out")


@pytest.mark.parametrize("length", ["4096", [4096]])
def test_a_context_length_that_is_no_number_is_one_line(length, backend, history_template, tmp_path, capsys):
    def change(listing: dict) -> dict:
        listing["data"][0]["max_model_len"] = length
        return listing

    with double("vllm", backend, mangle=mangled(change, "/models")) as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template)) == 2
    one_line_error(capsys, "max_model_len is", "not a whole number")


def test_a_token_given_twice_is_one_line(backend, history_template, tmp_path, capsys):
    def twice(answer: dict) -> dict:
        top = answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
        top.append(dict(top[0]))
        return answer

    with double("llama-server", backend, mangle=mangled(twice)) as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template)) == 2
    one_line_error(capsys, "is given twice")


def test_a_nan_from_a_text_server_mid_run_keeps_the_questions_before(backend, local_reference, history_template,
                                                                    tmp_path, capsys):
    """A text-prompt server (llama-cpp-python's shape) that answers NaN from the second question on: one line saying
    which log-probability is no number (not the store's "a result given twice"), the first question stored as in
    process, nothing of the second."""
    from beliefdrift.data.registry import load_dataset

    first, second = load_dataset("demo", n=2, seed=0)

    def faulty(path: str, body: dict, answer: Any) -> Any:
        if path.endswith("/completions") and second.stem in str(body.get("prompt")):
            top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
            top[next(iter(top))] = float("nan")
        return answer

    with double("llama-cpp-python", backend, mangle=faulty) as url:
        assert main(evaluate_args(url, tmp_path / "out", history_template)) == 2
    one_line_error(capsys, "is nan, not a finite number")
    stored, expected = stored_results(tmp_path / "out"), stored_results(local_reference)
    assert {question for question, _ in stored} == {first.id}
    for key, row in stored.items():
        assert row[2:4] == expected[key][2:4]


def thoughts_are_drawn_as_on_the_full_logits(url: str, temperature: float, top_p: float,
                                            full_logits: Callable[[list[int]], torch.Tensor]) -> None:
    """Two rollouts of 8 chain-of-thought tokens drawn through the server at `url` (its top log-probabilities, as many
    as determine the nucleus) are the tokens the same sampler, with the same generator, draws from the model's
    `full_logits(ids)` after each rollout's ids."""
    from beliefdrift.backend import load_model
    from beliefdrift.cot.generation import DecodeConfig, PromptCache, _end_of_sequence_ids, generate_rollouts
    from beliefdrift.prompts import chat_context

    steps, rows = 8, 2
    lm = load_model(f"openai:{url}", model_args={"concurrency": 2, "logprobs": 2})
    cache = PromptCache.from_text(lm, chat_context(lm.tokenizer, "What is 12 + 30? Think step by step."))
    config = DecodeConfig(num_pairs=4, max_new_tokens=steps, nucleus=(temperature, top_p))
    draw = nucleus_sampler(temperature, top_p, make_generator(0, "cot"))
    drawn = generate_rollouts(cache, [""] * rows, config, draw, collect_hidden=False)
    sampler = nucleus_sampler(temperature, top_p, make_generator(0, "cot"))
    eos, generated = _end_of_sequence_ids(lm), [[] for _ in range(rows)]
    running = list(range(rows))
    while running:
        logits = torch.zeros(rows, len(lm.tokenizer))
        for r in running:
            logits[r] = full_logits(list(cache.prompt_ids) + generated[r])[: len(lm.tokenizer)]
        tokens = sampler(logits).tolist()
        for r in list(running):
            if tokens[r] in eos:
                running.remove(r)
                continue
            generated[r].append(tokens[r])
            if len(generated[r]) == steps:
                running.remove(r)
    assert [rollout.token_ids for rollout in drawn] == generated


@pytest.mark.parametrize("name", ["vllm", "llama-server"])
@pytest.mark.parametrize("temperature, top_p", [(0.0, 1.0), (0.8, 0.9)])
def test_thoughts_through_the_server_are_drawn_as_on_the_full_logits(name, temperature, top_p, backend):
    """Through a server that names tokens by id (vLLM's "token_id:N", llama-server's `id`; vLLM served with
    --max-logprobs at the vocabulary), sampled thoughts are the tiny model's own (`thoughts_are_drawn_as_on_the_full_
    logits`), and at T > 0 a context needed more than the first 2 top log-probabilities."""
    server = double(name, backend, **({"max_logprobs": len(backend.tokenizer)} if name == "vllm" else {}))
    with server as url:
        thoughts_are_drawn_as_on_the_full_logits(url, temperature, top_p, lambda ids: plain_logits(backend.model, ids))
    counts = [request.get("logprobs", request.get("n_probs")) for request in server.asked]
    assert temperature == 0 or max(counts) > 2


def test_thoughts_through_llama_server_are_drawn_as_on_llama_cpps_logits(cpp_server):
    """The same through the real llama-server (T = 0.8, top-p 0.9): its `id`s name the tokens (" " and "" are the
    texts of several of the default model's), and the thoughts are those drawn from llama.cpp's full logits in
    process."""
    from llama_cpp import Llama

    local = Llama(model_path=str(default_gguf()), logits_all=True, n_ctx=512, n_threads=1, n_threads_batch=1,
                  verbose=False)

    def full_logits(ids: list[int]) -> torch.Tensor:
        """llama.cpp's logits after `ids`, evaluating what its cache does not hold already."""
        held = local.input_ids[: local.n_tokens].tolist()
        local.n_tokens = next((i for i, (a, b) in enumerate(zip(held, ids, strict=False)) if a != b),
                              min(len(held), len(ids) - 1))
        local.eval(ids[local.n_tokens:])
        return torch.from_numpy(np.array(local.scores[len(ids) - 1]))

    thoughts_are_drawn_as_on_the_full_logits(cpp_server, 0.8, 0.9, full_logits)
