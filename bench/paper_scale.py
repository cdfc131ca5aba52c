"""Paper scale on one GPU: `beliefdrift evaluate` run from the CLI on a saved random-weight model of a real shape,
with the paper's settings and seven methods, on as many questions as a time budget allows; its path-answers/s and
the time the whole benchmark would take at that rate.

    python bench/paper_scale.py DIR --shape llama-3.1-8b --device cuda --dtype bfloat16 --tokenizer TOK
    python bench/paper_scale.py DIR --shape tiny --device cpu --dtype float32 --paths 2 --steps 3 --questions 2

DIR/model: random weights of `--shape` (`bench/rollout.py`'s shapes, made on the device, seed 0; nothing downloaded)
and the tokenizer, saved as a model directory; DIR/adapter: a LoRA adapter with the paper's LoRA settings
(`train-paper-llama.yaml`: rank 16, α 8, every linear layer; peft's initialisation) for the AM-PPR methods. Both are
made once and reused. Then, as a user would type it:

    beliefdrift evaluate --config paper --model DIR/model --adapter DIR/adapter --methods direct ppr ppr-seed1
        ppr-seed5 am-ppr am-ppr-seed1 am-ppr-seed5 --dataset csqa -n 0 --device … --dtype … --out DIR/run

(the paper preset: J = 32, N = 100, the paper's prompt; `-n 0`: every question of the split), stopped with SIGTERM
after `--budget` seconds or once `--questions` questions are stored. The run store keeps whole questions, so the
same command resumes the run. The seven methods are the method registry's (`registry.METHOD_EXAMPLES`): Tables 1-2's
six rows and AM-PPR + NoSEED (Figure 3's EMD).

From the store: the questions with every method stored and their engine time (the `seconds` each stored row keeps:
the wall time of its batched call, the prefills, seeds and CUDA-graph captures included, the model's loading not);
path-answers/s = questions × methods × J × N / engine time, counted as issue 50 counts the paper's work (every
method J × N, although Direct-Query draws no path and AM-PPR only its seeds); the same rate over the methods that
draw N answers; and the whole split at that rate, questions × methods × J × N / path-answers/s (1,221 CSQA questions
× 7 × 32 × 100 = 27.3 M path-answers).
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from rollout import SHAPES, TOKENIZER_HELP, shaped_model
from transformers import AutoConfig

from beliefdrift.amortize.trainer import lora_config
from beliefdrift.backend.loading import resolve_device, resolve_dtype
from beliefdrift.config.options import load_settings
from beliefdrift.config.train import TrainConfig
from beliefdrift.registry import METHOD_EXAMPLES, parse_method
from beliefdrift.runs.store import STORE_FILE, RunStore, StoreError

ROOT = Path(__file__).resolve().parents[1]
PAPER_METHODS = METHOD_EXAMPLES
LORA_PRESET = "train-paper-llama"
#: The sizes a saved model must have to be reused for a shape.
SHAPE_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "vocab_size")
POLL_S = 1.0


def save_model(directory: Path, adapter: Path, shape: str, device: torch.device, dtype: torch.dtype,
               tokenizer: str | None) -> None:
    """Random weights of `shape` (seed 0) and the tokenizer in `directory`; a LoRA adapter of the paper's LoRA
    settings on them in `adapter`."""
    from peft import get_peft_model

    torch.manual_seed(0)
    lm = shaped_model(shape, device, dtype, tokenizer)
    lm.model.save_pretrained(directory)
    lm.tokenizer.save_pretrained(directory)
    get_peft_model(lm.model, lora_config(load_settings(TrainConfig, LORA_PRESET))).save_pretrained(adapter)


def saved_shape_differs(directory: Path, shape: str) -> str | None:
    """Which of `SHAPE_KEYS` the model saved in `directory` has otherwise than `shape` (None: it is that shape)."""
    saved, wanted = AutoConfig.from_pretrained(directory).to_dict(), SHAPES[shape]().to_dict()
    differ = [f"{key} {saved.get(key)} (not {wanted.get(key)})"
              for key in SHAPE_KEYS if saved.get(key) != wanted.get(key)]
    return ", ".join(differ) or None


def evaluate_command(args: argparse.Namespace, model: Path, adapter: Path, out: Path) -> list[str]:
    """The `beliefdrift evaluate` command line of the run."""
    command = [sys.executable, "-m", "beliefdrift", "evaluate", "--config", "paper", "--model", str(model),
               "--adapter", str(adapter), "--methods", *PAPER_METHODS, "--dataset", args.dataset, "-n", "0",
               "--device", args.device, "--dtype", args.dtype, "--out", str(out)]
    for flag, value in (("--split", args.split), ("--data-dir", args.data_dir), ("--paths", args.paths),
                        ("--steps", args.steps)):
        if value is not None:
            command += [flag, str(value)]
    return command


def stored_questions(store: Path) -> int:
    """Questions stored in the run store `store` (a question's methods are stored together; 0 before it exists or
    while evaluate is still creating it)."""
    try:
        with RunStore.open(store, read_only=True) as run:
            return len({question for question, _ in run.done()})
    except StoreError:
        return 0


def run_for(command: list[str], store: Path, budget: float, questions: int) -> tuple[float, str]:
    """Run `command` until it ends, `budget` seconds pass or `store` holds `questions` questions (0: no cap), then
    stop it with SIGTERM; (wall seconds, why it stopped). A command that fails by itself is a SystemExit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))}
    start = time.monotonic()
    process = subprocess.Popen(command, env=env)
    why = ""
    while process.poll() is None:
        time.sleep(POLL_S)
        if time.monotonic() - start >= budget:
            why = f"stopped after its {budget:.0f} s budget"
        elif questions and stored_questions(store) >= questions:
            why = f"stopped at {questions} stored questions"
        if why:
            process.send_signal(signal.SIGTERM)
            process.wait()
    if not why and process.returncode != 0:
        raise SystemExit(f"paper scale: evaluate exited with status {process.returncode}")
    return time.monotonic() - start, why or "every question stored"


