"""PPR rollout throughput: the naive `model.generate` way vs our shared-prefix engine, in one run.

    python bench/rollout.py [--model smollm2-135m-instruct] [--paths 32] [--steps 50] [--questions 2]
    python bench/rollout.py --shape llama-3.1-8b --device cuda [--steps 100]   # GPU: random weights, real shape
    python bench/rollout.py --shape llama-3.1-8b --device cuda --steps 100 --cuda-graphs   # CUDA graphs
    python bench/rollout.py --shape llama-3.1-8b-narrow --count-ops --paths 8   # operators per step, any CPU
    python bench/rollout.py --shape llama-3.1-8b-narrow --count-ops --as-gpu    # ... as a GPU runs the engine
    python bench/rollout.py --shape llama-3.1-8b-narrow --count-ops --static-steps   # ... of the static step
    python bench/rollout.py --shape llama-3.1-8b-layer --traffic --dtype bfloat16   # bytes and FLOPs per layer-step
    python bench/rollout.py --shape tiny --as-gpu --steps 20   # the sweep on a CPU, the engine as a GPU runs it

With `--shape`, `--tokenizer DIR` takes the prompts' tokenizer from a directory (e.g. one written by
`load_model("smollm2-135m-instruct").tokenizer.save_pretrained(DIR)`) where the default model is not installed.

(a) naive: `generate(do_sample=True, num_return_sequences=J, max_new_tokens=2N, output_scores=True)`, then
    parse the text into answers and read θ off the scores — what a researcher would write first;
(b) engine, float32; (c) engine, `--dtype auto` (bf16 only where bf16 matmuls are fast).
Prints trajectory-steps/s (J·N per question), the ratios, and achieved FLOP/s as a fraction of a
matrix-multiply peak measured in the same run.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, Olmo2Config, PretrainedConfig, Qwen2Config

from beliefdrift.backend import (
    DEFAULT_MODEL,
    EngineSettings,
    LanguageModel,
    StepMode,
    TransformersModel,
    load_model,
    shared_prefix,
)
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.data.registry import load_dataset
from beliefdrift.engine import resampling
from beliefdrift.engine.methods import MethodResult, parse_method, run_methods_many
from beliefdrift.engine.resampling import QuestionRunner, make_generator, ppr_tokens
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE


def matmul_peak(dtype: torch.dtype, size: int = 1024, repeats: int = 20) -> float:
    """FLOP/s of a square matmul, the machine's practical peak for this dtype."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def forward_flops(model: torch.nn.Module, new_tokens: int, context: int, logits_rows: int) -> float:
    """≈ 2·(body params)·tokens + 2·(lm_head params)·logit rows + 4·layers·hidden·tokens·context (attention)."""
    config = model.config
    head = config.vocab_size * config.hidden_size
    body = sum(p.numel() for p in model.parameters()) - head * (1 if config.tie_word_embeddings else 2)
    attention = 4 * config.num_hidden_layers * config.hidden_size * new_tokens * context
    return 2 * body * new_tokens + 2 * head * logits_rows + attention


def naive_rollout(lm, question, paths: int, steps: int, seed: int) -> tuple[float, float]:
    """Seconds and FLOPs of the naive generate-and-parse rollout for one question."""
    tokens = ppr_tokens(lm, question, DEFAULT_PPR_TEMPLATE)
    prompt = torch.tensor([tokens.prompt_ids], device=lm.device)
    torch.manual_seed(seed)
    start = time.perf_counter()
    with torch.no_grad():
        out = lm.model.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=True, num_return_sequences=paths,
            max_new_tokens=2 * steps, min_new_tokens=2 * steps, output_scores=True, return_dict_in_generate=True,
            top_k=0, top_p=1.0,
            pad_token_id=lm.tokenizer.pad_token_id or lm.tokenizer.eos_token_id,
        )
    label_ids = torch.tensor(tokens.label_ids, device=lm.device)
    for j in range(paths):  # parse: answers from the text, θ from the score at each answer position
        text = lm.tokenizer.decode(out.sequences[j, prompt.shape[1]:], skip_special_tokens=True)
        answers = [line.strip() for line in text.split("\n") if line.strip() in question.labels]
        positions = [i for i, t in enumerate(out.sequences[j, prompt.shape[1]:].tolist()) if t in tokens.label_ids]
        _ = [torch.softmax(out.scores[i][j, label_ids], -1) for i in positions], answers
    seconds = time.perf_counter() - start
    new = out.sequences.shape[1] - prompt.shape[1]
    flops = forward_flops(lm.model, paths * prompt.shape[1], prompt.shape[1], paths)  # prefill, copied J times
    flops += sum(forward_flops(lm.model, paths, prompt.shape[1] + i, paths) for i in range(1, new))
    return seconds, flops


