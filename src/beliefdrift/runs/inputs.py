"""What the Python API's runs take (`bd.evaluate`, `drift`, `emd`, `reasoning`, `SCTrainer`), as TRL's trainers and
lm-eval's tasks take theirs: the questions and the model as objects or by name, the settings as the command's
settings dataclass, a YAML file (a `--config` file or bundled preset) or keywords named like the command's flags.

```python
bd.evaluate(questions=bd.load_dataset("csqa", n=50), lm=lm, methods=["direct", "ppr"], paths=8)
bd.evaluate(questions="csqa", lm="smollm2-135m-instruct", config="cpu-default", n=50, out="runs/csqa")
```

Keywords override the `config` file or dataclass, as flags override `--config`. A run's identity (what its store
pins, `runs.identity.run_identity`) records what actually ran: a loaded model's name, dtype and device, and the
fingerprint of the questions given (their `dataset` is the label `GIVEN_QUESTIONS` unless `dataset=` names them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from beliefdrift.config.options import Settings, checked_settings, load_settings
from beliefdrift.errors import UserError
from beliefdrift.registry import did_you_mean

if TYPE_CHECKING:  # (loading a model's class loads torch: only when a model is given)
    from beliefdrift.backend.model import LanguageModel
    from beliefdrift.data.loaders import MathProblem
    from beliefdrift.data.question import MCQuestion

#: The questions of a run: a list of `MCQuestion`s (reasoning also takes `MathProblem`s), or a dataset name or file
#: (what `--dataset` takes).
Questions: TypeAlias = "Sequence[MCQuestion] | Sequence[MathProblem] | str | Path"
#: The model of a run: a loaded `LanguageModel`, or what `--model` takes (a registry name, hub id, directory, .gguf).
Model: TypeAlias = "LanguageModel | str | Path"
#: The dataset setting recorded for questions given as objects, unless `dataset=` names them.
GIVEN_QUESTIONS = "questions"
#: The data settings that select questions from a dataset: they do not apply to questions given as objects.
SELECTING = ("split", "n", "fields")
#: Settings of a loaded model's own: its dtype as the `--dtype` value.
DTYPES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16"}

#: The command's settings dataclass.
Config = TypeVar("Config", bound=Settings)


@dataclass(frozen=True)
class Inputs(Generic[Config]):
    """A run's settings, its questions when given as objects (else None: the settings name them) and its model when
    given loaded (else None: the settings name it)."""

    settings: Config
    questions: list[Any] | None
    lm: LanguageModel | None


def run_inputs(cls: type[Config], config: Config | str | Path | None, questions: Questions | None,
               lm: Model | None, keywords: Mapping[str, Any], caller: str) -> Inputs[Config]:
    """The `cls` settings of `config` (a `cls`, a YAML file or preset, or None: the defaults) with `keywords` over it,
    `questions` and `lm` read into them; an unknown keyword, a wrong type or value, or a setting given twice (as
    `questions=` and `dataset=`, `lm=` and a different `model=`) is a UserError naming `caller`."""
    base: Config | None
    if isinstance(config, (str, Path)):
        base = load_settings(cls, config)
    elif config is None or isinstance(config, cls):
        base = config
    else:
        raise TypeError(f"{caller}(config=…): expected its settings ({cls.__name__}) or a YAML file, got "
                        f"{type(config).__name__}")
    overrides = _checked(cls, keywords, caller)
    given: list[Any] | None = None
    if isinstance(questions, (str, Path)):
        _given_once(overrides, "dataset", str(questions), caller, "questions")
    elif questions is not None:
        given = list(questions)
        if not given:
            raise UserError(f"{caller}(questions=…): an empty list; expected questions, a dataset name or a file")
        if any(key in keywords for key in SELECTING):
            raise UserError(f"{caller}(): {', '.join(f'{k}=' for k in SELECTING if k in keywords)} select questions "
                            "from a dataset; questions= gives them")
        overrides.setdefault("dataset", GIVEN_QUESTIONS)
        overrides |= {key: None for key in SELECTING if key in _names(cls)}
    loaded = None
    if isinstance(lm, (str, Path)):
        _given_once(overrides, "model", str(lm), caller, "lm")
    elif lm is not None:
        from beliefdrift.backend.model import LanguageModel

        if not isinstance(lm, LanguageModel):
            raise TypeError(f"{caller}(lm=…): expected a LanguageModel (bd.load_model) or a model name, got "
                            f"{type(lm).__name__}")
        loaded = lm
        _given_once(overrides, "model", loaded.name, caller, "lm")
        _given_once(overrides, "device", str(loaded.device), caller, "lm")
        if str(loaded.dtype) in DTYPES:
            _given_once(overrides, "dtype", DTYPES[str(loaded.dtype)], caller, "lm")
    settings = dataclasses.replace(base, **overrides) if base is not None else cls(**overrides)
    return Inputs(settings, given, loaded)


def _checked(cls: type[Settings], keywords: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """`keywords` as the fields of `cls` (`config.options.checked_settings`: types checked and read as YAML's are);
    an unknown one is a UserError with the closest setting."""
    names = _names(cls)
    for key in keywords:
        if key not in names:
            raise UserError(f"{caller}(): unknown setting {key}={keywords[key]!r}{did_you_mean(key, names)}")
    plain = {key: str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value
             for key, value in keywords.items()}
    return checked_settings(plain, [cls], f"{caller}(): ")


def _names(cls: type[Settings]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.init]


def _given_once(overrides: dict[str, Any], key: str, value: Any, caller: str, argument: str) -> None:
    """Set `key` to `value` (what `argument=` says); a different value already given for it is a UserError."""
    if key in overrides and overrides[key] != value:
        raise UserError(f"{caller}(): {argument}= gives {key} {value!r}, {key}= gives {overrides[key]!r}; give one")
    overrides[key] = value
