"""lm-evaluation-harness tasks as datasets: `lm-eval:TASK` (a registered task or group) or a task's YAML file.

The task is built by lm-eval's own `TaskManager`, so its dataset (hub or local `data_files`), splits, `process_docs`
and `!function` hooks, and its Jinja `doc_to_text` / `doc_to_choice` / `doc_to_target` work as they do in lm-eval.
Each document becomes one `MCQuestion`:

- the stem is `doc_to_text` without the prompt's own cue words (a leading "Question:" / "Q:", a closing "Answer:" /
  "A:"): the PPR templates ask for the answer themselves;
- the options are `doc_to_choice`, labelled A, B, …; where the choices are themselves short labels that the prompt
  lists ("A. …" lines, as in MMLU), the option texts are read off those lines and the task's labels kept when they
  are single characters;
- where `doc_to_text` gives the answer index and the choices are contexts (lm-eval's multiple-input form, as in
  Winogrande), each option is a context joined to the shared continuation `doc_to_target`, under `MULTIPLE_INPUT_STEM`;
- the answer is `doc_to_target` (an index, or one of the choices); the id `<task>/<document index>`.

Few-shot examples, the task's `description` and its `filter_list` (which post-process generated text) are not used.

A task file's `!function` hooks are Python code that lm-eval imports and runs, as it does in lm-eval itself: load
task files you trust. Inside `no_task_code()` (a report reading a run's stored settings) a task file is refused
instead, so viewing a shared run directory never runs code from it. A task file whose YAML aliases expand past
`yaml_files.YAML_MAX_VALUES` values is refused before lm-eval reads it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from beliefdrift.data.loaders import DataError, _question
from beliefdrift.data.question import MCQuestion
from beliefdrift.errors import first_line
from beliefdrift.yaml_files import yaml_node

PREFIX = "lm-eval:"
EXTRA = "pip install 'beliefdrift[lm-eval]'"
#: The stem of a question whose options are whole sentences (lm-eval's multiple-input tasks, e.g. Winogrande).
MULTIPLE_INPUT_STEM = "Which is correct?"
_LEADING_CUE = re.compile(r"^\s*(?:Question|Q)\s*:\s*")
_CLOSING_CUE = re.compile(r"\s*(?:Answer|A)\s*:\s*$")


def is_task_spec(name: str) -> bool:
    """`name` asks for an lm-eval task: `lm-eval:TASK` or a `.yaml` / `.yml` task file."""
    return name.startswith(PREFIX) or Path(name).suffix.lower() in (".yaml", ".yml")


def task_label(name: str) -> str:
    """The task name of a spec (`lm-eval:arc_challenge` → `arc_challenge`, `dir/task.yaml` → `task`)."""
    return name.removeprefix(PREFIX) if name.startswith(PREFIX) else Path(name).stem


def load_lm_eval(spec: str, split: str | None = None) -> list[MCQuestion]:
    """The questions of the task (or of every subtask of a group, one subtask after another, by name) `spec` names;
    `split` (default: the task's test split, else its validation split) is a split of the task's dataset."""
    return [question for questions in load_task_questions(spec, split).values() for question in questions]


def load_task_questions(spec: str, split: str | None = None) -> dict[str, list[MCQuestion]]:
    """The questions of each leaf task `spec` names, by task name in sorted order (see `load_lm_eval`)."""
    return {name: task_questions(task, split) for name, task in sorted(_tasks(spec).items())}


def subtask_of(question_id: str) -> str:
    """The task a question read here came from (its id is `<task>/<index>`)."""
    return question_id.rpartition("/")[0]


def task_questions(task: Any, split: str | None = None) -> list[MCQuestion]:
    """One lm-eval task's documents of `split` as questions; a task that is not multiple choice is refused."""
    name = task.task_name
    if task.OUTPUT_TYPE != "multiple_choice" or task.config.doc_to_choice is None:
        raise DataError(f"lm-eval task {name}: output_type {task.OUTPUT_TYPE} (doc_to_choice "
                        f"{'unset' if task.config.doc_to_choice is None else 'set'}); only multiple_choice tasks "
                        "with doc_to_choice have options PPR can label")
    split, docs = _split_docs(task, split)
    return [_doc_question(task, doc, f"lm-eval task {name}, {split} document {i}", f"{name}/{i}")
            for i, doc in enumerate(docs)]


_TASK_CODE: contextvars.ContextVar[bool] = contextvars.ContextVar("task_code", default=True)


@contextmanager
def no_task_code() -> Iterator[None]:
    """Inside the block a task file is refused rather than built: its `!function` hooks would run its Python code.
    (Registered tasks, `lm-eval:TASK`, run lm-eval's own installed code and are still read.)"""
    token = _TASK_CODE.set(False)
    try:
        yield
    finally:
        _TASK_CODE.reset(token)


def check_task_file(path: Path, spec: str, seen: frozenset[Path] = frozenset()) -> None:
    """The task file `path` and the files it `include`s are YAML whose aliases expand to a bounded size (a
    "billion laughs" file would hang lm-eval's reading of it); else a DataError naming `spec`."""
    try:
        node = yaml_node(path.read_text(encoding="utf-8"), f"--dataset {spec}: {path.name}")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"--dataset {spec}: cannot read {path} ({first_line(err)})") from None
    for key, value in node.value if getattr(node, "tag", "").endswith(":map") else []:
        if key.value == "include" and isinstance(value.value, str):
            included = (path.parent / value.value).resolve()
            if included.is_file() and included not in seen:
                check_task_file(included, spec, seen | {path.resolve()})


