"""Result rows for the run store's tests, and the writer the concurrent-writers test starts in other processes. It
imports numpy and the store only (no torch), so that each spawned writer starts in a fraction of a second rather than
the seconds a test module importing torch takes."""

from __future__ import annotations

import numpy as np

from beliefdrift.runs.store import ResultRow, RunStore


def make_row(question: str, method: str, position: int, seed: int = 0, paths: int = 3, steps: int = 4) -> ResultRow:
    rng = np.random.default_rng(seed)
    thetas = rng.dirichlet(np.ones(5), size=(paths, steps + 1)).astype(np.float32)
    return ResultRow(
        question_id=question,
        method=method,
        position=position,
        target=int(rng.integers(5)),
        num_labels=5,
        probs=rng.dirichlet(np.ones(5)),
        valid_mass=rng.random((paths, steps + 1)).astype(np.float32),
        answers=rng.integers(0, 5, size=(paths, steps)),
        seeds=rng.integers(0, 5, size=(paths, 2)),
        thetas=thetas,
        seconds=0.25,
        alternatives={"q_star_rb": rng.dirichlet(np.ones(5)), "theta_1": rng.dirichlet(np.ones(5))},
    )


def write_share(path: str, worker: int, workers: int, questions: int) -> None:
    """Worker `worker` of `workers` (a spawned process) adds questions worker, worker + workers, … to the store."""
    with RunStore.open(path, create=False) as store:
        for i in range(worker, questions, workers):
            store.add([make_row(f"q{i}", "ppr", i, seed=i), make_row(f"q{i}", "direct", i, seed=i + 1000)])
