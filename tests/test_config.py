"""The one config system (`beliefdrift.config.options`) and the one run identity (`beliefdrift.runs.identity`): every
command's flags come from its settings dataclass, a `--config` YAML file sets defaults the flags override, a concept
has one spelling across commands, and the identity keeps exactly the settings that change a number."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from beliefdrift.cli.main import COMMANDS, build_parser, main
from beliefdrift.config.diagnostics import DriftConfig, EMDCommandConfig
from beliefdrift.config.evaluate import EvalConfig
from beliefdrift.config.options import coerce, is_operational, load_settings, settings_from
from beliefdrift.data.registry import load_dataset
from beliefdrift.errors import UserError
from beliefdrift.runs.identity import identity_hash, run_identity

#: Old spellings that must not come back (one spelling per concept).
RETIRED = {"--K", "--k", "-R", "--rollouts", "--pairs", "--seeds", "--num-rollouts", "--num_rollouts"}


def subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_a_concept_has_one_spelling_in_every_command() -> None:
    spellings: dict[str, dict[str, set[str]]] = {}
    for name, parser in subparsers().items():
        for action in parser._actions:
            if action.option_strings and action.dest not in ("help",):
                spellings.setdefault(action.dest, {})[name] = set(action.option_strings)
    for dest, by_command in spellings.items():
        assert len({frozenset(flags) for flags in by_command.values()}) == 1, (dest, by_command)
    flags = {flag for by_command in spellings.values() for options in by_command.values() for flag in options}
    assert not flags & RETIRED
    assert {"-J", "-N", "-K", "-k", "-n", "-m"} <= flags
    assert set(subparsers()) == set(COMMANDS)


@pytest.mark.parametrize("command", ["evaluate", "drift", "emd", "reasoning", "train", "demo", "report", "paper"])
def test_every_command_takes_a_config_file(command: str) -> None:
    options = {flag for action in subparsers()[command]._actions for flag in action.option_strings}
    assert "--config" in options


def test_config_file_sets_defaults_and_flags_win(tmp_path: Path) -> None:
    preset = tmp_path / "drift.yaml"
    preset.write_text("paths: 5\nsteps: 9\nmethods: [ppr, ppr-seed1]\nprefix_lengths_unused: 1\n")
    with pytest.raises(UserError, match=r"drift.yaml: unknown settings \['prefix_lengths_unused'\]"):
        build_parser().parse_args(["drift", "--config", str(preset)])
    preset.write_text("paths: 5\nsteps: 9\nmethods: [ppr, ppr-seed1]\n")
    config = settings_from(build_parser().parse_args(["drift", "--config", str(preset), "-J", "7"]), DriftConfig)
    assert (config.paths, config.steps, config.methods) == (7, 9, ["ppr", "ppr-seed1"])
    assert settings_from(build_parser().parse_args(["drift"]), DriftConfig) == DriftConfig()
    assert DriftConfig().paths == 16 and EMDCommandConfig().paths == 32 and EvalConfig().paths == 8


@pytest.mark.parametrize(("yaml_text", "fragment"), [
    ("paths: abc\n", "setting paths: expected an integer, got 'abc'"),
    ("paths: 2.5\n", "setting paths: expected an integer, got 2.5"),
    ("methods: ppr\n", "setting methods: expected a list of strings or null, got 'ppr'"),
    ("distance: [l1, l3]\n", "setting distance: expected one of l1, kl, tv, got 'l3'"),
    ("dtype: float16\n", "setting dtype: expected one of auto, float32, bfloat16"),
    ("skip_long_prompts: 1\n", "setting skip_long_prompts: expected true or false, got 1"),
    ("- paths\n", "expected a mapping of settings, got list"),
    ("paths: [\n", "not valid YAML"),
    (b"paths: 2\n# caf\xe9\n", "emd.yaml:2: not UTF-8 (invalid continuation byte)"),
    ("1: 2\npathz: 3\n", "unknown settings [1, 'pathz']"),
])
def test_a_bad_config_file_is_one_line_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture, yaml_text: str | bytes, fragment: str
) -> None:
    preset = tmp_path / "emd.yaml"
    preset.write_bytes(yaml_text if isinstance(yaml_text, bytes) else yaml_text.encode())
    assert main(["emd", "--config", str(preset)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"--config {preset}:" in err and fragment in err


def test_a_second_config_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two --config files: before, the first one's settings were used and the second was recorded as the config."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("paths: 3\n")
    second.write_text("paths: 5\n")
    assert main(["emd", "--config", str(first), f"--config={second}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert f"--config given 2 times ({first}, {second}); expected one YAML file" in err


def test_an_output_directory_under_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`out: ~/runs/x` in a YAML file (or --out=~/…, which no shell expands) is under the home directory: before, a
    directory named `~` was made in the current one."""
    monkeypatch.setenv("HOME", str(tmp_path))
    preset = tmp_path / "c.yaml"
    preset.write_text("out: ~/runs/x\n")
    assert load_settings(EvalConfig, preset).out == tmp_path / "runs" / "x"
    parsed = build_parser().parse_args(["drift", "--out=~/drift"])
    assert settings_from(parsed, DriftConfig).out == tmp_path / "drift"


