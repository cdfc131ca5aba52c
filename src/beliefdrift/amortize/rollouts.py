"""Rollout datasets for SC fine-tuning (offline mode, the paper's).

A *group* is a question Q with an answer prefix a_{1:n} (n ∈ 𝒩) and J continuations A^{(j)}_{n+1:n+K−1} sampled
from the base model's PPR process after it; one optimizer update uses one group.

Prefixes: `sample` (default) draws a_{1:n} from the base model's PPR process, so training sees the histories the
process actually produces; `top` picks one of the top-5 most likely prefixes uniformly, as the EMD evaluation does
(DESIGN §7); `direct` draws its n answers i.i.d. from the direct-query θ, the paper's reading (App. D.4: a "seeding
prompt that, given only Q, samples an initial seed history a_{1:n}"), as seed answers are drawn. Each draw uses its
own generator `make_generator(seed, question id, n, …)`, so a dataset does not depend on the order it is built in.

Each trajectory also keeps θ_base after its last answer; their mean over the J paths is the base model's K-step
forecast p̂_base^(K)(· | a_{1:n}), the target of the SC loss's optional anchor term.

On disk, a directory: `rollouts.jsonl` (one row per trajectory: group id, question id, prefix, path index, rollout,
final θ) and `meta.json` (the settings that produced it, the questions, so the dataset is self-contained, and the
sha256 of `rollouts.jsonl`: a dataset whose rows changed after it was written is refused, as a damaged run store is;
one written before the checksum is read unchecked).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from beliefdrift.backend import LanguageModel
from beliefdrift.config.train import PREFIX_MODES
from beliefdrift.data.question import LETTERS, MCQuestion
from beliefdrift.diagnostics.prefixes import pick_prefix, top_prefixes
from beliefdrift.engine.resampling import QuestionRunner, draw_seeds, make_generator, sample_answers
from beliefdrift.prompts import DEFAULT_PPR_TEMPLATE, DEFAULT_TEMPLATE_ENDING

ROWS_FILE = "rollouts.jsonl"
META_FILE = "meta.json"
ROWS_DIGEST = "rollouts_sha256"  # the key of meta.json holding the sha256 of rollouts.jsonl


def group_id(question_id: str, prefix: Sequence[int]) -> str:
    """`<question id>:<prefix label indices, comma-separated>` (nothing after the colon for n = 0)."""
    return f"{question_id}:{','.join(str(a) for a in prefix)}"


def group_title(group: str) -> str:
    """A `group_id` as the training log's lines name it: the question id (its first 12 characters: a dataset's ids
    may be 32-digit hashes) and the prefix as labels, e.g. `question 075e483d21c2… after B A`."""
    question, _, prefix = group.rpartition(":")
    labels = " ".join(LETTERS[int(a)] if int(a) < len(LETTERS) else a for a in prefix.split(",") if a)
    return f"question {question if len(question) <= 12 else question[:12] + '…'} after {labels or 'no answer'}"


@dataclass(frozen=True)
class RolloutGroup:
    """Question Q, prefix a_{1:n} (label indices), J rollouts [J, K−1] (label indices) continuing it and the
    sampling model's θ after each rollout's last answer [J, |𝒜|] (None in datasets written before it was kept)."""

    question: MCQuestion
    prefix: tuple[int, ...]
    rollouts: torch.Tensor  # [J, K−1] long
    final_thetas: torch.Tensor | None = None  # [J, |𝒜|]

    @property
    def id(self) -> str:
        return group_id(self.question.id, self.prefix)

    @property
    def forecast(self) -> torch.Tensor | None:
        """p̂^(K)(· | a_{1:n}) = (1/J) Σ_j θ(· | a_{1:n}, A^{(j)}_{n+1:n+K−1}): [|𝒜|]."""
        return None if self.final_thetas is None else self.final_thetas.double().mean(0)


def sample_prefix(runner: QuestionRunner, length: int, mode: str, generator: torch.Generator) -> tuple[int, ...]:
    """A prefix a_{1:length} for the runner's question: sampled from its PPR process, one of that process's top-5,
    or i.i.d. from its direct-query θ (see module doc)."""
    if mode == "sample":
        answers, _, _ = sample_answers(runner.paths(1), length, generator)
        return tuple(answers[0].tolist())
    if mode == "direct":
        return tuple(draw_seeds(runner.direct.probs, 1, length, generator)[0].tolist())
    if mode == "top":
        return pick_prefix(top_prefixes(runner.paths(1), length, 5), generator).answers
    raise ValueError(f"unknown prefix mode {mode!r}; expected one of {', '.join(PREFIX_MODES)}")


def sample_rollouts(
    runner: QuestionRunner, prefix: Sequence[int], num_rollouts: int, depth: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """J continuations [J, depth] of the prefix, sampled from the runner's model (one forward pass per step), and
    θ after each one's last answer [J, |𝒜|], on the CPU (where rollout groups are kept and stored)."""
    seeds = torch.tensor(list(prefix), dtype=torch.long).reshape(1, -1).expand(num_rollouts, -1)
    answers, thetas, _ = sample_answers(runner.paths(num_rollouts, seeds=seeds), depth, generator)
    return answers.cpu(), thetas[:, -1].cpu()