def _tasks(spec: str) -> dict[str, Any]:
    """The leaf tasks lm-eval builds for `spec` (a group expands to its subtasks) by task name."""
    try:
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise DataError(f"--dataset {spec}: lm-eval tasks need the lm_eval package; {EXTRA}") from None
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    if spec.startswith(PREFIX):
        managers = [TaskManager]
    else:
        path = Path(spec).expanduser().resolve()
        if not path.is_file():
            raise DataError(f"--dataset {spec}: no such task file")
        if not _TASK_CODE.get():
            raise DataError(f"--dataset {spec}: a task file is not read here: its !function hooks are Python code "
                            "lm-eval would run, and a report runs no code named by a run store")
        check_task_file(path, spec)
        # a task file alone is indexed quickly; one naming registered tasks (a group of them) needs lm-eval's index
        managers = [partial(TaskManager, include_path=str(path.parent), include_defaults=False),
                    partial(TaskManager, include_path=str(path.parent))]
    missing: Exception = KeyError(spec)
    for make in managers:
        try:
            manager = make()
            return manager.load(_registered_name(manager, spec))["tasks"]
        except Exception as err:  # the task's dataset, templates or hooks failed: say which task and why
            if isinstance(err, KeyError) and "not a registered" in str(err):
                missing = err
                continue
            hint = ("; offline, point a task file's dataset_path/dataset_kwargs at local files (docs/lm-eval.md)"
                    if isinstance(err, ConnectionError) else
                    "; lm-eval checks the first document when it builds a task: does doc_to_choice give an empty list "
                    "or an empty option, or doc_to_target an index past the options?" if isinstance(err, IndexError)
                    else "")
            raise DataError(f"--dataset {spec}: lm-eval could not build the task ({type(err).__name__}: "
                            f"{first_line(err)}){hint}") from None
    raise DataError(f"--dataset {spec}: not an lm-eval task, group or tag ({first_line(missing)})")


def _registered_name(manager: Any, spec: str) -> str:
    """The name `manager` indexed the task or group of `spec` under (lm-eval loads a group by name, not by path);
    a task file it did not index stays a path."""
    if spec.startswith(PREFIX):
        return spec.removeprefix(PREFIX)
    path = Path(spec).expanduser().resolve()
    return next((name for name, entry in manager.task_index.items()
                 if entry.yaml_path is not None and Path(entry.yaml_path).resolve() == path), str(path))


def _split_docs(task: Any, split: str | None) -> tuple[str, Iterable[dict[str, Any]]]:
    """(split name, its documents after the task's `process_docs`): `split`, else the task's evaluation split."""
    config = task.config
    if split is None:
        split = config.test_split or config.validation_split
        if split is None:
            raise DataError(f"lm-eval task {task.task_name}: neither test_split nor validation_split is set; "
                            "pass --split")
    available = list(task.dataset)
    if split not in available:
        raise DataError(f"lm-eval task {task.task_name}: unknown split {split!r}; expected one of "
                        f"{', '.join(available)}")
    docs = task.dataset[split]
    return split, config.process_docs(docs) if config.process_docs is not None else docs


def _doc_question(task: Any, doc: dict[str, Any], where: str, qid: str) -> MCQuestion:
    try:
        text, choices, target = task.doc_to_text(doc), task.doc_to_choice(doc), task.doc_to_target(doc)
    except Exception as err:  # a template naming a missing field, a failing hook: name the document
        raise DataError(f"{where}: the task's doc_to_text/doc_to_choice/doc_to_target failed "
                        f"({type(err).__name__}: {first_line(err)})") from None
    if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
        raise DataError(f"{where}: doc_to_choice gave {type(choices).__name__} {choices!r}; expected a list of "
                        "strings")
    if isinstance(text, int):  # multiple input: the choices are contexts, the target their common continuation
        delimiter = task.config.target_delimiter
        return _question(where, qid, MULTIPLE_INPUT_STEM, [c + delimiter + str(target) for c in choices], text)
    text = _CLOSING_CUE.sub("", _LEADING_CUE.sub("", str(text)))
    listed = _listed_options(text, choices)
    stem, texts = listed if listed is not None else (text, choices)
    question = _question(where, qid, stem, texts, _target_index(target, choices, where))
    labels = tuple(c.strip() for c in choices)
    if listed is None or not all(len(label) == 1 for label in labels):
        return question
    return dataclasses.replace(question, labels=labels, answer=labels[question.answer_index])


def _listed_options(text: str, choices: Sequence[str]) -> tuple[str, list[str]] | None:
    """(stem, option texts) when the choices are short labels the prompt lists one per line ("A. …", "(B) …"), in
    order; None otherwise (the choices are the option texts)."""
    labels = [c.strip() for c in choices]
    if not labels or not all(0 < len(label) <= 2 and label.isalnum() for label in labels):
        return None
    starts: list[re.Match[str]] = []
    for label in labels:
        found = re.compile(rf"^[ \t]*\(?{re.escape(label)}[.):][ \t]*", re.MULTILINE).search(
            text, starts[-1].end() if starts else 0)
        if found is None:
            return None
        starts.append(found)
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return text[: starts[0].start()], [text[m.end() : end] for m, end in zip(starts, ends, strict=True)]


def _target_index(target: Any, choices: Sequence[str], where: str) -> int:
    """`doc_to_target` as an option index: an index, or one of the choices."""
    if isinstance(target, int) and not isinstance(target, bool):
        return target
    if isinstance(target, str) and target in choices:
        return list(choices).index(target)
    if isinstance(target, list):
        raise DataError(f"{where}: doc_to_target gave several answers {target!r}; a question needs one")
    raise DataError(f"{where}: doc_to_target gave {target!r}, neither an option index nor one of the choices "
                    f"{list(choices)!r}")
