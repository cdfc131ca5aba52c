"""The run identity: what an output directory pins so that it is only ever resumed with the settings, model, data
and software that produced what it holds. Every command builds it with `run_identity`; the store records it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from beliefdrift.backend.loading import pinned_model
from beliefdrift.backend.model import LanguageModel
from beliefdrift.config.options import ModelOptions, is_operational
from beliefdrift.credentials import redacted
from beliefdrift.data.hf import HF_PREFIX
from beliefdrift.data.loaders import MathProblem
from beliefdrift.data.question import MCQuestion
from beliefdrift.data.registry import DATASETS, fingerprint
from beliefdrift.files import write_atomic
from beliefdrift.registry import REGISTRY
from beliefdrift.runs.store import identity_mismatch
from beliefdrift.version import __version__

#: Settings naming a file or directory (and a served model's tokenizer): made absolute when they exist, so the same run
#: from another directory matches.
PATH_SETTINGS = ("model", "dataset", "eval_dataset", "adapter", "rollout_dir", "fields", "tokenizer")


def run_identity(
    command: str,
    settings: ModelOptions,
    questions: Sequence[MCQuestion | MathProblem],
    skipped: Sequence[MCQuestion] = (),
    template: str | None = None,
    only: Sequence[str] | None = None,
    lm: LanguageModel | None = None,
) -> dict[str, Any]:
    """The settings dataclass's fields that change a number (all but the operational ones, or `only` these; a
    `when_set` one only where it differs from its default), with dtype and device resolved, local paths absolute,
    the rendered prompt `template` and the `questions` used fingerprinted, the ids of the questions `skipped`, the
    command and the package version; `sha256` hashes it. A model behind an inference server is pinned by its endpoint,
    served name, tokenizer and what the server reports about itself (`backend.loading.pinned_model`; the connected
    `lm`'s, when given) instead of the local-model settings. Credentials in the settings (a key in the model's URL)
    are replaced by `***` (`credentials.redacted`) before anything is hashed or stored: a run resumes whatever key it
    is given."""
    values: dict[str, Any] = {"command": command}
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.metadata.get("when_set"):
            keep = value != field.default
        else:
            keep = (field.name in only) if only is not None else not is_operational(field)
        if keep:
            values[field.name] = _plain(value)
    values = pinned_model(values, settings, lm)
    for key in PATH_SETTINGS:
        if values.get(key) and values[key] not in REGISTRY and values[key] not in DATASETS:
            values[key] = _local_path_or_name(values[key])
    values = redacted(values)  # no key is stored, and a changed key names the same run
    if template is not None:
        values["template_sha256"] = hashlib.sha256(template.encode()).hexdigest()[:16]
    values["questions"] = len(questions)
    values["questions_sha256"] = fingerprint(questions)
    if skipped:
        values["skipped_long_prompts"] = [q.id for q in skipped]
    values["version"] = __version__
    values["sha256"] = identity_hash(values)
    return values


def pin_identity(path: Path, identity: Mapping[str, Any], write: bool = True) -> None:
    """Record `identity` in the JSON file `path` (when `write`), or check it equals the one recorded there (a
    StoreError naming the differing settings) — for runs kept in plain files rather than a run store."""
    requested = json.loads(json.dumps(dict(identity)))
    if path.is_file():
        mismatch = identity_mismatch(str(path.parent), json.loads(path.read_text()), requested)
        if mismatch:
            raise mismatch
    elif write:
        write_atomic(path, json.dumps(requested, indent=1) + "\n")


def identity_hash(values: dict[str, Any]) -> str:
    """sha256 of the identity's canonical JSON (its own `sha256` key left out)."""
    body = {k: v for k, v in values.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def _local_path_or_name(spec: str) -> str:
    """`spec` absolute where it names a local file or directory (after an `hf:` prefix, which it keeps)."""
    prefix = HF_PREFIX if spec.startswith(HF_PREFIX) else ""
    path = Path(spec.removeprefix(prefix)).expanduser()
    return prefix + str(path.resolve()) if path.exists() else spec