@torch.no_grad()
def generate_group(
    runner: QuestionRunner, length: int, num_rollouts: int, depth: int, seed: int, prefix_mode: str = "sample"
) -> RolloutGroup:
    """One group for the runner's question: a prefix of `length` answers and J rollouts of `depth` answers."""
    qid = runner.question.id
    prefix = sample_prefix(runner, length, prefix_mode, make_generator(seed, qid, length, "prefix", prefix_mode))
    generator = make_generator(seed, qid, length, "rollouts")
    rollouts, final = sample_rollouts(runner, prefix, num_rollouts, depth, generator)
    return RolloutGroup(runner.question, prefix, rollouts, final)


def generate_groups(
    lm: LanguageModel,
    questions: Iterable[MCQuestion],
    prefix_lengths: Sequence[int],
    num_rollouts: int,
    depth: int,
    seed: int = 0,
    template: str = DEFAULT_PPR_TEMPLATE,
    prefix_mode: str = "sample",
    ending: str = DEFAULT_TEMPLATE_ENDING,
) -> list[RolloutGroup]:
    """Groups for every question × prefix length (one prompt prefill per question, template `ending`)."""
    groups = []
    for question in questions:
        runner = QuestionRunner(lm, question, template, ending)
        groups += [generate_group(runner, n, num_rollouts, depth, seed, prefix_mode) for n in prefix_lengths]
    return groups


def rollouts_temporary(directory: Path) -> Path:
    """The temporary directory `save_rollouts` writes before renaming it onto `directory`."""
    return directory.with_name(directory.name + ".tmp")


def save_rollouts(groups: Sequence[RolloutGroup], directory: str | Path, settings: dict[str, Any]) -> Path:
    """Write the dataset to `directory` atomically (a temporary directory, `rollouts_temporary`, renamed into
    place)."""
    directory = Path(directory)
    temporary = rollouts_temporary(directory)
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    questions = {g.question.id: g.question for g in groups}
    digest = hashlib.sha256()
    with open(temporary / ROWS_FILE, "w", encoding="utf-8") as rows:
        for g in groups:
            for j, rollout in enumerate(g.rollouts.tolist()):
                row = {"group": g.id, "question": g.question.id, "prefix": list(g.prefix), "path": j}
                row["rollout"] = rollout
                if g.final_thetas is not None:
                    row["final_theta"] = g.final_thetas[j].tolist()
                line = json.dumps(row) + "\n"
                rows.write(line)
                digest.update(line.encode("utf-8"))
    meta = {"settings": settings, "questions": [asdict(q) for q in questions.values()],
            ROWS_DIGEST: digest.hexdigest()}
    (temporary / META_FILE).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(temporary, directory)
    return directory


def load_rollouts(directory: str | Path) -> tuple[list[RolloutGroup], dict[str, Any]]:
    """The groups (in file order) and the settings that produced them."""
    directory = Path(directory)
    if not (directory / META_FILE).is_file() or not (directory / ROWS_FILE).is_file():
        raise FileNotFoundError(f"{directory}: not a rollout dataset (needs {META_FILE} and {ROWS_FILE})")
    meta = json.loads((directory / META_FILE).read_text(encoding="utf-8"))
    questions = {q["id"]: MCQuestion(**{**q, "choices": tuple(q["choices"]), "labels": tuple(q["labels"])})
                 for q in meta["questions"]}
    data = (directory / ROWS_FILE).read_bytes()
    if ROWS_DIGEST in meta and hashlib.sha256(data).hexdigest() != meta[ROWS_DIGEST]:
        raise ValueError(f"{ROWS_FILE} does not match its checksum in {META_FILE} (changed since it was written: "
                         "damaged or edited)")
    rows: dict[str, list[dict[str, Any]]] = {}
    for line in data.decode("utf-8").splitlines():
        row = json.loads(line)
        rows.setdefault(row["group"], []).append(row)
    groups = []
    for paths in rows.values():
        paths.sort(key=lambda p: p["path"])
        final = (torch.tensor([p["final_theta"] for p in paths], dtype=torch.float64)
                 if all("final_theta" in p for p in paths) else None)
        rollouts = torch.tensor([p["rollout"] for p in paths], dtype=torch.long)
        groups.append(RolloutGroup(questions[paths[0]["question"]], tuple(paths[0]["prefix"]), rollouts, final))
    return groups, meta["settings"]