def engine_rollout(lm, question, paths: int, steps: int, seed: int) -> tuple[float, float]:
    """Seconds and FLOPs of our engine (shared prefill, one forward per answer) for one question."""
    start = time.perf_counter()
    runner = QuestionRunner(lm, question, DEFAULT_PPR_TEMPLATE)
    runner.ppr(paths, steps, make_generator(seed, question.id))
    seconds = time.perf_counter() - start
    prompt = len(runner.ppr_prompt.tokens.prompt_ids)
    width = runner.ppr_prompt.tokens.step_length
    flops = forward_flops(lm.model, prompt, prompt, 1)
    flops += sum(forward_flops(lm.model, paths * width, prompt + width * (i + 1), paths) for i in range(steps))
    return seconds, flops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--paths", type=int, default=32)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shape", choices=sorted(SHAPES), help="random weights of this shape: the GPU sweep below")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--count-ops", action="store_true", help="with --shape: only the operator counts per step")
    parser.add_argument("--traffic", action="store_true",
                        help="with --shape: bytes moved and FLOPs per step, as a GPU runs the engine")
    parser.add_argument("--as-gpu", action="store_true", help="with --shape on a CPU: the engine as a GPU runs it "
                        "(prompts stacked through the fused kernel, answers drawn up front)")
    parser.add_argument("--compile", action="store_true", help="with --shape: the engine as --compile runs it")
    parser.add_argument("--cuda-graphs", action="store_true", help="with --shape: the engine as --cuda-graphs runs it")
    parser.add_argument("--static-steps", action="store_true", help="with --shape: the answer steps as static steps "
                        "(every tensor allocated once, drawn up front: the step a CUDA graph captures), eagerly")
    args = parser.parse_args()
    if (args.count_ops or args.traffic or args.compile or args.cuda_graphs or args.static_steps) and not args.shape:
        parser.error("--count-ops, --traffic, --compile, --cuda-graphs and --static-steps go with a --shape")
    if args.shape and args.count_ops:
        count_ops(args)
        return
    if args.shape and args.traffic:
        traffic(args)
        return
    if args.shape:
        with gpu_layout() if args.as_gpu else nullcontext():
            shape_sweep(args)
        return
    questions = load_dataset("demo", n=args.questions, seed=args.seed)
    auto = resolve_dtype("auto", torch.device("cpu"))
    peaks = {torch.float32: matmul_peak(torch.float32)}
    peaks[auto] = peaks.get(auto) or matmul_peak(auto)
    print("matmul peak: " + ", ".join(f"{dt}: {p / 1e9:.1f} GFLOP/s" for dt, p in peaks.items()))
    print(f"bf16 matmul: {matmul_peak(torch.bfloat16, repeats=2) / 1e9:.2f} GFLOP/s; --dtype auto -> {auto}")

    configs = [("naive generate (fp32)", "float32", naive_rollout), ("engine (fp32)", "float32", engine_rollout),
               (f"engine (--dtype auto = {auto})", "auto", engine_rollout)]
    rows = []
    for name, dtype, rollout in configs:
        lm = load_model(args.model, dtype=dtype)
        seconds = flops = 0.0
        for question in questions:
            s, f = rollout(lm, question, args.paths, args.steps, args.seed)
            seconds, flops = seconds + s, flops + f
        rate = args.paths * args.steps * len(questions) / seconds
        rows.append((name, seconds, rate, flops / seconds / peaks[lm.dtype]))
        print(f"{name:32s} {seconds:8.1f} s  {rate:8.1f} trajectory-steps/s  "
              f"{flops / seconds / 1e9:6.1f} GFLOP/s = {rows[-1][3]:.1%} of matmul peak", flush=True)
    naive = rows[0][2]
    print(f"\nJ={args.paths}, N={args.steps}, {len(questions)} questions")
    for name, _, rate, _ in rows[1:]:
        print(f"{name}: {rate / naive:.1f}x naive")


LLAMA_3_1_8B = {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
                "num_key_value_heads": 8, "vocab_size": 128256, "rope_theta": 500000.0,
                "max_position_embeddings": 131072}
