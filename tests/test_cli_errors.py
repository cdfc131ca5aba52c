"""Faults and bad input through the CLI (`main(argv)` in this process): every user error is one line on stderr and
exit status 2 without a traceback; Ctrl-C is one line and 130; read-only, partial, corrupt and mismatched runs;
malformed adapters and datasets of the wrong kind refused before the model loads; every numeric option's range;
question ids that would escape the output directory; a flipped bit in a stored number."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import typing
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from beliefdrift.cli.main import build_parser, main
from beliefdrift.config.options import Range, flag_name
from beliefdrift.files import safe_name
from beliefdrift.runs.store import RunStore, StoreError, from_blob

FAST = ["-J", "2", "-N", "2"]
#: Only guards a hang: a real process on a loaded machine takes what it takes (the tests assert outcomes, not speeds).
HANG_S = 1800


def csqa_line(qid: str, stem: str = "Which is a fruit?", options: int = 3) -> str:
    choices = [{"label": chr(ord("A") + i) if i < 26 else f"X{i}", "text": f"option {i}"} for i in range(options)]
    return json.dumps({"id": qid, "answerKey": "A", "question": {"stem": stem, "choices": choices}})


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def write_bytes(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def write_parquet(path: Path, rows: list[dict]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


GSM8K_FILE = str(Path(__file__).resolve().parent / "fixtures" / "data" / "gsm8k_ok.jsonl")
LORA = {"peft_type": "LORA", "r": 2, "lora_alpha": 2, "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}


def adapter(directory: Path, config: str, weights: bool = True, fill: float = 0.0) -> str:
    """An adapter directory whose adapter_config.json is `config` (as written), with LoRA weights (all `fill`)
    unless not `weights` (of a shape the tiny model's q_proj does not have, which only loading it notices)."""
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "adapter_config.json").write_text(config)
    if weights:
        save_file({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.full((2, 7), fill,
                                                                                                np.float32)},
                  str(directory / "adapter_model.safetensors"))
    return str(directory)


def run_files(directory: Path, files: dict[str, str | bytes]) -> str:
    """A directory holding `files` ({name: text or bytes}): a run's output as report --html reads it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    return str(directory)


def dangling(link: Path) -> str:
    link.symlink_to(link.parent / "nowhere")
    return str(link)


#: "Billion laughs": nine aliases of nine aliases of …, 9^9 values once expanded (a few hundred bytes of YAML).
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join(['*' + a] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)) + "paths: *i\n"


def model_files(directory: Path, config: str, weights: bytes = b"") -> str:
    """A model directory of `config` (config.json) and, when given, `weights` (model.safetensors)."""
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(config)
    if weights:
        (directory / "model.safetensors").write_bytes(weights)
    return str(directory)


def garbage_store(directory: Path) -> Path:
    (directory / "run.sqlite").write_bytes(os.urandom(4096))
    return directory


def error_line(capsys: pytest.CaptureFixture) -> str:
    """The one error line on stderr (progress bars and notes may precede it); no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def drift_run(directory: Path) -> str:
    """A run directory whose store holds a drift run (another command's than evaluate)."""
    directory.mkdir(exist_ok=True)
    with RunStore.open(directory / "run.sqlite") as store:
        store.ensure_config({"command": "drift"})
    return str(directory)


def evaluate(model: Path, out: Path, *extra: str) -> list[str]:
    return ["evaluate", "--model", str(model), "--dataset", "demo", "-n", "2", *FAST, "--methods", "direct",
            "--bootstrap", "10", "--out", str(out), *extra]


