"""The Python API as a researcher uses it: every step of the paper's workflow from `import beliefdrift as bd` alone,
keyword arguments with the CLI's names, the old spellings gone."""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import beliefdrift as bd


# AUROC of 5 random answers may be undefined
@pytest.mark.filterwarnings("ignore::beliefdrift.metrics.functional.MetricWarning")
def test_a_five_question_study_needs_only_the_package_root(tiny_model_dir) -> None:
    """Load a model and a dataset, run the methods, each question's EMD, its noise floor, the paired tests and the
    marginal shift: nothing but `bd.` (a tiny random model, so that it takes seconds)."""
    lm = bd.load_model(str(tiny_model_dir), dtype="float32")
    questions = bd.load_dataset("demo", n=5)
    methods = [bd.parse_method(name) for name in ("direct", "ppr", "ppr-seed1")]
    results = bd.run_methods_many(lm, questions, methods, paths=4, steps=3)
    assert len(results) == 5 and all(len(per_method) == 3 for per_method in results)

    targets = [question.answer_index for question in questions]
    probs = {m.name: [per_method[i].probs.numpy() for per_method in results] for i, m in enumerate(methods)}
    scores = bd.summarize(probs["ppr"], targets, n_resamples=20)
    assert scores["n"] == 5 and isinstance(bd.accuracy(probs["ppr"], targets), float)
    paired = bd.paired_summary(probs["ppr"], probs["direct"], targets, n_resamples=20)
    assert set(paired) == {"ACC", "AUC", "ECE", "NLL", "BS"}

    shifts = [bd.marginal_shift(bd.marginal_drift(per_method[1].trajectories)) for per_method in results]
    assert all(shift.shape == (3 + 1,) for shift in shifts)  # one value per step n = 0 … N

    config = bd.EMDConfig(horizon=2, prefix_lengths=(0,), top_k=1, num_rollouts=4, burn_in=1, k=2, exact_budget=0)
    resampling = methods[1:]
    per_question = bd.emd_per_question(lm, questions, resampling, config=config)
    emd_bar = {name: [result.emd_bar("l1") for result in results] for name, results in per_question.items()}
    assert all(len(values) == 5 and all(v >= 0 for v in values) for values in emd_bar.values())
    delta = bd.paired_mean_bootstrap(emd_bar["ppr-seed1"], emd_bar["ppr"], n_resamples=20)
    assert delta.low <= delta.delta <= delta.high

    rows = bd.noise_floor(lm, questions, resampling, per_question, config=config, paths=4, steps=3, replicates=5)
    assert [row.method for row in rows] == ["PPR + NoSEED", "PPR + SEED_1"]
    for row, values in zip(rows, emd_bar.values(), strict=True):
        assert row.emd_bar == pytest.approx(np.mean(values))  # the same EMD, not computed again
        assert row.floor_replicates == 5 and math.isfinite(row.floor) and row.floor_low <= row.floor_high


def test_old_keyword_names_and_positional_settings_are_errors(tiny_lm) -> None:
    """The one-release shims are gone: an old keyword or a setting passed by position is a TypeError."""
    question = bd.load_dataset("demo", n=1)[0]
    methods = [bd.parse_method("ppr")]
    with pytest.raises(TypeError, match="num_paths"):
        bd.run_methods(tiny_lm, question, methods, num_paths=2, num_steps=2)
    with pytest.raises(TypeError, match="positional"):
        bd.run_methods_many(tiny_lm, [question], methods, 2, 2, 0, "ppr-llama", "paper")
    with pytest.raises(TypeError, match="ending"):
        bd.QuestionRunner(tiny_lm, question, ending="paper")
    with pytest.raises(TypeError, match="positional"):
        bd.load_dataset("demo", None, None, 1)


def test_public_functions_take_no_long_positional_lists() -> None:
    """Beyond their first three parameters (model, questions, methods …) the functions of the package root are
    keyword-only, and use the CLI's names."""
    import inspect

    for name in bd.__all__:
        value = getattr(bd, name)
        # run_identity's callers are the run loops, which issue 28's one run loop rewrites: left for that change
        if not inspect.isfunction(value) or name == "run_identity":
            continue
        parameters = inspect.signature(value).parameters.values()
        positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        assert len(positional) <= 4, (name, positional)
        assert not {"num_paths", "num_steps", "ending"} & {p.name for p in parameters}, name


STUDY = Path(__file__).with_name("study.py")
SRC = Path(__file__).resolve().parents[1] / "src"
#: Libraries the type check of the study does not read (their types are Any there): reading torch and transformers
#: alone takes minutes; the study's own calls are beliefdrift's, numpy's and matplotlib's.
UNREAD = ("torch", "transformers", "peft", "accelerate", "datasets", "scipy", "tokenizers", "huggingface_hub",
          "safetensors", "pyarrow", "gguf", "tensorboard", "jinja2", "plotly", "tqdm", "yaml", "platformdirs",
          "sklearn", "pandas", "lm_eval")


def test_a_notebook_study_runs_on_the_documented_api_alone(tiny_model_dir: Path, tmp_path: Path, capsys) -> None:
    """tests/study.py: five questions, two methods, their paired test, EMD and its drift test, one figure, with no
    import but `beliefdrift` (as bd) from the package."""
    tree = ast.parse(STUDY.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {name for name in imported if name.startswith("beliefdrift")} == {"beliefdrift"}
    spec = importlib.util.spec_from_file_location("study", STUDY)
    assert spec is not None and spec.loader is not None
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    results = study.study(str(tiny_model_dir), tmp_path)
    assert all(math.isfinite(value) for value in results.values()) and results["emd_ppr"] >= 0
    assert (tmp_path / "emd_k_b.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "PPR + SEED_1 − PPR + NoSEED: Δ NLL" in printed and "drift test p =" in printed
    assert printed.count(" on 5\n") == 6  # 2 methods × 3 estimators (q*, q*_RB, θ̂_1), the run's QC keeping all


def test_the_study_type_checks_under_mypy_strict(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """The API's types reach a user's type checker (the package roots' TYPE_CHECKING imports, typed results):
    `mypy --strict` passes on tests/study.py, and a misspelt name or a wrong use of a result fails it."""
    pytest.importorskip("mypy")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nfollow_imports = silent\n"
                      f"[mypy-{','.join(f'{name}.*' for name in UNREAD)}]\nfollow_imports = skip\n")
    cache = pytestconfig.cache.mkdir("mypy") if getattr(pytestconfig, "cache", None) else tmp_path / "cache"
    wrong = tmp_path / "wrong.py"
    wrong.write_text("import beliefdrift as bd\n\nrun = bd.open_run('out')\nrow = run.scores()[0]\n"
                     "accuracy: str = row.metrics['ACC'].point\nbd.evalute(questions='demo')\n")

    def mypy(script: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(cache),
                               str(script)], capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(SRC)},
                              cwd=tmp_path)

    checked = mypy(STUDY)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    failed = mypy(wrong).stdout
    assert 'Incompatible types in assignment (expression has type "float", variable has type "str")' in failed
    assert 'Module has no attribute "evalute"' in failed
