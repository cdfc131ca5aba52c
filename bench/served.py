"""A model behind an inference server: path-answers/s through llama.cpp's llama-server by slots, requests in flight
and prompts per request, against the in-process engine on the same machine and prompt; and how far θ of our torch
engine is from llama.cpp's, on the shipped Q4_1 file and on the same float32 weights.

    python bench/served.py [--questions 2] [--paths 8] [--steps 10] [--parallel 1 4] [--requests 8x1 16x16]
    python bench/served.py --reference [q4_1] [f32] [--questions 2]  # θ: torch engine vs llama.cpp on GGUF files
    python bench/served.py --prompt-cache                            # llama-server: one context, asked several ways
    python bench/served.py --reproducible [--questions 2] [--paths 2] [--steps 3]  # one evaluation, three ways

Throughput: the `ppr` method on demo questions with the paper's `ppr-llama` prompt (~750 tokens), J paths of N
answers, (a) through llama-server (`make setup-llama-server`; tests/servers.py starts it: one thread, on 127.0.0.1,
the default model's Q4_1 GGUF) with `--parallel P` slots (P × 2048 tokens of context), for each CxB of `--requests`:
C requests in flight (`--model-args concurrency`) of B token-id prompts each (`batch_size`); (b) through
llama-cpp-python's server with `--llama-cpp-python` (text prompts, one per request); (c) the engine in process, one
torch thread (the same GGUF dequantised, float32). path-answers/s = questions · J · N / s; the client's CPU seconds
are this process's; llama-server's prompt tokens evaluated and seconds spent on them are from its /metrics, over the
timed run.

Reference: θ of the direct-query and PPR prompts and of J·N PPR steps from llama.cpp in process against θ from our
engine (float32, one thread) on (a) the shipped Q4_1 file, which the engine reads dequantised (what a server of that
file computes against a local run of the default model), and (b) an F32 GGUF of those dequantised tensors (written
with the gguf package, with the file's metadata), which both read as they are, with llama.cpp's float16 KV cache (its
default, what its servers use) and with a float32 one.

Prompt cache: llama-server's top two log-probabilities after one context (the first demo question's `ppr-llama` prompt
with two answers, as token ids) asked first, again, again with `cache_prompt: false`, after shorter prefixes of it,
and whole for more top log-probabilities: what the client's requests depend on (docs/server-shapes.md §6).

Reproducible: `evaluate` of the demo questions (direct, ppr, ppr-seed1; `ppr-llama`) through a fresh llama-server
(and llama-cpp-python's server with `--llama-cpp-python`), one question per batch; the same with two questions per
batch through another; and with one per batch through a third, killed once its first question is stored and resumed
through a fourth (nothing of the third one's cache left): the largest differences of their stored numbers
(probabilities, θ, answers and seeds) from the first run's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from beliefdrift.backend import DEFAULT_MODEL, load_model
from beliefdrift.backend.loading import gguf_cache_path, locate_registry_gguf
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine.methods import parse_method, run_methods_many
from beliefdrift.engine.resampling import QuestionRunner, direct_tokens, make_generator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import (  # noqa: E402 (tests/ put on the path)
    free_port,
    killed_once_stored,
    llama_cpp_python_server,
    llama_cpp_server,
)


def metrics(url: str | None) -> np.ndarray:
    """llama-server's (prompt tokens evaluated, seconds spent on them) so far (zeros without a server)."""
    if url is None:
        return np.zeros(2)
    text = urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10).read().decode()
    values = dict(line.split()[:2] for line in text.splitlines() if line.startswith("llamacpp:"))
    return np.array([float(values["llamacpp:prompt_tokens_total"]), float(values["llamacpp:prompt_seconds_total"])])


