"""Numeric fingerprint: small float32 runs of every command with each numeric output hashed.

Comparing the fingerprints of two versions shows that a change (a refactor, a speed-up) left every number
byte-identical.

    python bench/fingerprint.py run OUT [--rev REV] [--data-dir DIR] [--model-cache DIR] [--force]
    python bench/fingerprint.py compare A B

`run` runs evaluate (demo, csqa), drift, emd, reasoning and train (settings in `commands`, the rest at each
command's default so that a changed default shows up) one after the other (a few minutes on 2 cores), with the
checkout's code or with `--rev` that of a temporary git worktree of REV. Each command writes OUT/<name>/ and
OUT/<name>.log; OUT/hashes.txt has one `<command> TAB <entry> TAB <sha256>` line per output, OUT/hash_notes.txt
what is left out and why. Converted models are cached per hash of the backend/ sources (the converting code).
`compare` takes two OUT directories or hashes.txt files: `IDENTICAL (n entries)` (exit 0) or the entries that
differ or exist on one side only (exit 1).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from platformdirs import user_cache_dir

REPO = Path(__file__).resolve().parents[1]
TIMING_KEYS = {"seconds", "wall", "wall_s", "elapsed", "time", "timestamp", "started", "finished", "duration"}
SKIPPED_SUFFIXES = (".png", ".pdf", ".svg", ".log", ".sqlite-wal", ".sqlite-shm")
TEXT_EXCLUDED = re.compile(r"(\bseconds?\b|\bwall\b|\belapsed\b|\d+(\.\d+)?\s?s\b|/tmp/|/work/|version|"
                           r"beliefdrift \d|torch \d|transformers \d|written|wrote)", re.IGNORECASE)


def commands(code: Path, out: Path) -> dict[str, list[str]]:
    """The argv after `python -m beliefdrift` of every command, writing into OUT/<name>/."""
    methods, paths = ["--methods", "direct", "ppr", "ppr-seed1", "ppr-seed5"], ["--paths", "4", "--steps", "6"]
    argvs = {
        "evaluate-demo": ["evaluate", "--dataset", "demo", "-n", "4", *methods, *paths],
        "evaluate-csqa": ["evaluate", "--dataset", "csqa", "-n", "3", *methods, *paths],
        "drift-demo": ["drift", "--dataset", "demo", "-n", "3", *paths],  # methods: the default
        "emd-demo": ["emd", "--dataset", "demo", "-n", "2", *paths, "-K", "3", "--prefix-lengths", "0", "2",
                     "--burn-in", "2", "-k", "3", "--noise-floor-replicates", "5"],
        "reasoning-gsm8k": ["reasoning", "--dataset", "gsm8k", "-n", "1", "-J", "2", "-N", "3", "-m", "1", "--tau",
                            "1", "--max-new-tokens", "160", "--seed-max-new-tokens", "64",
                            "--max-solution-tokens", "32"],
        "train": ["train", "--config", str(code / "configs/train-cpu.yaml"), "-n", "1", "--prefix-lengths", "2",
                  "--paths", "4", "--micro-batch", "2", "--grad-accum", "2", "--epochs", "2", "--eval-n", "1",
                  "--eval-paths", "4", "--eval-horizon", "3", "--eval-prefix-lengths", "0"],
    }
    return {name: [*argv, "--dtype", "float32", "--out", str(out / name)] for name, argv in argvs.items()}


def git(*args: str, tree: Path = REPO) -> str:
    result = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


@contextmanager
def source_tree(rev: str | None) -> Iterator[Path]:
    """The checkout itself, or a detached worktree of `rev` that is removed again whatever happens."""
    if rev is None:
        yield REPO
        return
    sha = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    with tempfile.TemporaryDirectory(prefix="fingerprint-") as tmp:
        tree = Path(tmp) / sha[:12]
        try:
            git("worktree", "add", "--detach", str(tree), sha)
            yield tree
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], capture_output=True)
            git("worktree", "prune")


def model_cache(root: Path, code: Path) -> Path:
    """BELIEFDRIFT_CACHE for `code`: keyed by its backend/ sources (the code that converts the GGUF model)."""
    digest = hashlib.sha256()
    backend = code / "src/beliefdrift/backend"
    for path in sorted(backend.rglob("*.py")):
        digest.update(str(path.relative_to(backend)).encode() + b"\0" + path.read_bytes() + b"\0")
    return root / digest.hexdigest()[:12]


def run(out: Path, code: Path, data_dir: Path, cache: Path) -> int:
    """Run every command with `code`'s sources into `out`; the number of commands that failed."""
    env = {**os.environ, "PYTHONPATH": str(code / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONHASHSEED": "0", "MPLBACKEND": "Agg",
           "TOKENIZERS_PARALLELISM": "false", "BELIEFDRIFT_DATA": str(data_dir), "BELIEFDRIFT_CACHE": str(cache)}
    probe = subprocess.run([sys.executable, "-c", "import beliefdrift; print(beliefdrift.__file__)"], env=env,
                           capture_output=True, text=True)
    where, expected = probe.stdout.strip(), code / "src/beliefdrift/__init__.py"
    if probe.returncode or Path(where).resolve() != expected.resolve():
        sys.exit(f"beliefdrift must import from {expected}, got {where or probe.stderr.strip()[-500:]}")
    failed = 0
    with open(out / "commands.txt", "w") as log:
        dirty = " + uncommitted changes in src/" if git("status", "--porcelain", "--", "src", tree=code) else ""
        log.write(f"# code {code} at {git('rev-parse', 'HEAD', tree=code)}{dirty}\n# beliefdrift imported from "
                  f"{where}\n# data {data_dir}\n# model cache {cache}\n")
        for name, argv in commands(code, out).items():
            argv = [sys.executable, "-m", "beliefdrift", *argv]
            print(f"== {name}: {' '.join(argv)}", flush=True)
            start = time.perf_counter()
            with open(out / f"{name}.log", "w") as handle:
                rc = subprocess.run(argv, env=env, cwd=out, stdout=handle, stderr=subprocess.STDOUT).returncode
            seconds = time.perf_counter() - start
            log.write(f"{name} rc={rc} {seconds:.1f}s\n  {' '.join(argv)}\n")
            print(f"   rc={rc} in {seconds:.1f}s", flush=True)
            if rc:
                failed += 1
                print((out / f"{name}.log").read_text()[-3000:], flush=True)
    return failed


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dumps(value: Any, ascii: bool = True) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=ascii).encode()


