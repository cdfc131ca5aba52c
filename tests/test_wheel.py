"""The wheel a researcher installs works outside the checkout: it is built from a copy of the sources, installed
without dependencies into an empty directory (the dependencies come from the running environment, so no fresh
virtual environment and no download), and `beliefdrift demo` runs from another directory, where the bundled presets
resolve by name.
A fresh virtual environment with torch would take minutes of downloads and CPU on a 2-core CI machine: not here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.integration
def test_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    subprocess.run([*build, str(source)], check=True, capture_output=True)
    wheel = next(tmp_path.glob("beliefdrift-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for shipped in ("beliefdrift/presets/cpu-default.yaml", "beliefdrift/data/demo.jsonl", "beliefdrift/py.typed"):
        assert shipped in names
    assert any(name.endswith("licenses/LICENSE") for name in names)

    target = tmp_path / "installed"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)]
    subprocess.run(install, check=True, capture_output=True)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "beliefdrift", "demo", "--n", "1", "-J", "2", "-N",
               "2", "--dtype", "float32", "--emd-questions", "0", "--reasoning-questions", "0", "--out", "demo"]
    result = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (work / "demo" / "summary.md").is_file()
    code = "import beliefdrift.config.options as c; print(c.__file__); print(c.preset_file('cpu-default'))"
    paths = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert all(path.startswith(str(target)) for path in paths), paths