# Each case: (argv builder (tiny model dir, tmp dir) -> argv, expected fragment of the error line).
BAD_INPUTS = {
    "unknown flag": (lambda m, t: ["drift", "--pathz", "3"], "unrecognized arguments: --pathz"),
    "not an integer": (lambda m, t: ["emd", "-J", "many"], "argument --paths/-J: invalid int value"),
    "cuda without a GPU": (lambda m, t: ["drift", "--model", str(m), "--device", "cuda", *FAST, "--out", str(t)],
                           "--device cuda: no CUDA GPU"),
    "cuda graphs on the cpu": (lambda m, t: evaluate(m, t, "--device", "cpu", "--cuda-graphs"),
                               "--cuda-graphs: the model is on cpu; CUDA graphs need --device cuda"),
    "decoding cuda graphs on the cpu": (lambda m, t: ["reasoning", "--model", str(m), "--dataset", "demo", "-n", "1",
                                                      "--device", "cpu", "--cuda-graphs", "--out", str(t)],
                                        "--cuda-graphs: the model is on cpu; CUDA graphs need --device cuda"),
    "unknown device": (lambda m, t: ["drift", "--model", str(m), "--device", "tpu7", "--out", str(t)],
                       "--device tpu7: unknown device"),
    "unknown model offline": (lambda m, t: ["drift", "--model", "no-such/model", "--out", str(t)],
                              "neither a registry name (smollm2-135m-instruct), a local directory, a .gguf file nor a "
                              "hub id in the local cache (HF_HUB_OFFLINE is set)"),
    "directory that is not a model": (lambda m, t: ["emd", "--model", str(t), "--out", str(t / "o")],
                                      "a directory but not a model (no config.json)"),
    "model config not a mapping": (lambda m, t: evaluate(Path(model_files(t / "m", "[1]")), t),
                                   "/m: config.json holds a list, not a mapping of settings"),
    "model weights cut short": (lambda m, t: evaluate(Path(model_files(t / "m", '{"model_type": "llama"}',
                                                                        b"\x40\x00\x00\x00\x00\x00\x00\x00{")), t),
                                "/m: model.safetensors is not a complete safetensors file ("),
    "model without a tokenizer": (lambda m, t: evaluate(Path(model_files(t / "m", '{"model_type": "llama"}')), t),
                                  "/m: cannot load its tokenizer ("),
    "gguf that is not one": (lambda m, t: evaluate(Path(write(t / "x.gguf", "GGUF, but cut short")), t),
                             "/x.gguf: not a GGUF model transformers can read ("),
    "missing gguf": (lambda m, t: ["reasoning", "--model", str(t / "x.gguf"), "--dataset", "demo", "--out", str(t)],
                     "no such .gguf file"),
    "yaml value of the wrong type": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "paths: abc\n"),
                                                   "--out", str(t)], "setting paths: expected an integer, got 'abc'"),
    "yaml unknown key": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "pathz: 3\n"), "--out", str(t)],
                         "unknown settings ['pathz']"),
    "preset name misspelt": (lambda m, t: ["evaluate", "--config", "cpu-defualt", "--out", str(t)],
                             "); did you mean 'cpu-default'?"),
    "yaml not a mapping": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "- 1\n"), "--out", str(t)],
                           "expected a mapping of settings"),
    "zero paths": (lambda m, t: evaluate(m, t, "-J", "0"), "-J/--paths must be in [1, 65536], got 0"),
    "negative n": (lambda m, t: evaluate(m, t, "-n", "-1"), "-n/--n must be in [0, 100000000], got -1"),
    "negative n in drift": (lambda m, t: ["drift", "--model", str(m), "-n", "-2", "--out", str(t)],
                            "-n/--n must be in [0, 100000000], got -2"),
    "unknown dataset": (lambda m, t: ["drift", "--model", str(m), "--dataset", "nope", "--out", str(t)],
                        "unknown dataset 'nope'"),
    "empty data file": (lambda m, t: evaluate(m, t, "--dataset", write(t / "empty.jsonl", "")),
                        "empty.jsonl: no records in the file; expected a .jsonl or .parquet file in the CSQA/ARC "
                        "layout"),
    "empty csv file": (lambda m, t: evaluate(m, t, "--dataset", write(t / "empty.csv", "\n")),
                       "empty.csv: no questions in the file; expected"),
    "csv file not UTF-8": (lambda m, t: evaluate(m, t, "--dataset", write_bytes(t / "d.csv", b"Q?,a,b,c,d,A\n"
                                                                                b"Caf\xe9?,a,b,c,d,B\n")),
                           "d.csv:2: not UTF-8 (invalid continuation byte)"),
    "parquet file of other columns": (
        lambda m, t: evaluate(m, t, "--dataset", write_parquet(t / "data.parquet", [{"text": "hi", "label": 1}])),
        "data.parquet: columns 'text', 'label' match no known layout; expected a .parquet file in the CSQA/ARC layout"),
    "not a parquet file": (lambda m, t: evaluate(m, t, "--dataset", write(t / "data.parquet", "PAR1")),
                           "data.parquet: not a readable parquet file ("),
    "unknown layout": (lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", '{"text": "hi"}\n')),
                       "d.jsonl:1: a record with keys 'text' matches no known layout"),
    "bad JSON": (lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("a") + "\n{oops\n")),
                 "d.jsonl:2: bad JSON"),
    "27 options": (lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("a") + "\n"
                                                                  + csqa_line("b", options=27) + "\n")),
                   "d.jsonl:2: 27 choices; at most 26 are supported (labels A-Z)"),
    "prompt longer than the context": (
        lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("short") + "\n"
                                                       + csqa_line("long-one", stem="why? " * 900) + "\n")),
        "question long-one ("),
    "hf data file of other columns": (
        lambda m, t: evaluate(m, t, "--dataset", "hf:" + write(t / "d.jsonl", '{"text": "hi"}\n')),
        "d.jsonl/train: columns 'text' match no known layout"),
    "hf field mapping without an answer": (
        lambda m, t: evaluate(m, t, "--dataset", "hf:" + write(t / "d.jsonl", '{"q": "hi"}\n'), "--fields",
                              "question=q,choices=c"), "--fields question=q,choices=c: missing answer"),
    "template without the question": (
        lambda m, t: evaluate(m, t, "--methods", "ppr", "--template", write(t / "t.txt", "Answer {choice_str}.\n")),
        "t.txt: no {question} placeholder; expected a template that shows the question with {question}"),
    "template with an unknown placeholder": (
        lambda m, t: evaluate(m, t, "--methods", "ppr", "--template", write(t / "t.txt", "{question} {choices}\n")),
        "t.txt: unknown placeholder(s) {choices}; expected"),
    "template with a chain-of-thought placeholder": (
        lambda m, t: evaluate(m, t, "--methods", "ppr", "--template", write(t / "t.txt", "{question} {num_lines}\n")),
        "--template: placeholder {num_lines} has no value in this prompt; expected one of {choice_str}, {gen_len}"),
    "output directory that is a file": (lambda m, t: evaluate(m, Path(write(t / "f", ""))),
                                        "/f: is a file; expected a directory (an existing one, or one to create)"),
    "output directory inside a file": (lambda m, t: ["drift", "--model", str(m), "--out", write(t / "f", "") + "/run"],
                                       "/f/run: lies inside "),
    "model args without a value": (lambda m, t: evaluate(m, t, "--model-args", "oops"),
                                   "--model-args oops: 'oops' is not key=value"),
    "missing adapter": (lambda m, t: ["drift", "--model", str(m), "--methods", "am-ppr", "--out", str(t)],
                        "am-ppr needs --adapter"),
    "corrupt store": (lambda m, t: evaluate(m, garbage_store(t)), "not a readable beliefdrift run store"),
    "report without a store": (lambda m, t: ["report", run_files(t / "nothing", {})], "no run store at"),
    "export to a directory": (lambda m, t: ["export", str(t), "--out", str(t)],
                              ": is a directory; expected a regular file or a new one (in an existing directory, or in "
                              "one to create)"),
    "report of a drift run": (lambda m, t: ["report", drift_run(t / "drift")],
                              "/drift: a drift run; report's tables are made of evaluate runs"),
    "reasoning past the context": (lambda m, t: ["reasoning", "--model", str(m), "--dataset", "demo", "-n", "1",
                                                 "--max-new-tokens", "5000", "--out", str(t)],
                                   "needs up to"),
    "reasoning with a template ending": (lambda m, t: ["reasoning", "--model", str(m), "--dataset", "demo",
                                                       "--template-ending", "paper", "--out", str(t)],
                                         "--template-ending: the pairs prompt has no question fence"),
    # malformed adapters: one line naming the directory, before the model loads (MODEL_NOT_LOADED)
    "adapter config without peft_type": (
        lambda m, t: evaluate(m, t, "--methods", "am-ppr", "--adapter", adapter(t / "a", '{"r": 2}')),
        "adapter_config.json names no peft_type"),
    "adapter config without peft_type in drift": (
        lambda m, t: ["drift", "--model", str(m), "--adapter", adapter(t / "a", '{"r": 2}'), "--out", str(t / "o")],
        "adapter_config.json names no peft_type"),
    "adapter config without peft_type in emd": (
        lambda m, t: ["emd", "--model", str(m), "--adapter", adapter(t / "a", '{"r": 2}'), "--out", str(t / "o")],
        "adapter_config.json names no peft_type"),
    "adapter config of bad JSON": (
        lambda m, t: ["emd", "--model", str(m), "--adapter", adapter(t / "a", '{"peft_type": '), "--out", str(t / "o")],
        "adapter_config.json is not readable JSON"),
    "adapter config not a mapping": (
        lambda m, t: ["drift", "--model", str(m), "--adapter", adapter(t / "a", '["LORA"]'), "--out", str(t / "o")],
        "adapter_config.json holds a list, not a mapping of settings"),
    "adapter config of an unknown peft_type": (
        lambda m, t: evaluate(m, t, "--methods", "am-ppr", "--adapter", adapter(t / "a", '{"peft_type": "NOPE"}')),
        "adapter_config.json names an unknown peft_type 'NOPE'"),
    "adapter without weights": (
        lambda m, t: evaluate(m, t, "--methods", "am-ppr", "--adapter", adapter(t / "a", json.dumps(LORA), False)),
        "no adapter weights (adapter_model.safetensors or adapter_model.bin)"),
    "adapter of another model": (
        lambda m, t: ["drift", "--model", str(m), *FAST, "--adapter", adapter(t / "a", json.dumps(LORA)),
                      "--out", str(t / "o")],
        "cannot load the adapter onto"),
    # a dataset of another kind: one line naming the file and what the command needs, before the model loads
    "math problems to evaluate": (lambda m, t: evaluate(m, t, "--dataset", GSM8K_FILE),
                                  f"--dataset {GSM8K_FILE}: evaluate needs multiple-choice questions"),
    "math problems to drift": (lambda m, t: ["drift", "--model", str(m), "--dataset", GSM8K_FILE, "--out", str(t)],
                               f"--dataset {GSM8K_FILE}: drift needs multiple-choice questions"),
    "math problems to emd": (lambda m, t: ["emd", "--model", str(m), "--dataset", GSM8K_FILE, "--out", str(t)],
                             f"--dataset {GSM8K_FILE}: emd needs multiple-choice questions"),
    "math problems to train on": (
        lambda m, t: ["train", "--model", str(m), "--dataset", GSM8K_FILE, "--out", str(t / "o")],
        f"--dataset {GSM8K_FILE}: train needs multiple-choice questions (a stem, two or more options, the correct "
        "option's label), but it holds math problems (GSM8K layout"),
    "math problems to validate on": (
        lambda m, t: ["train", "--model", str(m), "--dataset", "demo", "--eval-dataset", GSM8K_FILE, "--out",
                      str(t / "o")],
        f"--eval-dataset {GSM8K_FILE}: train's validation needs multiple-choice questions"),
    # numeric ranges (every option's: test_every_numeric_option_refuses_values_outside_its_range)
    "report mass threshold below 0": (lambda m, t: ["report", str(t), "--qc-path-mass", "-1"],
                                      "--qc-path-mass must be in [0, 1], got -1.0"),
    "report mass threshold nan": (lambda m, t: ["report", str(t), "--qc-path-mass", "nan"],
                                  "--qc-path-mass must be in [0, 1], got nan"),
    "yaml fraction above 1": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "qc_max_fraction: 2\n"),
                                            "--out", str(t)], "--qc-max-fraction must be in [0, 1], got 2.0"),
    "nucleus mass of 0": (lambda m, t: ["reasoning", "--model", str(m), "--top-p", "0", "--out", str(t)],
                          "--top-p must be in (0, 1], got 0.0"),
    # a preset's stage names its directory: one that would leave DIR is refused
    "paper stage outside its directory": (
        lambda m, t: ["paper", "--preset", write(t / "p.yaml", "stages:\n  ../escaped:\n    command: report\n"),
                      "--out", str(t / "o")],
        "stage '../escaped': a stage's name names its directory"),
    "paper preset name misspelt": (lambda m, t: ["paper", "--preset", "cpuu", "--out", str(t / "o")],
                                   "--preset cpuu: cpuu not found (expected cpu, paper or a YAML file); did you mean "
                                   "'cpu'?"),
    "paper preset not valid YAML": (
        lambda m, t: ["paper", "--preset", write(t / "p.yaml", "stages: [\n"), "--out", str(t / "o")],
        "p.yaml: not valid YAML (while parsing a flow node"),
    # an output never replaces a run store, another run's files or an input
    "export onto its own run store": (lambda m, t: ["export", drift_run(t / "a"), "--out", str(t / "a" / "run.sqlite")],
                                      "/a/run.sqlite: is a run store (or another SQLite database)"),
    "export into another run": (lambda m, t: ["export", drift_run(t / "a"), "--out",
                                              str(Path(drift_run(t / "b")) / "x.jsonl")],
                                "/b/x.jsonl: lies in the run directory"),
    "report over another run's tables": (lambda m, t: ["report", drift_run(t / "a"), "--out", drift_run(t / "b")],
                                         "/b: holds another run (its run.sqlite)"),
    "train config in its output directory": (
        lambda m, t: ["train", "--model", str(m), "--config", run_files(t / "run", {"config.yaml": "n: 1\n"}) +
                      "/config.yaml", "--out", str(t / "run")],
        "/config.yaml: the command writes config.yaml into its output directory (--out"),
    "drift data named as its output": (
        lambda m, t: ["drift", "--model", str(m), "--dataset", run_files(t / "run", {"records.csv": "Q?,a,b,c,d,A\n"})
                      + "/records.csv", "--out", str(t / "run")],
        "/records.csv: the command writes records.csv into its output directory (--out"),
    "empty output path": (lambda m, t: ["drift", "--model", str(m), "--out", ""],
                          "argument --out: expected a path, got an empty string"),
    "empty output path in yaml": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "out: ''\n")],
                                  "setting out: expected a path, got ''"),
    "output through a dangling link": (lambda m, t: ["drift", "--model", str(m), "--out", dangling(t / "link")],
                                       "/link: is a symbolic link to "),
    # YAML: a key given twice, an alias bomb, a float where an integer is meant
    "yaml key given twice": (lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "paths: 2\nsteps: 3\n"
                                                                                       "paths: 4\n"), "--out", str(t)],
                             "line 3: the key 'paths' given again (first on line 1)"),
    "yaml alias bomb": (lambda m, t: ["drift", "--config", write(t / "c.yaml", ALIAS_BOMB), "--out", str(t)],
                        "c.yaml: its aliases expand to more than 100000 values"),
    "yaml float for an integer": (lambda m, t: ["drift", "--config", write(t / "c.yaml", "paths: 1.0e+308\n"),
                                                "--out", str(t)], "setting paths: expected an integer, got 1e+308"),
    "yaml integer of 10^5 digits": (
        lambda m, t: ["evaluate", "--config", write(t / "c.yaml", "n: 2\npaths: " + "9" * 10**5 + "\n"), "--out",
                      str(t)], "c.yaml: line 2: an integer of more than 4300 digits"),
    "yaml hexadecimal integer too long to print": (
        lambda m, t: ["drift", "--config", write(t / "c.yaml", "seed: 0x" + "f" * 5000 + "\n"), "--out", str(t)],
        "c.yaml: line 1: an integer of more than 4300 digits"),
    "jsonl integer of 10^5 digits": (
        lambda m, t: evaluate(m, t, "--dataset", write(t / "d.jsonl", csqa_line("a") + "\n" + '{"id": '
                                                       + "9" * 10**5 + "}\n")),
        "d.jsonl:2: bad JSON: an integer of more than 4300 digits"),
    "math answer of 10^5 digits": (
        lambda m, t: ["reasoning", "--model", str(m), "--dataset", write(t / "m.jsonl", json.dumps(
            {"question": "How many?", "answer": "Many.\n#### " + "9" * 10**5}) + "\n"), "--out", str(t)],
        "m.jsonl:1: final answer: an integer of more than 4300 digits"),
    # one method in two spellings, or given twice: refused naming both (a run would merge them silently)
    "one method in two spellings": (lambda m, t: evaluate(m, t, "--methods", "ppr-seed5", "ppr-seed05"),
                                    "--methods: ppr-seed5 and ppr-seed05 name the same method (ppr-seed5); give each "
                                    "method once"),
    "one method given twice": (lambda m, t: ["drift", "--model", str(m), "--methods", "ppr", "ppr", "--out", str(t)],
                               "--methods: ppr given twice; give each method once"),
    "split outside the data directory": (
        lambda m, t: evaluate(m, t, "--dataset", "mmlu", "--split", "../../x", "--data-dir", str(t)),
        "mmlu: --split '../../x' is not a split name"),
    "paths and steps past the machine's memory": (lambda m, t: evaluate(m, t, "-J", "65536", "-N", "65536"),
                                                  "GiB, more than this machine's"),
    "every prompt too long, all skipped": (
        lambda m, t: ["drift", "--model", str(m), "--dataset", write(t / "d.jsonl", csqa_line("long",
                                                                                              stem="why? " * 900)
                                                                     + "\n"), *FAST, "--skip-long-prompts",
                      "--out", str(t / "run")], "nothing to run"),
    "train prompt longer than the context": (
        lambda m, t: ["train", "--model", str(m), "--dataset", write(t / "d.jsonl", csqa_line("long-one",
                                                                                              stem="why? " * 900)
                                                                     + "\n"), "-n", "0", "--paths", "4",
                      "--micro-batch", "2", "--grad-accum", "2", "--out", str(t / "train")],
        "question long-one ("),
    "adapter without finite weights": (
        lambda m, t: evaluate(m, t, "--methods", "am-ppr", "--adapter", adapter(t / "a", json.dumps(LORA),
                                                                                fill=np.nan)),
        "adapter_model.safetensors holds weights that are not finite numbers"),
    # report --html reads a run's other files: damaged ones are named
    "report --html of a bad summary.json": (
        lambda m, t: ["report", run_files(t / "r", {"summary.json": "{"}), "--html"],
        "/r/summary.json: not a readable summary.json"),
    "report --html of a binary log.csv": (lambda m, t: ["report", run_files(t / "r", {"log.csv": b"\xff\0"}), "--html"],
                                          "/r/log.csv:1: not UTF-8"),
    "report --html of an alias bomb config.yaml": (
        lambda m, t: ["report", run_files(t / "r", {"config.yaml": ALIAS_BOMB, "log.csv": "step\n"}), "--html"],
        "/r/config.yaml: its aliases expand to more than 100000 values"),
    "paper stage args not a mapping": (
        lambda m, t: ["paper", "--preset", write(t / "p.yaml", "stages:\n  e:\n    command: evaluate\n"
                                                               "    args: [n, 2]\n"), "--out", str(t / "o")],
        "p.yaml: stage e: args: expected a mapping of the command's settings, got ['n', 2]"),
}
#: Cases refused before any model loads (the test makes loading one fail).
MODEL_NOT_LOADED = {case for case in BAD_INPUTS if case.startswith(("adapter config", "adapter without", "math "))}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_2(case: str, tiny_model_dir: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    if case == "cuda without a GPU" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    if case in MODEL_NOT_LOADED:
        def no_model(*args: object, **kwargs: object) -> None:
            raise AssertionError("the model was loaded")

        monkeypatch.setattr("beliefdrift.backend.loading.load_model", no_model)
        monkeypatch.setattr("beliefdrift.amortize.trainer.load_model", no_model)
    argv, fragment = BAD_INPUTS[case]
    assert main(argv(tiny_model_dir, tmp_path)) == 2
    line = error_line(capsys)
    assert fragment in line
    assert line.startswith("beliefdrift")
    assert (tmp_path / "run.sqlite").exists() == (case == "corrupt store")  # a failed start writes no run store
    assert not (tmp_path / "o").exists()


def test_long_prompts_are_named_then_skipped_and_counted(tiny_model_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    data = write(tmp_path / "d.jsonl", csqa_line("short") + "\n" + csqa_line("long-one", stem="why? " * 900) + "\n")
    out = tmp_path / "run"
    assert main(evaluate(tiny_model_dir, out, "--dataset", data)) == 2
    assert "question long-one (" in error_line(capsys) and not out.exists()
    assert main(evaluate(tiny_model_dir, out, "--dataset", data, "--skip-long-prompts")) == 0
    captured = capsys.readouterr()
    assert "skipping 1 of 2 questions" in captured.err
    assert "1 questions skipped, prompt longer than the model's context (long-one)" in captured.out
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.done() == {("short", "direct")}


def test_debug_shows_the_traceback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--debug", "report", str(tmp_path)]) == 2
    assert main(["report", str(tmp_path), "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.count("Traceback") == 2 and err.count("error: no run store") == 2


def test_other_data_or_model_is_refused_and_a_failed_start_pins_nothing(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "run"
    data = tmp_path / "d.jsonl"
    write(data, csqa_line("a") + "\n" + csqa_line("b") + "\n")
    assert main(evaluate(tiny_model_dir / "nope", out, "--dataset", str(data))) == 2  # wrong --model first
    assert not out.exists()
    assert main(evaluate(tiny_model_dir, out, "--dataset", str(data), "-n", "0")) == 0  # the corrected command
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.count() == 2  # -n 0: all questions
    write(data, csqa_line("a") + "\n" + csqa_line("b", stem="Which is a vegetable?") + "\n")
    capsys.readouterr()
    assert main(evaluate(tiny_model_dir, out, "--dataset", str(data), "-n", "0")) == 2
    line = error_line(capsys)
    assert "questions_sha256: stored" in line and "the questions differ" in line and "n: stored" not in line


@pytest.fixture
def finished_run(tiny_model_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert main(evaluate(tiny_model_dir, out, "--methods", "direct", "ppr")) == 0
    return out


def test_report_and_export_leave_the_run_directory_as_it_was(finished_run: Path, tmp_path: Path) -> None:
    """They only read: no run.sqlite-wal or -shm beside the store, no lock file, no temporary; an export's
    temporaries that a killed export left (its process gone) are removed by the next export."""
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    abandoned = finished_run / f".export.jsonl.{dead.pid}.0badc0de.tmp"
    abandoned.write_text("{half a row")
    before = sorted(path.name for path in finished_run.iterdir())
    assert main(["report", str(finished_run), "--bootstrap", "10", "--out", str(tmp_path / "report")]) == 0
    assert main(["export", str(finished_run)]) == 0
    assert sorted(path.name for path in finished_run.iterdir()) == sorted(
        [name for name in before if name != abandoned.name] + ["export.jsonl"])
    assert [path.name for path in finished_run.glob("run.sqlite*")] == ["run.sqlite"]


def test_file_derived_text_is_escaped_in_the_tables(finished_run: Path, tmp_path: Path) -> None:
    """A data file named with Markdown's `|` and LaTeX's `^ ~ \\` heads a column of both tables: escaped, so the
    Markdown table keeps its columns and the LaTeX text compiles."""
    from beliefdrift.report.runs import load_run
    from beliefdrift.report.tables import RunScores, latex_tables, markdown_tables
    from beliefdrift.runs.scoring import QualityControl

    run, _ = load_run(finished_run, QualityControl(path_mass=0), 10)
    label = "a|b^c~d\\e_f"
    tables = markdown_tables([RunScores(label, run.scores)])
    for block in tables.split("\n\n"):  # each table: every row as many cells as its header
        rows = [line for line in block.splitlines() if line.startswith("|")]
        assert len({len(re.split(r"(?<!\\)\|", row)) for row in rows}) <= 1, block  # a cell ends at a bare `|`
    assert "a\\|b^c~d\\\\e_f" in tables
    latex = latex_tables([RunScores(label, run.scores)])
    assert r"a|b\textasciicircum{}c\textasciitilde{}d\textbackslash{}e\_f" in latex
    assert "^c" not in latex and "~d" not in latex


def test_messages_name_what_to_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A model cache that cannot be created (HOME unwritable) names BELIEFDRIFT_CACHE; running out of the machine's
    memory names the settings to lower, as running out of the GPU's does."""
    import beliefdrift.backend.model_files as model_files
    from beliefdrift.cli.main import error_message

    monkeypatch.setattr(model_files, "cache_dir", lambda: Path("/proc/self/.cache/beliefdrift/models"))
    message = error_message(FileNotFoundError(2, "No such file or directory", "/proc/self/.cache"), "demo")
    assert message.startswith("cannot create the model cache /proc/self/.cache/beliefdrift/models (No such file or "
                              "directory: /proc/self/.cache; is HOME writable?); set BELIEFDRIFT_CACHE")
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to "
                       "allocate 8000000000000 bytes")
    assert error_message(cpu, "drift").startswith("out of memory; lower --batch-questions or -J/--paths")
    assert error_message(MemoryError(), "emd").startswith("out of memory; lower --batch-budget")


def test_outputs_are_utf_8_whatever_the_locale(tmp_path: Path) -> None:
    """Non-ASCII data (an option "Café") in the C locale, UTF-8 mode off: written as UTF-8, not refused."""
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    code = "import sys; from pathlib import Path; from beliefdrift.files import write_atomic; " \
           "write_atomic(Path(sys.argv[1]), 'Caf\\u00e9 \\u03b8')"
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out.md")], env=env, capture_output=True,
                            text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "out.md").read_bytes() == "Café θ".encode()


def test_partial_run_is_marked_in_every_table_and_on_stdout(finished_run: Path, capsys: pytest.CaptureFixture):
    with sqlite3.connect(finished_run / "run.sqlite") as db:  # the last ppr unit, as if never stored
        qid = db.execute("SELECT question_id FROM results WHERE method = 'ppr' ORDER BY rowid DESC").fetchone()[0]
        for table in ("alternatives", "results", "checksums"):
            db.execute(f"DELETE FROM {table} WHERE question_id = ? AND method = 'ppr'", (qid,))
    capsys.readouterr()
    assert main(["report", str(finished_run), "--bootstrap", "10"]) == 0
    out = capsys.readouterr().out
    assert "is partial: 3 of 4 question × method results stored" in out
    for name in ("tables.md", "tables.tex"):
        assert (finished_run / name).read_text().count("partial: 3 of 4") >= 2  # Table 1 and Table 2


def test_corrupt_number_names_question_and_method(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    """A number written wrong (its checksum matches: the store holds what was written), caught by the scoring."""
    with RunStore.open(finished_run / "run.sqlite") as store:
        row = next(row for row in store.rows() if row.method == "direct")
    qid = row.question_id
    with sqlite3.connect(finished_run / "run.sqlite") as db:
        for table in ("results", "checksums"):
            db.execute(f"DELETE FROM {table} WHERE question_id = ? AND method = 'direct'", (qid,))
    with RunStore.open(finished_run / "run.sqlite") as store:
        store.add([dataclasses.replace(row, probs=np.array([np.nan, 0.5, 0.5, 0.0]))])
    capsys.readouterr()
    assert main(["report", str(finished_run), "--bootstrap", "10", "--qc-path-mass", "0"]) == 2
    assert f"question {qid!r}, method direct is not a probability vector" in error_line(capsys)


def test_read_only_run_is_reported_and_never_called_unreadable(
    finished_run: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("beliefdrift.runs.store.writable", lambda path: False)  # an archive (chmod does not bind root)
    assert main(["report", str(finished_run), "--out", str(finished_run.parent / "report"), "--bootstrap", "10"]) == 0
    capsys.readouterr()
    assert main(evaluate(tiny_model_dir, finished_run, "--methods", "direct", "ppr")) == 2
    line = error_line(capsys)
    assert "the run store is read-only" in line and "remove" not in line


def test_ctrl_c_is_one_line_with_the_stored_count(tiny_model_dir: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    import beliefdrift.runs.evaluate as evaluation

    real, calls = evaluation.question_rows, []

    def interrupted_second_question(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "question_rows", interrupted_second_question)
    out = tmp_path / "run"
    assert main(evaluate(tiny_model_dir, out)) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.rstrip().splitlines()[-1] == (f"beliefdrift evaluate: interrupted; 1 question × method results stored "
                                             f"in {out / 'run.sqlite'}; run the same command again to resume")
    monkeypatch.setattr(evaluation, "question_rows", real)
    assert main(evaluate(tiny_model_dir, out)) == 0
    with RunStore.open(out / "run.sqlite", read_only=True) as store:
        assert store.count() == 2


def interruptible() -> None:
    """SIGINT as a terminal sends it, also where the tests run as a background job (which ignores SIGINT)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(argv: list[str], out: Path, sig: signal.Signals) -> tuple[int, str]:
    """`python -m beliefdrift ARGV` sent `sig` once its store holds a result: (its exit status, its stderr)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen([sys.executable, "-m", "beliefdrift", *argv], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + HANG_S
    try:
        while not _stored(out / "run.sqlite"):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        process.send_signal(sig)
        _, err = process.communicate(timeout=HANG_S)
    finally:
        process.kill()
    return process.returncode, err


def test_sigterm_in_a_real_process_says_what_is_stored(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A scheduler ending the job (SIGTERM) gets the line Ctrl-C gets, and exit status 128 + 15."""
    out = tmp_path / "run"
    code, err = interrupted(evaluate(tiny_model_dir, out, "-n", "30", "--methods", "ppr"), out, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, err[-2000:]
    last = err.rstrip().splitlines()[-1]
    assert "Traceback" not in err and re.fullmatch(rf"beliefdrift evaluate: interrupted; \d+ question × method results "
                                                   rf"stored in {re.escape(str(out / 'run.sqlite'))}; run the same "
                                                   "command again to resume", last), last


def _stored(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute("SELECT count(*) FROM results").fetchone()[0]
    except sqlite3.Error:
        return 0


def test_cuda_out_of_memory_names_the_setting_to_lower(tiny_model_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch):
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("beliefdrift.runs.evaluate.question_rows", out_of_memory)
    assert main(evaluate(tiny_model_dir, tmp_path)) == 2
    assert "out of GPU memory; lower --batch-questions or -J/--paths" in error_line(capsys)


# ---------------------------------------------------------------------------------------- numeric ranges


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    return next(action for action in build_parser()._actions if action.dest == "command").choices


def is_float(field: dataclasses.Field) -> bool:
    return "float" in str(field.type)  # the annotation, as written: "float", "float | None"


def numeric_options() -> list[tuple[str, dataclasses.Field]]:
    """(command, field) of every numeric setting of every command."""
    found = []
    for command, subparser in command_parsers().items():
        for cls in subparser.dataclass_types:
            hints = typing.get_type_hints(cls)
            for field in dataclasses.fields(cls):
                kinds = typing.get_args(hints[field.name]) or (hints[field.name],)
                kinds = [typing.get_args(k)[0] if typing.get_origin(k) is list else k for k in kinds]
                if int in kinds or float in kinds:
                    found.append((command, field))
    return found


def outside(bounds: Range, decimals: bool) -> list[str]:
    """Values just outside `bounds` (the open end itself), plus nan and ±inf for a setting with `decimals`."""
    values = []
    if bounds.low is not None:
        values.append(bounds.low if bounds.low_open else bounds.low - (0.5 if decimals else 1))
    if bounds.high is not None:
        values.append(bounds.high if bounds.high_open else bounds.high + (0.5 if decimals else 1))
    return [str(v) for v in values] + (["nan", "inf", "-inf"] if decimals else [])


def test_every_numeric_option_declares_its_range() -> None:
    options = numeric_options()
    assert len(options) > 40 and {command for command, _ in options} >= {"demo", "drift", "emd", "evaluate", "report",
                                                                          "reasoning", "train"}
    undeclared = [f"{command} {flag_name(field)}" for command, field in options
                  if field.metadata["range"] is None or field.metadata["range"].high is None]  # an upper bound too
    assert undeclared == []
    for command, field in options:  # every default lies in its range
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        assert all(v in field.metadata["range"] for v in (default if isinstance(default, list) else [default])
                   if v is not None), (command, field.name)


@pytest.mark.parametrize("command,field", numeric_options(), ids=lambda x: x if isinstance(x, str) else x.name)
def test_every_numeric_option_refuses_values_outside_its_range(command: str, field: dataclasses.Field,
                                                               tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bounds: Range = field.metadata["range"]
    flag = f"--{field.name.replace('_', '-')}"
    runs = [str(tmp_path)] if command == "report" else []
    for value in outside(bounds, is_float(field)):
        capsys.readouterr()
        assert main([command, *runs, f"{flag}={value}", "--out", str(tmp_path / "o")]) == 2, value
        line = error_line(capsys)
        assert f"{flag_name(field)} must be {bounds}, got " in line, line
        assert not (tmp_path / "o").exists()


def test_help_shows_each_range(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "below this (in [0, 1]) (default: 0.5)" in text and "(in [1, 1000000]) (default: 1000)" in text


# ---------------------------------------------------------------------------------------- question ids as file names

#: Question ids that would leave the output directory, or fail, as parts of a file name; "Q1" and "q1" differ only by
#: case (one file on macOS's and Windows' file systems).
HOSTILE_IDS = ("x/../../escaped-by-id", "..", "../..", "/tmp/beliefdrift-escaped-absolute", "nul\x00in-id",
               "q" * 400, "back\\..\\slash", "Q1", "q1", "é/ü")


def hostile_dataset(path: Path) -> str:
    return write(path, "".join(csqa_line(qid) + "\n" for qid in HOSTILE_IDS))


def test_safe_names_stay_in_their_directory_and_stay_distinct() -> None:
    texts = [*HOSTILE_IDS, "", ".", "-rf", "a.b", "a b", "a-b", "a/b", "CON", "demo-001", "x" * 100_000]
    names = [safe_name(text) for text in texts]
    assert len(set(names)) == len(texts)  # distinct, all lowercase: distinct on case-insensitive file systems too
    for name in names:
        assert re.fullmatch(r"[a-z0-9_][a-z0-9_-]{0,50}", name), name
    assert safe_name("demo-001") == "demo-001" and safe_name("1afa02df02c908a558b4036e80242fac").startswith("1afa")
    assert safe_name("x/../../Escaped").startswith("x-escaped-")


COMMANDS_ON_HOSTILE_IDS = {
    "drift": lambda m, data: ["drift", "--model", str(m), "--dataset", data, *FAST,
                              "--plot-questions", str(len(HOSTILE_IDS))],
    "emd": lambda m, data: ["emd", "--model", str(m), "--dataset", data, *FAST, "-K", "3", "--prefix-lengths", "0",
                            "--top-k", "2", "--burn-in", "1", "-k", "2", "--distance", "l1",
                            "--noise-floor-replicates", "2"],
    "evaluate": lambda m, data: ["evaluate", "--model", str(m), "--dataset", data, *FAST, "--methods", "direct",
                                 "ppr", "--bootstrap", "10", "--qc-path-mass", "0"],
    "reasoning": lambda m, data: ["reasoning", "--model", str(m), "--dataset", data, "-J", "1", "-N", "1", "-m", "0",
                                  "--max-new-tokens", "12", "--max-solution-tokens", "4"],
}


@pytest.mark.parametrize("command", list(COMMANDS_ON_HOSTILE_IDS))
def test_question_ids_never_leave_the_output_directory(command: str, tiny_model_dir: Path, tmp_path: Path) -> None:
    """drift names a figure after each question; the others name none, and must not start to."""
    data = hostile_dataset(tmp_path / "hostile.jsonl")
    out = tmp_path / "a" / "b" / "out"
    assert main([*COMMANDS_ON_HOSTILE_IDS[command](tiny_model_dir, data), "--out", str(out)]) == 0
    if command == "evaluate":
        assert main(["report", str(out), "--bootstrap", "10", "--qc-path-mass", "0", "--figure-formats", "png",
                     "pdf", "--out", str(out / "report")]) == 0
    written = [path for path in tmp_path.rglob("*") if path.is_file() and path != tmp_path / "hostile.jsonl"]
    outside = [path for path in written if path.parent not in (out, out / "report")]
    assert written and outside == []  # none above OUT, none in a directory a question id made
    assert not Path("/tmp/beliefdrift-escaped-absolute.png").exists()
    if command == "drift":  # one figure per question, each named after its own id
        figures = {path.name for path in written if path.name.startswith("marginal_drift_") and path.suffix == ".png"}
        assert figures == {f"marginal_drift_{safe_name(qid)}.png" for qid in HOSTILE_IDS}
        assert len(figures) == len(HOSTILE_IDS)


def test_a_preset_stage_named_outside_its_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for name in ("../escaped", "/tmp/beliefdrift-escaped", "a/b", "..", "Train"):
        preset = write(tmp_path / "p.yaml", f"stages:\n  {json.dumps(name)}:\n    command: report\n")
        assert main(["paper", "--preset", preset, "--out", str(tmp_path / "o")]) == 2
        assert f"stage {name!r}: a stage's name names its directory" in error_line(capsys)
    assert not (tmp_path / "o").exists() and not (tmp_path / "escaped").exists()


# ---------------------------------------------------------------------------------------- a flipped bit in a store


def flip_mantissa_bit(blob: bytes, index: int = 0) -> bytes:
    """The .npy `blob` with the lowest mantissa bit but three of its `index`-th number flipped: still a valid number,
    a little off (nothing but a checksum can tell)."""
    array = from_blob(blob)
    raw = bytearray(blob)
    raw[len(blob) - array.nbytes + index * array.itemsize] ^= 0b1000  # little-endian: the mantissa's lowest byte
    flipped = from_blob(bytes(raw))
    assert np.isfinite(flipped).all() and flipped.flat[index] != array.flat[index]
    return bytes(raw)


def flip_stored(run: Path, table: str, column: str, method: str, index: int = 0) -> str:
    """Flip a mantissa bit of `column` in the stored row of `method`'s second question; that question's id."""
    with sqlite3.connect(run / "run.sqlite") as db:
        qid, blob = db.execute(f"SELECT question_id, {column} FROM {table} WHERE method = ? ORDER BY question_id "
                               "LIMIT 1 OFFSET 1", (method,)).fetchone()
        db.execute(f"UPDATE {table} SET {column} = ? WHERE question_id = ? AND method = ?",
                   (flip_mantissa_bit(blob, index), qid, method))
    return qid


def test_a_flipped_bit_in_a_stored_probability_is_refused(finished_run: Path, capsys: pytest.CaptureFixture) -> None:
    qid = flip_stored(finished_run, "results", "probs", "ppr", index=1)
    capsys.readouterr()
    assert main(["report", str(finished_run), "--bootstrap", "10"]) == 2
    line = error_line(capsys)
    assert f"question {qid!r}, method ppr does not match its checksum (probs changed since it was written" in line


def test_a_flipped_bit_in_stored_thetas_or_alternatives_is_refused(finished_run: Path) -> None:
    qid = flip_stored(finished_run, "results", "thetas", "ppr", index=7)
    with RunStore.open(finished_run / "run.sqlite", read_only=True) as store:
        store.rows(trajectories=False)  # θ_n not read: not checked
        with pytest.raises(StoreError, match=rf"question {qid!r}, method ppr does not match its checksum "
                                             r"\(thetas changed"):
            store.rows()
    qid = flip_stored(finished_run, "alternatives", "probs", "ppr")
    with RunStore.open(finished_run / "run.sqlite", read_only=True) as store, pytest.raises(
            StoreError, match=rf"question {qid!r}, method ppr does not match its checksum \(alternatives changed"):
        store.rows(trajectories=False)


def test_the_reliability_page_counts_the_cases(tmp_path: Path) -> None:
    """docs/reliability.md's table: the bad inputs and the numeric options (values) of each command, as tested here."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    section = page.split("## Cases by command", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0]: cells[1:3] for line in section.splitlines() if line.startswith("| ") and not line.startswith(
        "| command") for cells in [[cell.strip(" *") for cell in line.strip().strip("|").split("|")]]}
    bad = Counter(argv(tmp_path / "model", tmp_path)[0] for argv, _ in BAD_INPUTS.values())
    options, values = Counter(), Counter()
    for command, field in numeric_options():
        options[command] += 1
        values[command] += len(outside(field.metadata["range"], is_float(field)))
    expected = {command: [str(bad[command]), f"{options[command]} ({values[command]})"]
                for command in command_parsers()}
    expected["all"] = [str(bad.total()), f"{options.total()} ({values.total()})"]
    assert rows == expected


def test_a_yaml_file_of_too_many_plain_values_is_not_called_an_alias_bomb(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """10^5 plain keys (no alias) exceed the values a YAML file may hold: the line says so, not "an alias bomb?", and
    the file is refused once that many are read (here, the limit lowered to 1000, long before its end)."""
    monkeypatch.setattr("beliefdrift.yaml_files.YAML_MAX_VALUES", 1000)
    config = write(tmp_path / "c.yaml", "".join(f"k{i}: 1\n" for i in range(10**5)))
    assert main(["emd", "--config", config, "--out", str(tmp_path / "o")]) == 2
    line = error_line(capsys)
    assert line.endswith("c.yaml: holds more than 1000 values, the most a YAML file may hold; expected a settings "
                         "file") and "alias" not in line


# ---------------------------------------------------------------------------------------- credentials


class RefusingServer:
    """An OpenAI-style server on 127.0.0.1, run in a thread in a `with` block, that refuses every request (401) and
    echoes in its message the Authorization header and the path it was sent, as a careless server does."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                body = json.dumps({"error": {"message": f"bad credentials {self.headers.get('Authorization')} for "
                                                        f"{self.path}"}}).encode()
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def __enter__(self) -> str:
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return f"127.0.0.1:{self.http.server_address[1]}"

    def __exit__(self, *exc: object) -> None:
        self.http.shutdown()
        self.http.server_close()


def test_a_key_in_the_model_url_is_never_printed_or_written(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`--model openai:http://u:KEY@host/v1` or `…/v1?api_key=KEY` to a server that refuses it, echoing what it was
    sent: the error line, the `--debug` traceback and the progress notes say `***` where the key was, and no file
    under --out holds it; the key the client reads from `api_key_env` (which it registers) is masked in the server's
    echo too."""
    pytest.importorskip("httpx")
    key = "sk-url-" + os.urandom(8).hex()
    registered = "sk-env-" + os.urandom(8).hex()
    monkeypatch.setenv("BELIEFDRIFT_TEST_KEY", registered)
    with RefusingServer() as host:
        for spec, extra, debug in ((f"openai:http://u:{key}@{host}/v1", [], []),
                                   (f"openai:http://{host}/v1?api_key={key}", [], ["--debug"]),
                                   (f"openai:http://{host}/v1", ["--model-args",
                                                                 "api_key_env=BELIEFDRIFT_TEST_KEY"], [])):
            out = tmp_path / "run"
            capsys.readouterr()
            assert main([*debug, "evaluate", "--model", spec, *extra, "--dataset", "demo", "-n", "1",
                         "--out", str(out)]) == 2
            captured = capsys.readouterr()
            assert "the server refused the request (HTTP 401" in error_line_of(captured.err)
            assert "loading openai:http://" in captured.err and ("Traceback" in captured.err) == bool(debug)
            for secret in (key, registered):
                assert secret not in captured.err + captured.out
                assert [path for path in tmp_path.rglob("*") if path.is_file()
                        and secret.encode() in path.read_bytes()] == []


def test_a_bugs_traceback_shows_no_key(tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug (an error no user can fix) keeps its traceback, and its message and the one it arose from lose their
    credentials."""
    def bug(*args: object, **kwargs: object) -> None:
        try:
            raise KeyError("while asking http://u:sk-bug-1234@host/v1")
        except KeyError:
            raise RuntimeError("unexpected answer from http://host/v1?api_key=sk-bug-5678") from None

    monkeypatch.setattr("beliefdrift.runs.evaluate.question_rows", bug)
    with pytest.raises(RuntimeError) as raised:
        main(evaluate(tiny_model_dir, tmp_path))
    assert str(raised.value) == "unexpected answer from http://host/v1?api_key=***"
    assert str(raised.value.__context__) == "'while asking http://***@host/v1'"


def test_paper_keeps_no_key_in_its_stages_or_their_listing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`paper --model openai:http://u:KEY@host/v1`: the stage command lines it lists and records in stages.json (here
    of a stage that fails) say `***`, and a run with another key finds the same command lines."""
    out, argv = tmp_path / "paper", ["paper", "--preset", "cpu", "--stages", "train", "--out", str(tmp_path / "paper")]
    assert main([*argv, "--model", "openai:http://u:sk-paper-1234@127.0.0.1:9/v1", "--list-stages"]) == 0
    listing = capsys.readouterr().out
    assert "openai:http://***@127.0.0.1:9/v1" in listing and "sk-paper" not in listing
    for key in ("sk-paper-1234", "sk-paper-5678"):
        assert main([*argv, "--model", f"openai:http://u:{key}@127.0.0.1:9/v1"]) == 2
        captured = capsys.readouterr()
        assert "sk-paper" not in captured.err + captured.out
        stages = (out / "stages.json").read_text()
        assert "sk-paper" not in stages and "openai:http://***@127.0.0.1:9/v1" in stages
        assert json.loads(stages)["stages"]["train"]["status"] == "failed"


def error_line_of(err: str) -> str:
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    return lines[0]


def test_a_key_in_the_model_url_is_not_stored_and_names_the_same_run(tmp_path: Path) -> None:
    """The run identity (run.sqlite's config, and every summary, table and page copied from it) holds the model's
    URL with `***` for its key, so a key changed between a run and its resume names the same run."""
    pytest.importorskip("httpx")
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from beliefdrift.config.evaluate import EvalConfig
    from beliefdrift.data.registry import load_dataset
    from beliefdrift.runs.identity import run_identity

    class Models(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = b'{"data": [{"id": "tiny"}]}' if self.path == "/v1/models" else b"{}"
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    questions = load_dataset("demo")[:2]
    try:
        identities = [run_identity("evaluate", EvalConfig(model=f"openai:http://u:{key}@{host}/v1",
                                                          out=tmp_path / "run"), questions)
                      for key in ("KEY-one-1234", "KEY-two-5678")]
    finally:
        server.shutdown()
        server.server_close()
    assert identities[0]["model"] == f"openai:http://***@{host}/v1" and identities[0]["served_model"] == "tiny"
    assert identities[0] == identities[1] and "KEY-" not in json.dumps(identities)


def test_an_api_key_that_cannot_be_a_header_is_refused_without_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """An `api_key_env` value with a line break (which would inject a header), a space, a control or non-ASCII
    character: one line naming the variable and the character's position, never the value."""
    from beliefdrift.credentials import environment_secret
    from beliefdrift.errors import UserError

    setting = "--model-args api_key_env=BELIEFDRIFT_TEST_KEY"
    for value, what in (("sk-abc\r\nX-Injected: 1", "a line break (character 7 of"), ("sk abc", "a space"),
                        ("sk-\tabc", "a control character"), ("sk-ключ", "a non-ASCII character")):
        monkeypatch.setenv("BELIEFDRIFT_TEST_KEY", value)
        with pytest.raises(UserError) as refused:
            environment_secret("BELIEFDRIFT_TEST_KEY", setting)
        message = str(refused.value)
        assert message.startswith(f"{setting}: BELIEFDRIFT_TEST_KEY holds {what}") and len(message.splitlines()) == 1
        assert value not in message and "abc" not in message and "ключ" not in message
    monkeypatch.setenv("BELIEFDRIFT_TEST_KEY", "")
    with pytest.raises(UserError, match="BELIEFDRIFT_TEST_KEY is not set"):
        environment_secret("BELIEFDRIFT_TEST_KEY", setting)


def test_redact_masks_every_credential_and_nothing_else() -> None:
    from beliefdrift.credentials import redact, register_secret, register_url_secrets

    masked = {
        "openai:http://u:KEY@host/v1": "openai:http://***@host/v1",
        "https://TOKEN@host:8000/v1/models: HTTP 401": "https://***@host:8000/v1/models: HTTP 401",
        "http://u:p@ss@host/v1": "http://***@host/v1",
        "http://h/v1?api_key=KEY&x=2": "http://h/v1?api_key=***&x=2",
        "http://h/v1?x=1&access_token=KEY#top": "http://h/v1?x=1&access_token=***#top",
        "--model-args token=hf_KEY,revision=main": "--model-args token=***,revision=main",
    }
    kept = ["--model-args api_key_env=VAR: not set", "'oops' is not key=value", "max_new_tokens=5",
            "http://host/v1/models: HTTP 404", "a@b.c", "/data/x@y.jsonl"]
    assert {text: redact(text) for text in masked} == masked
    assert [redact(text) for text in kept] == kept
    assert all(redact(redact(text)) == redact(text) for text in masked)
    register_secret("sk-registered-" + "7" * 8)
    register_url_secrets("http://user:pass-word-1@host/v1?key=query-secret-2")
    echoed = "the server said: Bearer sk-registered-77777777, Basic dXNlcjpwYXNzLXdvcmQtMQ==, query-secret-2"
    assert redact(echoed) == "the server said: Bearer ***, Basic ***, ***"


# ---------------------------------------------------------------------------------------- figures


def test_figure_texts_from_ids_are_short_literal_and_quiet(tiny_model_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """drift's per-question figures title each question by its id: an id with `$…$` (which matplotlib would read as
    math, and fail on), one of 10^5 characters (whose layout took minutes at 10^6), one in a script the font lacks and
    one holding NUL give short, literal titles, and `-q` shows no warning of a missing glyph."""
    from beliefdrift.report import plots

    titles: list[str] = []
    save_figure = plots.save_figure

    def keep_title(fig: typing.Any, path: Path, **kwargs: typing.Any) -> list[Path]:
        titles.append(fig.get_suptitle())
        return save_figure(fig, path, **kwargs)

    monkeypatch.setattr(plots, "save_figure", keep_title)
    ids = (r"math $\frac{$ id", "L" * 10**5, "問題", "nul\x00in-id")
    data = write(tmp_path / "d.jsonl", "".join(csqa_line(qid) + "\n" for qid in ids))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["-q", "drift", "--model", str(tiny_model_dir), "--dataset", data, *FAST, "--plot-questions",
                     "4", "--out", str(tmp_path / "run")]) == 0
    per_question = [title for title in titles if title.startswith(("math", "LLL", "問題", "nul"))]
    assert len(per_question) == 4 and all(len(title) <= plots.TITLE_LENGTH + 1 for title in per_question)
    assert per_question[0].startswith(r"math \$\frac{\$ id: ") and per_question[1].endswith("…")
    assert per_question[3].startswith("nul in-id: ")
    assert [str(w.message) for w in caught if "missing from" in str(w.message)] == []


# ------------------------------------------------------------------------------- issue 48 §5, §6, §7; issue 49 §3


def test_export_writes_csv_and_refuses_a_suffix_of_another_format(finished_run: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """Issue 48 §5: `export --out x.csv` wrote JSON lines. An --out ending in .csv (or --format csv) writes CSV, one
    row per question × method with the records' values (floats exact, nested values as JSON text); a suffix naming
    another format than --format is refused and nothing written; `--out -` writes to standard output."""
    import beliefdrift as bd

    records = bd.open_run(finished_run).records(trajectories=True)
    assert main(["export", str(finished_run), "--out", str(tmp_path / "x.csv")]) == 0
    with open(tmp_path / "x.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["question_id"], row["method"]) for row in rows] == [(r["question_id"], r["method"]) for r in records]
    for row, record in zip(rows, records, strict=True):
        assert json.loads(row["probs"]) == record["probs"]
        assert float(row["valid_mass_mean"]) == record["valid_mass_mean"]
        assert json.loads(row["valid_mass"]) == record["valid_mass"]
    assert main(["export", str(finished_run), "--format", "csv", "--out", str(tmp_path / "y.txt")]) == 0
    assert (tmp_path / "y.txt").read_text() == (tmp_path / "x.csv").read_text()
    capsys.readouterr()
    for given, suffix in (("jsonl", "csv"), ("parquet", "jsonl"), ("csv", "parquet")):
        out = tmp_path / f"z.{suffix}"
        assert main(["export", str(finished_run), "--format", given, "--out", str(out)]) == 2
        assert f"a .{suffix} file, but --format {given}; give --format {suffix}" in error_line(capsys)
        assert not out.exists()
    assert main(["export", str(finished_run), "--out", "-"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == json.loads(json.dumps(records))
    assert not (tmp_path / "-").exists() and not Path("-").exists()


def test_export_writes_only_to_a_regular_file_or_a_new_one(finished_run: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """Issue 49 §3: an export replaced `/dev/null` and the `/dev/stdout` link with a file and hung on a FIFO (opened
    to see whether it was a database). A named pipe, a symbolic link and a device are refused at once, left as they
    were, and never opened."""
    fifo, link, target = tmp_path / "pipe", tmp_path / "link.jsonl", tmp_path / "target.jsonl"
    os.mkfifo(fifo)
    target.write_text("keep\n")
    link.symlink_to(target)
    outs = {fifo: "is a named pipe (FIFO)", link: "is a symbolic link"}
    try:  # a device of our own, as root can make one (replacing it would harm nothing else)
        os.mknod(tmp_path / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
        outs[tmp_path / "null"] = "is a character device"
    except PermissionError:
        pass
    for out, why in outs.items():
        codes: list[int] = []
        argv = ["export", str(finished_run), "--out", str(out)]
        export = threading.Thread(target=lambda argv=argv, codes=codes: codes.append(main(argv)), daemon=True)
        export.start()
        export.join(60)
        if export.is_alive():  # blocked opening the pipe: a writer lets it go on
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            export.join()
            pytest.fail(f"export --out {out} hung")
        assert codes == [2] and f"{why}; expected a regular file or a new one" in error_line(capsys)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and target.read_text() == "keep\n"
    assert all(stat.S_ISCHR(os.lstat(out).st_mode) for out in outs if out.name == "null")


def test_local_names_fail_at_once(tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48 §6: a missing data file spent 43 s on hub retries and was called an unknown dataset, a misspelt
    model name 15 s on the hub, and `report /nonexistent` said "no run output". Each is now named at once, and
    nothing asks the hub (here: asking it fails the test)."""
    import datasets
    import huggingface_hub

    def hub(*args: object, **kwargs: object) -> None:
        raise AssertionError("asked the Hugging Face hub")

    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(huggingface_hub, "file_exists", hub)
    monkeypatch.setattr(datasets, "load_dataset", hub)
    nowhere = tmp_path / "nowhere"
    cases = {
        ("evaluate", "--model", str(tiny_model_dir), "--dataset", str(nowhere / "questions.jsonl")):
            f"dataset {nowhere / 'questions.jsonl'}: no such file",
        ("evaluate", "--model", str(tiny_model_dir), "--dataset", f"hf:{nowhere}"):
            f"hf:{nowhere}: no such file or directory",
        ("evaluate", "--model", "smollm2-135m-instuct", "--dataset", "demo"):
            "nor a cached hub id; did you mean 'smollm2-135m-instruct'?",
        ("report", str(nowhere)): f"RUN_DIR {nowhere}: no such directory",
        ("report", str(nowhere), "--html"): f"RUN_DIR {nowhere}: no such directory",
        ("export", str(nowhere)): f"run directory {nowhere}: no such directory",
    }
    for argv, fragment in cases.items():
        assert main([*argv, "--out", str(tmp_path / "out")] if argv[0] == "evaluate" else list(argv)) == 2
        assert fragment in error_line(capsys), argv
    assert not (tmp_path / "out").exists()


def test_flags_without_a_value_show_no_default() -> None:
    """Issue 48 §7: `beliefdrift --help` showed `-q, --quiet … (default: 0)`: a flag that takes no value shows none."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices.values()
    for text in (parser.format_help(), *(command.format_help() for command in commands)):
        flags = re.findall(r"\n  (-q, --quiet|-v, --verbose|--debug)(.*?)(?=\n  -|\n\n|\Z)", text, re.S)
        assert len(flags) == 3 and not [flag for flag, help in flags if "default" in help], flags