def path_answers(lm: Any, args: argparse.Namespace, url: str | None = None) -> tuple[float, float, np.ndarray]:
    """(path-answers/s, this process's CPU seconds, llama-server's `metrics` over the run) of J PPR paths of N answers
    on each of the demo questions, after a warm-up (connections, first passes)."""
    questions = load_dataset("demo", n=args.questions, seed=0)
    ppr = [parse_method("ppr")]
    run_methods_many(lm, questions[:1], ppr, paths=1, steps=1)
    start, cpu, server = time.perf_counter(), time.process_time(), metrics(url)
    run_methods_many(lm, questions, ppr, paths=args.paths, steps=args.steps, seed=1)
    answers, seconds = len(questions) * args.paths * args.steps, time.perf_counter() - start
    return answers / seconds, time.process_time() - cpu, (metrics(url) - server) / [answers, 1]


def throughput(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    local, _, _ = path_answers(load_model(DEFAULT_MODEL, dtype="float32"), args)
    print("| server | slots | requests in flight × prompts each | path-answers/s | of in process | client CPU s | "
          "server prompt tokens per path-answer | server prompt s |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| the engine in process, float32, 1 thread | | | {local:.2f} | 1 | | | |")
    runs: list[tuple[str, AbstractContextManager[str], int, list[tuple[int, int]]]] = [
        ("llama-server", llama_cpp_server(free_port(), "--parallel", str(p), "--ctx-size", str(2048 * p), "--metrics"),
         p, args.requests) for p in args.parallel]
    if args.llama_cpp_python:
        runs.append(("llama-cpp-python", llama_cpp_python_server(free_port()), 1, [(8, 1)]))
    for name, server, slots, requests in runs:
        with server as url:
            for concurrency, batch in requests:
                lm = load_model(f"openai:{url}", model_args={"concurrency": concurrency, "batch_size": batch})
                rate, cpu, (tokens, seconds) = path_answers(lm, args, url if name == "llama-server" else None)
                work = f"{tokens:.1f} | {seconds:.1f}" if name == "llama-server" else " | "
                print(f"| {name} | {slots} | {concurrency} × {batch} | {rate:.2f} | {rate / local:.2f} | {cpu:.1f} | "
                      f"{work} |", flush=True)


def write_f32(source: Path, target: Path) -> None:
    """`source`'s tensors dequantised to float32 and its metadata, as a GGUF file."""
    import gguf

    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(target, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.quantization_version"):
            continue
        if key == "general.file_type":
            writer.add_key_value(key, int(gguf.LlamaFileType.ALL_F32), gguf.GGUFValueType.UINT32)
            continue
        array = field.types[0] == gguf.GGUFValueType.ARRAY
        writer.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1] if array else None)
    for tensor in reader.tensors:
        data = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, data.reshape([int(d) for d in reversed(tensor.shape)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def reference(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    shipped = locate_registry_gguf(DEFAULT_MODEL)
    if "q4_1" in args.reference:
        compare("Q4_1 GGUF (shipped)", load_model(DEFAULT_MODEL, dtype="float32"), shipped, "f16", args)
    if "f32" not in args.reference:
        return
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "SmolLM2-135M-Instruct.F32.gguf"
        write_f32(shipped, f32)
        try:
            lm = load_model(str(f32), dtype="float32")
        finally:
            shutil.rmtree(gguf_cache_path(f32), ignore_errors=True)  # the conversion of a file about to be deleted
        for cache in ("f16", "f32"):  # llama.cpp's default KV cache (as its servers run), then a float32 one
            compare("F32 GGUF", lm, f32, cache, args)


def compare(name: str, lm: Any, gguf_file: Path, cache: str, args: argparse.Namespace) -> None:
    """Print max and median of `theta_gaps` between `lm` and llama.cpp in process on `gguf_file` with a KV cache of
    `cache` (f16: llama.cpp's default; f32)."""
    from llama_cpp import Llama

    kv = {} if cache == "f16" else {"type_k": 0, "type_v": 0}  # GGML_TYPE_F32
    local = Llama(model_path=str(gguf_file), logits_all=True, n_ctx=4096, n_threads=1, n_threads_batch=1,
                  verbose=False, **kv)
    gaps = theta_gaps(lm, local, args)
    print(f"{name}, {cache} KV cache, {len(gaps)} θ (direct and PPR steps): max |θ_torch − θ_llama.cpp| = "
          f"{gaps.max():.2e}, median {np.median(gaps):.2e}", flush=True)


def theta_gaps(lm: Any, local: Any, args: argparse.Namespace) -> np.ndarray:
    """max_k |θ_torch − θ_llama.cpp| of the direct query and of every step of J PPR paths per demo question."""
    from llama_cpp import Llama

    def thetas(ids: list[int], labels: tuple[int, ...], at: list[int]) -> np.ndarray:
        """θ [len(at), K] after ids[:i] for each i of `at`: one pass of llama.cpp over `ids`."""
        local.reset()
        local.eval(ids)
        log_probs = np.stack([Llama.logits_to_logprobs(local.scores[i - 1]) for i in at])[:, list(labels)]
        probs = np.exp(log_probs.astype(np.float64))
        return probs / probs.sum(-1, keepdims=True)

    gaps = []
    for question in load_dataset("demo", n=args.questions, seed=0):
        runner = QuestionRunner(lm, question)
        tokens = direct_tokens(lm, question)
        direct = thetas(list(tokens.prompt_ids), tokens.label_ids, [len(tokens.prompt_ids)])[0]
        gaps.append(np.abs(runner.direct.probs.numpy() - direct).max())
        paths = runner.ppr(args.paths, args.steps, make_generator(0, question.id))
        ppr = runner.ppr_prompt.tokens
        for j in range(args.paths):
            ids = list(ppr.prompt_ids) + [t for a in paths.answers[j].tolist() for t in ppr.answer_ids(a)]
            at = [len(ppr.prompt_ids) + n * ppr.step_length for n in range(args.steps + 1)]
            gaps.extend(np.abs(paths.thetas[j].numpy() - thetas(ids, ppr.label_ids, at)).max(-1))
    return np.array(gaps)


def prompt_cache(args: argparse.Namespace) -> None:
    from beliefdrift.backend.served.tokens import load_tokenizer
    from beliefdrift.prompts import chat_context
    from beliefdrift.prompts.render import question_prompt

    tokenizer = load_tokenizer(str(locate_registry_gguf(DEFAULT_MODEL)), None, False)
    first, second = (tokenizer(chat_context(tokenizer, question_prompt("ppr-llama", question)) + answers,
                               add_special_tokens=False)["input_ids"]
                     for question, answers in zip(load_dataset("demo", n=2, seed=0), ("A\nB\n", ""), strict=True))
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    with llama_cpp_server(free_port()) as url:
        def top(prompt: list[int], count: int = 20, **extra: Any) -> str:
            """The prompt tokens llama-server took from its cache, the top two (id, ℓ) after `prompt`, their
            difference."""
            body = {"prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": count} | extra
            request = urllib.request.Request(url + "/completions", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
            answer = json.load(urllib.request.urlopen(request))
            a, b = [(e["id"], e["logprob"]) for e in answer["choices"][0]["logprobs"]["content"][0]["top_logprobs"][:2]]
            cached = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
            return f"{cached} | {a[0]}: {a[1]:.7f} | {b[0]}: {b[1]:.7f} | {a[1] - b[1]:.7f}"

        rows = [("first", top(first)), ("again", top(first)),
                ("again, cache_prompt false", top(first, cache_prompt=False))]
        top(second)
        rows.append((f"after the second question's prompt (its first {shared} tokens shared)", top(first)))
        for cut in (2, 256):
            top(first[:-cut])
            rows.append((f"after its first n − {cut} tokens were asked", top(first)))
        rows += [(f"top {count}, cache_prompt false", top(first, count, cache_prompt=False))
                 for count in (160, len(tokenizer))]
    print(f"n = {len(first)} prompt tokens; ℓ of the top two tokens after them\n\n"
          "| asked | tokens from the cache | top token: ℓ | second: ℓ | difference |\n|---|---|---|---|---|")
    for name, values in rows:
        print(f"| {name} | {values} |")


def reproducible(args: argparse.Namespace) -> None:
    import contextlib
    import io

    from beliefdrift.cli.main import main as cli
    from beliefdrift.runs.store import STORE_FILE, RunStore

    def run(url: str, out: Path, batch: int = 1) -> int:
        """`evaluate` through the server at `url` into `out` (its tables not printed)."""
        with contextlib.redirect_stdout(io.StringIO()):
            return cli(["-q", "evaluate", "--model", f"openai:{url}", "-n", str(args.questions), "-J", str(args.paths),
                        "-N", str(args.steps), "--methods", "direct", "ppr", "ppr-seed1", "--batch-questions",
                        str(batch), "--bootstrap", "10", "--out", str(out)])

    def stored(out: Path) -> dict[tuple[str, str], list[Any]]:
        with RunStore.open(out / STORE_FILE, read_only=True) as store:
            return {(r.question_id, r.method): [np.asarray(v, dtype=float) for v in (r.probs, r.thetas, r.answers,
                                                                                      r.seeds) if v is not None]
                    for r in store.rows()}

    def gap(first: dict[tuple[str, str], list[Any]], second: dict[tuple[str, str], list[Any]]) -> float:
        assert first.keys() == second.keys()
        pairs = [pair for key in first for pair in zip(first[key], second[key], strict=True)]
        return max(float(np.abs(a - b).max(initial=0.0)) for a, b in pairs)

    def killed_and_resumed(start: Any, out: Path) -> int:
        """The run through a server killed once it stored a question, then resumed through a fresh one on the same
        port: how many results it had stored."""
        port = free_port()
        _, codes = killed_once_stored(start, port, lambda url: run(url, out), lambda: stored(out))
        partial = len(stored(out))
        with start(port) as url:
            assert codes == [2] and run(url, out) == 0
        return partial

    servers = {"llama-server": llama_cpp_server} | (
        {"llama-cpp-python": llama_cpp_python_server} if args.llama_cpp_python else {})
    print("| server | results | max \\|Δ\\|, 2 questions per batch | max \\|Δ\\|, killed and resumed | results stored "
          "before the kill |\n|---|---|---|---|---|")
    for name, start in servers.items():
        with tempfile.TemporaryDirectory() as tmp:
            reference, batched, killed = (Path(tmp) / part for part in ("reference", "batched", "killed"))
            with start(free_port()) as url:
                assert run(url, reference) == 0
            with start(free_port()) as url:
                assert run(url, batched, batch=2) == 0
            partial = killed_and_resumed(start, killed)
            expected = stored(reference)
            print(f"| {name} | {len(expected)} | {gap(expected, stored(batched)):.3g} | "
                  f"{gap(expected, stored(killed)):.3g} | {partial} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--paths", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 4], help="llama-server's slots (each a run)")
    parser.add_argument("--requests", nargs="+", default=["8x1", "16x16"], type=lambda text: tuple(
        int(part) for part in text.split("x")), help="CxB: C requests in flight of B prompts each (each a run)")
    parser.add_argument("--llama-cpp-python", action="store_true", help="also llama-cpp-python's server (slow)")
    parser.add_argument("--reference", nargs="*", choices=["q4_1", "f32"],
                        help="θ of our engine against llama.cpp in process on these GGUF files (default: both)")
    parser.add_argument("--prompt-cache", action="store_true", help="llama-server: one context asked several ways")
    parser.add_argument("--reproducible", action="store_true",
                        help="one evaluation uninterrupted, batched otherwise, and killed and resumed")
    args = parser.parse_args()
    if args.reference == []:
        args.reference = ["q4_1", "f32"]
    chosen = {reference: args.reference, prompt_cache: args.prompt_cache, reproducible: args.reproducible}
    next((measure for measure, wanted in chosen.items() if wanted), throughput)(args)


if __name__ == "__main__":
    main()