SHAPES: dict[str, Callable[[], PretrainedConfig]] = {
    "tiny": lambda: LlamaConfig(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                                num_key_value_heads=2, vocab_size=49152),
    "llama-3.1-8b": lambda: LlamaConfig(**LLAMA_3_1_8B),
    "olmo-2-7b": lambda: Olmo2Config(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                     num_attention_heads=32, num_key_value_heads=32, vocab_size=100352,
                                     max_position_embeddings=4096),
    # Llama-3.1-8B's layers and heads at a small width: its operator counts per step (which do not depend on
    # widths) on any CPU, with --count-ops.
    "llama-3.1-8b-narrow": lambda: LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=32,
                                               num_attention_heads=32, num_key_value_heads=8, vocab_size=49152),
    # One decoder layer of Llama-3.1-8B at full width (and its embeddings and head): the bytes and FLOPs of a layer
    # per step on any CPU, with --traffic.
    "llama-3.1-8b-layer": lambda: LlamaConfig(**{**LLAMA_3_1_8B, "num_hidden_layers": 1}),
    "qwen2.5-7b": lambda: Qwen2Config(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                                      num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                                      max_position_embeddings=32768),
}


TOKENIZER_HELP = ("with --shape: the tokenizer that writes the prompts (a directory or hub id; default: the default "
                  "model's, which needs its GGUF file installed)")


def shaped_model(shape: str, device: torch.device, dtype: torch.dtype, tokenizer: str | None = None,
                 static_steps: bool = False) -> LanguageModel:
    """Random weights of a real model's shape, made on the device (no download), with `tokenizer` (a directory or
    hub id) or the default model's; its answer steps static with `static_steps` (`EngineSettings`)."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer) if tokenizer else load_model(DEFAULT_MODEL).tokenizer
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(SHAPES[shape](), dtype=dtype).eval()
    return TransformersModel(model, tokenizer, shape, EngineSettings(answer_step=StepMode(static=static_steps)))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work: Callable[[], object]) -> float:
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


def copy_bandwidth(device: torch.device, megabytes: int = 1024, repeats: int = 10) -> float:
    """Bytes/s moved by a device-to-device copy (each byte read once and written once)."""
    source = torch.empty(megabytes * 2**20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)
    return 2 * source.numel() * repeats / timed(device, lambda: [target.copy_(source) for _ in range(repeats)])


def device_matmul_peak(device: torch.device, dtype: torch.dtype, size: int = 4096, repeats: int = 20) -> float:
    a = torch.randn(size, size, dtype=dtype, device=device)
    a @ a
    return 2 * size**3 * repeats / timed(device, lambda: [a @ a for _ in range(repeats)])


def three_methods(lm: LanguageModel, questions: list, paths: int, steps: int) -> list[list[MethodResult]]:
    """PPR, SEED_1 and SEED_5 (the paper's setting), `paths` paths of `steps` answers each, on every question, all
    advanced together by the engine; run seed 0."""
    methods = [parse_method(m) for m in ("ppr", "ppr-seed1", "ppr-seed5")]
    return run_methods_many(lm, questions, methods, paths=paths, steps=steps, seed=0, template=DEFAULT_PPR_TEMPLATE)


VIEW_LIKE = (torch.ops.aten._unsafe_view, torch.ops.aten.detach)  # views in effect, not flagged as views


class OpCounter(TorchDispatchMode):
    """Counts the aten operators a piece of work dispatches, and those that run a kernel (not just make a view):
    on a GPU each kernel is a launch, and a decoding step bound by the host costs about its operator count."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        self.kernels += not (func.is_view or func.overloadpacket in VIEW_LIKE)
        return func(*args, **(kwargs or {}))


def ops_per_step(work: Callable[[int], object], steps: int) -> tuple[float, float]:
    """Operators and kernels per step of `work(n)` (n steps): runs of 2·steps and steps after a warm-up run,
    differenced, so the prefills and set-up cancel."""
    work(steps)  # a first call does one-time work (probes, caches) that would not cancel
    counts = []
    for n in (2 * steps, steps):
        with OpCounter() as counter:
            work(n)
        counts.append((counter.ops, counter.kernels))
    return (counts[0][0] - counts[1][0]) / steps, (counts[0][1] - counts[1][1]) / steps


@contextmanager
def prompt_runs(**settings: bool) -> Iterator[None]:
    """Every `PromptRuns` the engine builds meanwhile made with `settings` (`stack`, `fused`)."""
    original = shared_prefix.PromptRuns.of
    shared_prefix.PromptRuns.of = lambda prompts: dataclasses.replace(original(prompts), **settings)
    try:
        yield
    finally:
        shared_prefix.PromptRuns.of = original


@contextmanager
def gpu_layout() -> Iterator[None]:
    """The engine as it runs on a GPU, on any device: equal runs of paths attend to their prompts stacked, and
    answers are drawn up front (on the CPU it runs the prompts one by one and draws block by block)."""
    draws = resampling.answer_draws
    resampling.answer_draws = resampling.up_front_draws
    try:
        with prompt_runs(stack=True):
            yield
    finally:
        resampling.answer_draws = draws


def count_ops(args: argparse.Namespace, lm: LanguageModel | None = None) -> None:
    """aten operators and kernels per answer step: the engine on one question (3 methods × J paths) and naive
    `generate(num_return_sequences=3J)`, which takes two tokens per answer; with `--as-gpu` the engine as a GPU runs
    it (`gpu_layout`) on 1, 4 and 16 questions."""
    device = resolve_device(args.device)
    lm = lm or shaped_model(args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer, args.static_steps)
    questions = load_dataset("demo", n=16, seed=args.seed)
    print(f"aten operators per answer step ({lm.model.config.num_hidden_layers} layers, 3 methods × {args.paths} "
          "paths per question; on a GPU, host time per step follows them)")
    with gpu_layout() if args.as_gpu else nullcontext():
        for count in (1, 4, 16) if args.as_gpu else (1,):
            engine = ops_per_step(lambda n, count=count: three_methods(lm, questions[:count], args.paths, n), 10)
            print(f"engine{' as on a GPU' if args.as_gpu else ''}, {count} question{'s' * (count > 1)}: "
                  f"{engine[0]:,.0f} ({engine[1]:,.0f} kernels)")
    naive = ops_per_step(lambda n: naive_rollout(lm, questions[0], 3 * args.paths, n, args.seed), 10)
    print(f"naive generate, 1 question: {naive[0]:,.0f} ({naive[1]:,.0f} kernels)")


def _tensors(values) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _tensors(value)


FUSED_ATTENTION = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
                   torch.ops.aten._scaled_dot_product_efficient_attention)