def test_out_of_range_values_name_the_flag(capsys: pytest.CaptureFixture) -> None:
    assert main(["emd", "-K", "1"]) == 2
    assert "-K/--horizon must be in [2, 65536], got 1" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"--prefix-lengths must be in \[0, 65536\], got \[0, -2\]"):
        load_settings(EMDCommandConfig, None, {"prefix_lengths": [0, -2]})


def test_coerce_reads_yaml_values_as_the_field_types() -> None:
    assert coerce(float, "1e-4") == 1e-4 and coerce(int, 3) == 3 and coerce(int, "3") == 3
    assert coerce(int | None, None) is None and coerce(float, 3) == 3.0
    assert coerce(list[int], [0, 2]) == [0, 2] and coerce(Path, "a/b") == Path("a/b")
    # a float where an integer is meant (1.0e+308 would be taken as the integer 10^308), an empty path (the current
    # directory), a number past any float
    for hint, value in ((int, True), (bool, "yes"), (str, 3), (list[int], 3), (int, None), (int, 3.0),
                        (int, 1.0e308), (list[int], [0, 2.0]), (int, "1e3"), (Path, ""), (float, 10**400)):
        with pytest.raises(ValueError, match="expected"):
            coerce(hint, value)


def test_identity_keeps_what_changes_a_number_and_resolves_auto() -> None:
    questions = load_dataset("demo", n=2)
    base = EvalConfig(n=2)
    identity = run_identity("evaluate", base, questions, template="T")
    assert identity["dtype"] in ("float32", "bfloat16") and identity["device"] == "cpu"  # never "auto"
    operational = {f.name for f in dataclasses.fields(EvalConfig) if is_operational(f)}
    assert operational == {"device_map", "data_dir", "batch_questions", "compile", "cuda_graphs", "qc_path_mass",
                           "qc_max_fraction", "qc_common", "bootstrap", "out"}
    assert not operational & set(identity)
    assert identity["sha256"] == identity_hash(identity)
    same = run_identity("evaluate", dataclasses.replace(base, batch_questions=4, out=Path("elsewhere")), questions,
                        template="T")
    assert same == identity
    for change in ({"paths": 9}, {"template_ending": "paper"}, {"methods": ["ppr"]}, {"seed": 1}):
        other = run_identity("evaluate", dataclasses.replace(base, **change), questions, template="T")
        assert other["sha256"] != identity["sha256"], change
    assert run_identity("evaluate", base, questions, template="U")["sha256"] != identity["sha256"]
    assert run_identity("evaluate", base, questions[:1], template="T")["questions_sha256"] != (
        identity["questions_sha256"])


