"""A model behind an inference server: path-answers/s through llama.cpp's llama-server by slots, requests in flight
and prompts per request, against the in-process engine on the same machine and prompt; and how far θ of our torch
engine is from llama.cpp's on the same float32 weights.

    python bench/served.py [--questions 2] [--paths 8] [--steps 10] [--parallel 1 4] [--requests 8x1 16x16]
    python bench/served.py --f32-reference [--questions 2]                 # θ: torch engine vs llama.cpp, F32 GGUF

Throughput: the `ppr` method on demo questions with the paper's `ppr-llama` prompt (~750 tokens), J paths of N
answers, (a) through llama-server (`make setup-llama-server`; tests/servers.py starts it: one thread, on 127.0.0.1,
the default model's Q4_1 GGUF) with `--parallel P` slots (P × 2048 tokens of context), for each CxB of `--requests`:
C requests in flight (`--model-args concurrency`) of B token-id prompts each (`batch_size`); (b) through
llama-cpp-python's server with `--llama-cpp-python` (text prompts, one per request); (c) the engine in process, one
torch thread (the same GGUF dequantised, float32). path-answers/s = questions · J · N / s; the client's CPU seconds
are this process's; llama-server's prompt tokens evaluated and seconds spent on them are from its /metrics, over the
timed run.

F32 reference: the shipped Q4_1 tensors dequantised with the gguf package and written, with the file's metadata, as an
F32 GGUF; then θ of the direct-query and PPR prompts and of J·N PPR steps from llama.cpp in process on that file
against θ from our engine loading the same file (transformers reads its float32 tensors as they are).
"""

from __future__ import annotations

import argparse
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
from servers import free_port, llama_cpp_python_server, llama_cpp_server  # noqa: E402 (tests/ put on the path)


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


def f32_reference(args: argparse.Namespace) -> None:
    from llama_cpp import Llama

    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "SmolLM2-135M-Instruct.F32.gguf"
        write_f32(locate_registry_gguf(DEFAULT_MODEL), f32)
        try:
            lm = load_model(str(f32), dtype="float32")
        finally:
            shutil.rmtree(gguf_cache_path(f32), ignore_errors=True)  # the conversion of a file about to be deleted
        for cache in ("f16", "f32"):  # llama.cpp's default KV cache (as its servers run), then a float32 one
            kv = {} if cache == "f16" else {"type_k": 0, "type_v": 0}  # GGML_TYPE_F32
            local = Llama(model_path=str(f32), logits_all=True, n_ctx=4096, n_threads=1, n_threads_batch=1,
                          verbose=False, **kv)
            gaps = theta_gaps(lm, local, args)
            print(f"F32 GGUF, {cache} KV cache, {len(gaps)} θ (direct and PPR steps): max |θ_torch − θ_llama.cpp| = "
                  f"{gaps.max():.2e}, median {np.median(gaps):.2e}")
            del local


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--paths", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 4], help="llama-server's slots (each a run)")
    parser.add_argument("--requests", nargs="+", default=["8x1", "16x16"], type=lambda text: tuple(
        int(part) for part in text.split("x")), help="CxB: C requests in flight of B prompts each (each a run)")
    parser.add_argument("--llama-cpp-python", action="store_true", help="also llama-cpp-python's server (slow)")
    parser.add_argument("--f32-reference", action="store_true")
    args = parser.parse_args()
    (f32_reference if args.f32_reference else throughput)(args)


if __name__ == "__main__":
    main()