class Traffic(TorchDispatchMode):
    """The bytes every kernel (non-view operator) reads and writes, taken as the sizes of its tensor inputs and
    outputs (no cache reuse), those of the shared-prefix attention apart, and the FLOPs of the matrix products."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = self.attention_bytes = self.flops = 0
        self.in_attention = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.is_view or func.overloadpacket in VIEW_LIKE:
            return out
        moved = sum(t.numel() * t.element_size() for t in _tensors([*args, out]))
        self.bytes += moved
        self.attention_bytes += moved * self.in_attention
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm):
            a, b = args[-2], args[-1]
            self.flops += 2 * a.numel() * b.shape[-1]
        elif func.overloadpacket in FUSED_ATTENTION:  # q·Kᵀ and weights·V
            query, keys = args[0], args[1]
            self.flops += 4 * query.numel() * keys.shape[-2]
        return out

    @contextmanager
    def attending(self) -> Iterator[None]:
        """Counts what runs inside the shared-prefix attention as the attention's."""
        saved = shared_prefix._attend, shared_prefix._attend_stacked

        def counted(function):
            def call(*args, **kwargs):
                self.in_attention = True
                try:
                    return function(*args, **kwargs)
                finally:
                    self.in_attention = False
            return call

        shared_prefix._attend, shared_prefix._attend_stacked = map(counted, saved)
        try:
            yield
        finally:
            shared_prefix._attend, shared_prefix._attend_stacked = saved


def traffic(args: argparse.Namespace) -> None:
    """Per answer step of the engine as a GPU runs it (`gpu_layout`) on 1 and 16 questions: the bytes its kernels
    move (the attention's apart), the matrix products' FLOPs, and the weights' bytes; runs of 2 steps and 1,
    differenced."""
    device = resolve_device(args.device)
    lm = shaped_model(args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer, args.static_steps)
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    questions = load_dataset("demo", n=16, seed=args.seed)
    print(f"{args.shape} ({lm.dtype}, {lm.model.config.num_hidden_layers} layers), 3 methods × {args.paths} paths "
          f"per question: {weights / 2**30:.2f} GiB of weights")
    print("| questions | paths | GB moved per step | of which attention | GFLOP per step | FLOP per byte moved |")
    print("|---|---|---|---|---|---|")
    with gpu_layout():
        for count in (1, 16):
            three_methods(lm, questions[:count], args.paths, 1)  # one-time work (probes, caches)
            totals = []
            for steps in (2, 1):
                counter = Traffic()
                with counter, counter.attending():
                    three_methods(lm, questions[:count], args.paths, steps)
                totals.append((counter.bytes, counter.attention_bytes, counter.flops))
            moved, attention, flops = (a - b for a, b in zip(*totals, strict=True))
            print(f"| {count} | {3 * args.paths * count} | {moved / 1e9:.2f} | {attention / 1e9:.2f} "
                  f"({attention / moved:.0%}) | {flops / 1e9:,.0f} | {flops / moved:.0f} |", flush=True)