@dataclass(frozen=True)
class Measured:
    """What a run store holds: its questions, those with every method stored and their engine time."""

    total: int  # the run's questions
    questions: int  # with every method stored
    seconds: float  # their engine time
    methods: tuple[str, ...]
    paths: int
    steps: int

    @property
    def generating(self) -> int:
        """Methods that draw N answers per path."""
        return sum(parse_method(m).spec.generates for m in self.methods)

    def path_answers(self, questions: int, methods: int | None = None) -> int:
        """questions × methods × J × N (every method by default)."""
        return questions * (len(self.methods) if methods is None else methods) * self.paths * self.steps

    @property
    def rate(self) -> float:
        """Path-answers per second of engine time, every method counted J × N."""
        return self.path_answers(self.questions) / self.seconds

    @property
    def full_seconds(self) -> float:
        """The whole run at `rate`."""
        return self.path_answers(self.total) / self.rate


def measured(store: Path) -> Measured:
    """The run store's questions, methods, J and N (its identity) and the engine time of its complete questions:
    per question the `seconds` of one row of each model call (the base model's methods; the adapter's)."""
    with RunStore.open(store, read_only=True) as run:
        identity, rows = run.config(), run.rows(trajectories=False)
    methods = tuple(identity["methods"])
    seconds: dict[str, dict[str, float]] = {}  # question → method → seconds
    for row in rows:
        seconds.setdefault(row.question_id, {})[row.method] = row.seconds
    complete = [calls for calls in seconds.values() if set(calls) >= set(methods)]
    engine = sum(sum({parse_method(name).needs_adapter: s for name, s in calls.items()}.values()) for calls in complete)
    return Measured(identity["questions"], len(complete), engine, methods, identity["paths"], identity["steps"])


def report(m: Measured, dataset: str) -> str:
    """The rate lines: path-answers/s, over the generating methods too, and the whole split at that rate."""
    generated = m.path_answers(m.questions, m.generating) / m.seconds
    full = m.full_seconds
    return (f"path-answers/s: {m.rate:,.1f} ({m.questions} question{'s' * (m.questions != 1)} × {len(m.methods)} "
            f"methods × J {m.paths} × N {m.steps} / {m.seconds:.2f} s of engine time)\n"
            f"answers drawn/s: {generated:,.1f} (the {m.generating} methods that draw N answers a path)\n"
            f"full {dataset}: {m.total:,} questions × {len(m.methods)} × {m.paths} × {m.steps} = "
            f"{m.path_answers(m.total):,} path-answers / {m.rate:,.1f} per s = {full:,.1f} s = {full / 60:.1f} min "
            "(engine time; loading the model not included)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir", type=Path, help="where the model (DIR/model), adapter and run (DIR/run) go")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama-3.1-8b")
    parser.add_argument("--tokenizer", help=TOKENIZER_HELP)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--dataset", default="csqa")
    parser.add_argument("--split", help="the dataset's split (default: its evaluation split)")
    parser.add_argument("--data-dir", help="benchmark data directory (default: $BELIEFDRIFT_DATA)")
    parser.add_argument("--paths", type=int, help="J (default: the paper preset's, 32)")
    parser.add_argument("--steps", type=int, help="N (default: the paper preset's, 100)")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds evaluate runs before it is stopped")
    parser.add_argument("--questions", type=int, default=0, help="stop once this many questions are stored (0: no cap)")
    args = parser.parse_args(argv)
    model, adapter, out = args.dir / "model", args.dir / "adapter", args.dir / "run"
    if (model / "config.json").is_file() and (adapter / "adapter_config.json").is_file():
        differs = saved_shape_differs(model, args.shape)
        if differs:
            raise SystemExit(f"paper scale: {model} holds another shape than {args.shape} ({differs}); choose another "
                             "DIR")
        print(f"model and adapter: {model}, {adapter} (saved earlier)", flush=True)
    else:
        device = resolve_device(args.device)
        start = time.monotonic()
        save_model(model, adapter, args.shape, device, resolve_dtype(args.dtype, device), args.tokenizer)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"model and adapter: {args.shape} ({args.dtype}) saved in {time.monotonic() - start:.1f} s to {model}, "
              f"{adapter}", flush=True)
    command = evaluate_command(args, model, adapter, out)
    store = out / STORE_FILE
    before = stored_questions(store)
    print(f"$ {shlex.join(command)}", flush=True)
    wall, why = run_for(command, store, args.budget, args.questions)
    if not stored_questions(store):
        raise SystemExit(f"paper scale: evaluate ran {wall:.1f} s ({why}) and stored no question; raise --budget "
                         "(BUDGET for bench/gpu.sh)")
    m = measured(store)
    print(f"\nevaluate ran {wall:.1f} s ({why}): {m.questions} of {m.total:,} questions stored with every method, "
          f"{m.questions - before} of them by this run; its start-up (loading the model) is in the wall time only")
    print(report(m, args.dataset))


if __name__ == "__main__":
    main()