def test_bundled_presets_resolve_by_name_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--config cpu-default` (and `cpu-default.yaml`) reads the preset shipped inside the package, whatever the
    working directory; a file of that name in the working directory wins; an unknown name lists the presets."""
    source = Path(__file__).resolve().parents[1] / "configs" / "cpu-default.yaml"
    monkeypatch.chdir(tmp_path)
    parser = subparsers()["evaluate"]
    by_path = settings_from(parser.parse_args(["--config", str(source)]), EvalConfig)
    for name in ("cpu-default", "cpu-default.yaml"):
        assert settings_from(parser.parse_args(["--config", name]), EvalConfig) == by_path
    assert (by_path.dataset, by_path.n) == ("csqa", 50) != (EvalConfig().dataset, EvalConfig().n), "read the preset"
    (tmp_path / "cpu-default.yaml").write_text("paths: 3\n")
    assert settings_from(parser.parse_args(["--config", "cpu-default.yaml"]), EvalConfig).paths == 3
    with pytest.raises(FileNotFoundError, match="bundled preset .*cpu-default"):
        parser.parse_args(["--config", "no-such-preset"])


def test_settings_added_later_enter_the_identity_only_when_set() -> None:
    """--revision, --trust-remote-code, --model-args and --fields are recorded when given, and runs that do not use
    them keep the identity (hash) they had before these settings existed, so old run stores still resume."""
    questions = load_dataset("demo", n=2)
    base = run_identity("evaluate", EvalConfig(n=2), questions, template="T")
    later = {"revision": "v1.0", "trust_remote_code": True, "model_args": "low_cpu_mem_usage=True", "fields": "q=x"}
    assert not set(later) & set(base)
    for key, value in later.items():
        changed = run_identity("evaluate", EvalConfig(n=2, **{key: value}), questions, template="T")
        assert changed[key] == value and changed["sha256"] != base["sha256"]
        assert {k: v for k, v in changed.items() if k not in (key, "sha256")} == {
            k: v for k, v in base.items() if k != "sha256"}
    args = build_parser().parse_args(["evaluate", "--revision", "main", "--trust-remote-code", "--model-args",
                                      "a=1,b=x", "--fields", "question=q"])
    config = settings_from(args, EvalConfig)
    assert (config.revision, config.trust_remote_code, config.model_args, config.fields) == (
        "main", True, "a=1,b=x", "question=q")
    assert config.pretrained_kwargs() == {"revision": "main", "trust_remote_code": True,
                                          "model_args": {"a": 1, "b": "x"}}


def test_one_spelling_per_method() -> None:
    """`ppr-seed05` is `ppr-seed5` (and `ppr-seed0` is `ppr`): one row, one random stream, never two rows titled
    "PPR + SEED_5" with different numbers; one method named twice, in any spelling, is refused naming both."""
    from beliefdrift.config.evaluate import resolve_methods
    from beliefdrift.registry import parse_method

    assert parse_method("ppr-seed05").name == "ppr-seed5" and parse_method("AM-PPR-seed001").name == "am-ppr-seed1"
    assert parse_method("ppr-seed0").name == "ppr"
    assert resolve_methods(EvalConfig(methods=["ppr-seed05", "ppr-seed0"])).methods == ["ppr", "ppr-seed5"]
    assert [m.name for m in DriftConfig(methods=["ppr-seed05"]).method_list] == ["ppr-seed5"]
    for settings in (EvalConfig, DriftConfig):
        with pytest.raises(UserError, match=r"^--methods: ppr-seed5 and ppr-seed05 name the same method \(ppr-seed5\); "
                                            "give each method once$"):
            settings(methods=["ppr-seed5", "ppr-seed05"])
        with pytest.raises(UserError, match="^--methods: ppr given twice; give each method once$"):
            settings(methods=["ppr", "direct", "ppr"])


def test_sizes_that_multiply_past_the_machine_are_refused_before_anything_loads() -> None:
    """The product of the sizes, estimated from them, against the machine's memory: one line naming the flags."""
    from beliefdrift.config.options import ReportOptions

    with pytest.raises(UserError, match=r"the bootstrap's resamples \(--bootstrap 1000000 × 100000000 questions × 8 "
                                        r"bytes\) need about .* GiB, more than this machine's .* lower --bootstrap"):
        ReportOptions(bootstrap=10**6).check_memory(questions=10**8)
    ReportOptions(bootstrap=10**6).check_memory(questions=100)  # 800 MB: fine
    with pytest.raises(UserError, match=r"the k-step estimates of a question .* lower -J/--paths, -K/--horizon"):
        EMDCommandConfig(burn_in_paths=65536, burn_in=65536)
    EMDCommandConfig(paths=512, horizon=64, lookahead=64, burn_in=64, noise_floor_replicates=1000)  # a large GPU run