def strip_timing(value: Any) -> Any:
    """`value` without any mapping key named in TIMING_KEYS, at any depth."""
    if isinstance(value, dict):
        return {k: strip_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    return [strip_timing(v) for v in value] if isinstance(value, list) else value


def canonical_json(text: str) -> bytes:
    return dumps(strip_timing(json.loads(text)), ascii=False)


def npy_bytes(blob: bytes | None) -> bytes:
    """dtype, shape and raw bytes of a stored .npy array (not its header text, whose padding could vary)."""
    if blob is None:
        return b"NULL"
    array = np.load(io.BytesIO(blob), allow_pickle=False)
    return f"{array.dtype.str}{array.shape}".encode() + b":" + np.ascontiguousarray(array).tobytes()


def keyed_digest(rows: Iterable[tuple[str, bytes]]) -> str:
    """One digest of (key, bytes) pairs in the given order."""
    digest = hashlib.sha256()
    for key, data in rows:
        digest.update(key.encode() + b"\0" + data + b"\n")
    return digest.hexdigest()


def grouped(db: sqlite3.Connection, sql: str) -> dict[tuple, list[tuple[str, Any]]]:
    """Rows (group..., question_id, value) of `sql` as (question_id, value) lists by group, groups sorted."""
    groups: dict[tuple, list[tuple[str, Any]]] = {}
    for *group, question, value in db.execute(sql):
        groups.setdefault(tuple(group), []).append((question, value))
    return dict(sorted(groups.items()))


class Fingerprint:
    """The hashes.txt entries of one OUT directory and the notes on what they leave out."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.notes: list[str] = []
        self.label = ""

    def add(self, entry: str, digest: str) -> None:
        self.lines.append(f"{self.label}\t{entry}\t{digest}")

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def store(self, path: Path) -> None:
        """run.sqlite, opened read-only (its WAL included): results per method and column, alternatives per
        method and estimator, records per method and quantity."""
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        self.note("run.sqlite table `config` (the run's identity and settings) not hashed: the settings are pinned "
                  "by the command lines")
        if "checksums" in tables:
            self.note("run.sqlite table `checksums` (digests of the rows and records hashed here, for the store's own "
                      "corruption check) not hashed: they follow from the hashed values")
        if "results" in tables:
            self.note("run.sqlite results: column `seconds` (wall time) excluded; every other column hashed per "
                      "method (.npy blobs as dtype+shape+raw bytes)")
            columns = [row[1] for row in db.execute("PRAGMA table_info(results)")]
            for column in (c for c in columns if c not in ("question_id", "method", "seconds")):
                query = f'SELECT method, question_id, "{column}" FROM results ORDER BY method, question_id'
                for (method,), rows in grouped(db, query).items():
                    blob = column in ("answers", "seeds", "thetas")
                    self.add(f"sqlite:results:{method}:{column}", keyed_digest(
                        (q, npy_bytes(v) if isinstance(v, bytes) or (v is None and blob) else repr(v).encode())
                        for q, v in rows))
            for (method,), rows in grouped(db, "SELECT method, question_id, NULL FROM results ORDER BY 1, 2").items():
                self.add(f"sqlite:results:{method}:questions", sha(",".join(q for q, _ in rows).encode()))
        if "alternatives" in tables:
            query = "SELECT method, estimator, question_id, probs FROM alternatives ORDER BY 1, 2, 3"
            for (method, estimator), rows in grouped(db, query).items():
                self.add(f"sqlite:alternatives:{method}:{estimator}", keyed_digest((q, npy_bytes(v)) for q, v in rows))
        if "records" in tables:
            self.note(f"run.sqlite records: JSON values re-serialised canonically without the keys "
                      f"{sorted(TIMING_KEYS)}; rows whose quantity is one of them (wall times) excluded")
            query = "SELECT method, quantity, question_id, value FROM records ORDER BY 1, 2, 3"
            for (method, quantity), rows in grouped(db, query).items():
                if quantity not in TIMING_KEYS:
                    digest = keyed_digest((q, canonical_json(v)) for q, v in rows)
                    self.add(f"sqlite:records:{method}:{quantity}", digest)
        db.close()

    def table(self, path: Path, rel: str) -> None:
        """A CSV file without timing/path/version columns nor wall-time rows, its rows in sorted order."""
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows:
            self.add(rel, sha(b""))
            return
        header = rows[0]
        drop = {i for i, c in enumerate(header) if c.strip().lower() in TIMING_KEYS or c.strip().lower().endswith("_s")
                or "path" in c.lower() or "version" in c.lower()}
        if drop:
            self.note(f"{rel}: columns {[header[i] for i in sorted(drop)]} excluded (timing/path/version)")
        if "quantity" in header:  # records.csv: one row per scalar
            q = header.index("quantity")
            timed = {r[q] for r in rows[1:] if len(r) > q and r[q] in TIMING_KEYS}
            if timed:
                self.note(f"{rel}: rows with quantity in {sorted(timed)} excluded (wall time)")
                rows = [header] + [r for r in rows[1:] if not (len(r) > q and r[q] in TIMING_KEYS)]
        body = ["\x1f".join(c for i, c in enumerate(r) if i not in drop) for r in rows]
        self.add(rel, sha((body[0] + "\n" + "\n".join(sorted(body[1:]))).encode()))

    def text(self, path: Path, rel: str) -> None:
        """A text file without the lines that carry timings, paths or versions."""
        lines = path.read_text(errors="replace").splitlines()
        dropped = [line for line in lines if TEXT_EXCLUDED.search(line)]
        if dropped:
            self.note(f"{rel}: {len(dropped)} line(s) with timings/paths/versions excluded, e.g. {dropped[0][:120]!r}")
        self.add(rel, sha("\n".join(line for line in lines if not TEXT_EXCLUDED.search(line)).encode()))

    def torch_state(self, path: Path, rel: str) -> None:
        """A torch.save'd state (optimizer, scheduler, RNG), tensors as dtype+shape+raw bytes."""
        import torch

        state = torch.load(path, weights_only=True, map_location="cpu")
        if path.name.startswith("rng.") and isinstance(state, dict) and "python" in state:
            self.note(f"{rel}: its `python` entry (the global `random` state) excluded: beliefdrift never seeds nor "
                      "draws from it, so it is Python's urandom-seeded start-up state; the torch RNG state is hashed")
            state = {k: v for k, v in state.items() if k != "python"}

        def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, bytes]]:
            if isinstance(value, dict):
                for k in sorted(value, key=str):
                    yield from flatten(value[k], f"{prefix}/{k}")
            elif isinstance(value, (list, tuple)):
                for i, v in enumerate(value):
                    yield from flatten(v, f"{prefix}[{i}]")
            elif isinstance(value, torch.Tensor):
                t = value.detach().cpu().contiguous()
                yield prefix, f"{t.dtype}{tuple(t.shape)}".encode() + t.numpy().tobytes()
            else:
                yield prefix, repr(value).encode()

        self.add(rel, keyed_digest(flatten(state)))

    def file(self, path: Path, rel: str) -> None:
        """One output file's entries (or a note on why it has none)."""
        name = path.name
        if name == "run.sqlite":
            self.store(path)
        elif name in ("identity.json", "config.yaml"):
            self.note(f"{name} not hashed: the run's identity and resolved settings, pinned by the command lines")
        elif name == "README.md" and path.parent.name == "adapter":
            self.note("adapter/README.md (peft's model card) not hashed: names the base model's path and versions")
        elif name == "checksums.json" and "checkpoints" in path.parts:
            self.note("train checkpoints/*/checksums.json not hashed: the sha256 of the checkpoint's other files, "
                      "which are hashed (as the run store's checksums table is not)")
        elif name == "meta.json" and "rollouts" in path.parts:
            self.note("train rollouts/meta.json: only its `questions` hashed (its `settings` are the run config)")
            self.add(f"{rel}:questions", sha(dumps(json.loads(path.read_text()).get("questions"))))
        elif name == "rollouts.jsonl":
            rows = [dumps(json.loads(line)).decode() for line in path.read_text().splitlines() if line.strip()]
            self.add(rel, sha("\n".join(sorted(rows)).encode()))
        elif name.endswith(".safetensors"):
            from safetensors.numpy import load_file

            tensors = load_file(str(path))
            if "checkpoints" in path.parts:  # a resumable copy of the adapter: one entry
                self.add(rel, sha(b"".join(k.encode() + b"\0" + tensors[k].tobytes() for k in sorted(tensors))))
            else:  # the trained adapter: one entry per tensor
                for key, t in sorted(tensors.items()):
                    self.add(f"{rel}:{key}", sha(f"{t.dtype.str}{t.shape}".encode() + t.tobytes()))
        elif name == "adapter_config.json":
            dropped = ("base_model_name_or_path", "peft_version", "revision")
            config = {k: v for k, v in json.loads(path.read_text()).items() if k not in dropped}
            if isinstance(config.get("target_modules"), list):
                config["target_modules"] = sorted(config["target_modules"])
            self.note(f"adapter_config.json: keys {list(dropped)} excluded (a path, a library version); "
                      "target_modules sorted (a set in peft)")
            self.add(rel, sha(dumps(config)))
        elif name == "summary.json":
            data = strip_timing(json.loads(path.read_text()))
            settings = sorted(k for k, v in data.items() if not isinstance(v, dict))
            if settings:
                self.note(f"{self.label}/summary.json: top-level non-mapping keys {settings} excluded (the run's "
                          "settings); each top-level mapping (per method/condition results) hashed on its own")
            for key, value in sorted(data.items()):
                if isinstance(value, dict):
                    self.add(f"{rel}:{key}", sha(dumps(value)))
        elif name.endswith(".pt"):
            self.torch_state(path, rel)
        elif name.endswith(".csv"):
            self.table(path, rel)
        elif name.endswith(".json"):
            try:
                self.add(rel, sha(canonical_json(path.read_text())))
            except ValueError:
                self.add(rel, sha(path.read_bytes()))
        elif name.endswith((".md", ".tex", ".txt", ".html")):
            self.text(path, rel)
        else:
            self.note(f"{rel}: not hashed (unrecognised type)")