def shape_sweep(args: argparse.Namespace) -> None:
    """Engine ms/step against the weight-read floor, over paths and over batched questions, and naive generate.

    A step is one answer on every path; its time includes the run's prefills (prompt, direct query), which N
    steps amortize. The floor is the time to read every weight once at the copy bandwidth measured here; the
    roofline is the matmul peak measured here over the FLOPs of one path-answer. With `--compile` or `--cuda-graphs`
    the engine runs as those flags of the CLI make it, each configuration once untimed first (to compile, and to warm
    up); every batch of the timed run records its step's CUDA graph once, as every batch of a real run does.
    Naive generate runs before, eagerly, and operators are not counted."""
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    lm = shaped_model(args.shape, device, dtype, args.tokenizer, args.static_steps)
    weight_bytes = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    floor = weight_bytes / copy_bandwidth(device)
    peak = device_matmul_peak(device, dtype)
    questions = load_dataset("demo", n=16, seed=args.seed)
    tokens = ppr_tokens(lm, questions[0], DEFAULT_PPR_TEMPLATE)
    flops_per_answer = forward_flops(lm.model, tokens.step_length, len(tokens.prompt_ids) + args.steps, 1)
    mode = "cuda graphs" if args.cuda_graphs else "compiled" if args.compile else "eager"
    print(f"{args.shape} on {device} ({dtype}): {weight_bytes / 2**30:.1f} GiB of weights; weight-read floor "
          f"{floor * 1e3:.2f} ms/step; matmul peak {peak / 1e12:.3g} TFLOP/s; compute roofline "
          f"{peak / flops_per_answer:,.0f} path-answers/s; prompt {len(tokens.prompt_ids)} tokens, N={args.steps}; "
          f"engine {mode}")
    seconds = timed(device, lambda: naive_rollout(lm, questions[0], 3 * args.paths, args.steps, args.seed))
    naive = 3 * args.paths * args.steps / seconds
    lm = lm.prepared(args.compile, args.cuda_graphs)

    def engine_seconds(work: Callable[[], object]) -> float:
        if args.compile or args.cuda_graphs:
            work()  # compiles, warms up
        return timed(device, work)

    print("\n| paths | ms/step | × floor | path-answers/s | of roofline |\n|---|---|---|---|---|")
    for paths in (1, 8, 32, 96, 384):
        seconds = engine_seconds(lambda p=paths: QuestionRunner(lm, questions[0]).ppr(p, args.steps, make_generator(0)))
        print(f"| {paths} | {seconds / args.steps * 1e3:.1f} | {seconds / args.steps / floor:.1f} | "
              f"{paths * args.steps / seconds:,.0f} | {paths * args.steps / seconds * flops_per_answer / peak:.1%} |")
    print(f"\n| questions × 3 methods × {args.paths} paths | ms/step | × floor | path-answers/s | of roofline | "
          "ms/step with the prompts' scores written out | fused kernel's speed-up |\n|---|---|---|---|---|---|---|")
    engine_rate = 0.0
    for count in (1, 2, 4, 8, 16):
        batch = questions[:count]
        seconds = engine_seconds(lambda b=batch: three_methods(lm, b, args.paths, args.steps))
        fused = "– | – |"  # the CPU runs its prompts one by one, with no fused kernel
        if device.type != "cpu" or args.as_gpu:
            with prompt_runs(fused=False):
                written = engine_seconds(lambda b=batch: three_methods(lm, b, args.paths, args.steps))
            fused = f"{written / args.steps * 1e3:.1f} | {written / seconds:.2f}× |"
        rate = count * 3 * args.paths * args.steps / seconds
        engine_rate = engine_rate or rate
        print(f"| {count} | {seconds / args.steps * 1e3:.1f} | {seconds / args.steps / floor:.1f} | {rate:,.0f} | "
              f"{rate * flops_per_answer / peak:.1%} | {fused}")
    print(f"\nnaive generate(num_return_sequences={3 * args.paths}): {naive:,.0f} path-answers/s; engine on one "
          f"question {engine_rate / naive:.1f}x naive")
    if mode == "eager":
        count_ops(args, lm)


if __name__ == "__main__":
    main()
