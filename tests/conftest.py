"""Shared fixtures: a tiny random model (fast unit tests) and the real default model (integration); tests marked
`cuda` are skipped where no CUDA GPU is available."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from tiny_model import SKY_QUESTION, save_tiny_model

from beliefdrift.backend import DEFAULT_MODEL, LanguageModel, load_model
from beliefdrift.data import MCQuestion

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU"))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_lm(tiny_model_dir: Path) -> LanguageModel:
    return load_model(str(tiny_model_dir), dtype="float32")


@pytest.fixture(scope="session")
def default_lm() -> LanguageModel:
    """The embedded default model (SmolLM2-135M-Instruct), converted once and cached."""
    return load_model(DEFAULT_MODEL, dtype="float32")


@pytest.fixture(scope="session")
def history_template(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A short PPR template: with a prompt this short the tiny model's θ depends clearly on the answers so far
    (behind the 750-token paper prompt its random attention dilutes them to ~1e-5)."""
    path = tmp_path_factory.mktemp("templates") / "short-ppr.txt"
    path.write_text("{question}\nAnswers ({choice_str}), one per line:\n")
    return str(path)


@pytest.fixture
def question() -> MCQuestion:
    return SKY_QUESTION


@pytest.fixture(scope="session")
def browser():  # noqa: ANN201 (selenium's WebDriver, imported only where installed)
    """One headless Chromium for every browser test of the session (`tests/browser.py`; skipped where missing)."""
    from browser import chromium

    yield from chromium()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Benchmark files: $BELIEFDRIFT_DATA or ../shared/data beside the repository."""
    path = Path(os.environ.get("BELIEFDRIFT_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"benchmark data not found at {path}")
    return path