def fingerprint(out: Path, names: Iterable[str]) -> Fingerprint:
    """The entries of the commands' outputs OUT/<name>/; a command without any output is one MISSING entry."""
    result = Fingerprint()
    result.note("figures (*.png, *.pdf, *.svg) not hashed: rendered images; their numbers are in the stores/CSV/JSON")
    result.note("command logs (*.log: progress bars and timings) not hashed")
    for name in sorted(names):
        result.label, folder = name, out / name
        files = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
        if not files:
            result.add("MISSING", "-")
        for path in files:
            if "tensorboard" in path.parts:
                result.note("train tensorboard/ events not hashed: wall-clock timestamps; the scalars are in log.csv")
            elif not path.name.endswith(SKIPPED_SUFFIXES):
                result.file(path, str(path.relative_to(folder)))
    return result


def load_hashes(path: Path) -> dict[tuple[str, str], str]:
    path = path / "hashes.txt" if path.is_dir() else path
    rows = (line.split("\t") for line in path.read_text().splitlines() if line)
    return {(cmd, entry): digest for cmd, entry, digest in rows}


def compare(a_path: Path, b_path: Path) -> int:
    """Print IDENTICAL (0) or the entries that differ or exist in one file only (1)."""
    a, b = load_hashes(a_path), load_hashes(b_path)
    different = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    if not (different or only_a or only_b):
        print(f"IDENTICAL ({len(a)} entries)")
        return 0
    for title, keys in (("DIFFERENT", different), (f"ONLY IN {a_path}", only_a), (f"ONLY IN {b_path}", only_b)):
        if keys:
            print(f"== {title} ({len(keys)})\n" + "\n".join(f"  {cmd}\t{entry}" for cmd, entry in keys))
    same = len(a.keys() & b.keys()) - len(different)
    print(f"{len(different)} different, {len(only_a)} only in A, {len(only_b)} only in B, {same} identical")
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run_parser = sub.add_parser("run", help="run the commands into OUT and hash their outputs")
    run_parser.add_argument("out", type=Path)
    run_parser.add_argument("--rev", help="run this git revision's code (a temporary worktree), not the checkout's")
    data_dir = os.environ.get("BELIEFDRIFT_DATA") or REPO.parent / "shared/data"
    run_parser.add_argument("--data-dir", type=Path, default=Path(data_dir),
                            help="benchmark data (default: $BELIEFDRIFT_DATA, else ../shared/data)")
    run_parser.add_argument("--model-cache", type=Path, default=Path(user_cache_dir("beliefdrift")) / "fingerprint",
                            help="converted models, one directory per version of the backend code")
    run_parser.add_argument("--force", action="store_true", help="remove the commands' earlier outputs in OUT")
    compare_parser = sub.add_parser("compare", help="compare two OUT directories or hashes.txt files")
    compare_parser.add_argument("a", type=Path)
    compare_parser.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.action == "compare":
        sys.exit(compare(args.a, args.b))
    out: Path = args.out.resolve()
    names = list(commands(REPO, out))
    if out.is_dir() and any(out.iterdir()):
        if not args.force:
            sys.exit(f"{out} is not empty: the commands would resume from its outputs (--force removes them)")
        for name in names:  # what a command would resume from; the other files are rewritten
            shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # so that the worktree is removed
    with source_tree(args.rev) as code:
        if args.rev:
            print(f"{git('log', '-1', '--format=%h %s', args.rev)[:120]} (worktree {code})", flush=True)
        failed = run(out, code, args.data_dir.resolve(), model_cache(args.model_cache.resolve(), code))
    result = fingerprint(out, names)
    (out / "hashes.txt").write_text("\n".join(result.lines) + "\n")
    (out / "hash_notes.txt").write_text("".join(f"- {n}\n" for n in result.notes))
    print(f"wrote {out / 'hashes.txt'} ({len(result.lines)} entries); exclusions in {out / 'hash_notes.txt'}")
    if failed:
        sys.exit(f"{failed} command(s) failed: see {out}/*.log")


if __name__ == "__main__":
    main()
