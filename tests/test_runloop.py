"""The one run loop (`runs.loop.run_loop`): drift, emd and reasoning sharded over two torchrun ranks store what one
process stores (as evaluate's test in test_evaluate.py) and leave the store one file, and a store holding some units
resumes with the others."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from beliefdrift.cli.main import main
from beliefdrift.diagnostics.cid import CID_ALPHA, CID_TEST
from beliefdrift.runs.store import CHECKSUM_INSERT, STORE_FILE, RunStore, checksum_row, config_parts

#: The tiniest settings that give each rank questions (3 questions: rank 0 takes two, rank 1 one).
COMMANDS = {
    "drift": ["drift", "-n", "3", "-J", "2", "-N", "3", "--methods", "ppr", "ppr-seed1", "--plot-questions", "0"],
    "emd": ["emd", "-n", "3", "-J", "2", "-N", "2", "--methods", "ppr", "-K", "2", "--prefix-lengths", "0",
            "--burn-in", "1", "-k", "2", "--noise-floor-replicates", "0"],
    "reasoning": ["reasoning", "-n", "3", "-J", "1", "-N", "2", "-m", "1", "--tau", "1", "--max-new-tokens", "24",
                  "--seed-max-new-tokens", "12", "--max-solution-tokens", "3"],
}


def command(name: str, model_dir: Path, out: Path) -> list[str]:
    # `-n`, not `--n`: torchrun rejects `--n` as an ambiguous abbreviation of its own options
    return [*COMMANDS[name], "--model", str(model_dir), "--dtype", "float32", "--dataset", "demo", "--out", str(out)]


def in_process(args: list[str]) -> None:
    """`beliefdrift …` in this process on one intra-op thread, as torchrun's workers run (CPU kernels round
    differently with different thread counts)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(args) == 0
    finally:
        torch.set_num_threads(threads)


def stored(out: Path) -> tuple[dict, dict]:
    """(run identity, {(question, method): records}) of `out`'s store; a unit's wall time left out."""
    with RunStore.open(out / STORE_FILE, read_only=True) as store:
        records = {unit: {k: v for k, v in store.records(*unit).items() if k != "seconds"}
                   for unit in store.record_units()}
        return store.config(), records


#: What each torchrun worker runs: the commands one after the other in one process group (one launch for all three).
WORKER = """import json, sys
import torch.distributed as dist
from beliefdrift.cli.main import main
from beliefdrift.diagnostics.cid import CID_TEST
dist.init_process_group("gloo")
codes = [main(args) for args in json.loads(sys.argv[1])]
dist.destroy_process_group()
sys.exit(max(codes))
"""


@pytest.mark.multiprocess
def test_two_ranks_store_what_one_process_stores(tiny_model_dir: Path, tmp_path: Path) -> None:
    for name in COMMANDS:
        in_process(command(name, tiny_model_dir, tmp_path / "one" / name))
    (tmp_path / "worker.py").write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    commands = [command(name, tiny_model_dir, tmp_path / "two" / name) for name in COMMANDS]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
              str(tmp_path / "worker.py"), json.dumps(commands)]
    result = subprocess.run(launch, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in COMMANDS:
        one, two = stored(tmp_path / "one" / name), stored(tmp_path / "two" / name)
        assert two[0] == one[0] and len(one[1]) == 3 * (2 if name != "emd" else 1), name
        assert two[1] == one[1], name
        assert (tmp_path / "two" / name / "summary.json").exists()  # rank 0 reported, once both ranks had stored
        for run in ("one", "two"):  # a finished run leaves only its outputs: the store is one file, no lock file
            assert sorted(p.name for p in (tmp_path / run / name).glob("*run.sqlite*")) == ["run.sqlite"], (run, name)
            assert not list((tmp_path / run / name).glob(".*lock*")), (run, name)


def test_a_partial_store_resumes_to_the_uninterrupted_run(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Units already stored (by a killed run or another process) are kept and the others computed as before."""
    in_process(command("drift", tiny_model_dir, tmp_path / "full"))
    partial = tmp_path / "partial"
    in_process(command("drift", tiny_model_dir, partial))
    with RunStore.open(partial / STORE_FILE) as store:  # drop one question's ppr-seed1, another's both methods
        units = store.record_units()
        for table in ("records", "checksums"):
            store._db.execute(f"DELETE FROM {table} WHERE (question_id = ? AND method = 'ppr-seed1') "
                              "OR question_id = ?", (units[0][0], units[-1][0]))
        store._db.commit()
    in_process(command("drift", tiny_model_dir, partial))
    assert stored(partial)[1] == stored(tmp_path / "full")[1]


def test_a_store_of_another_cid_check_is_not_resumed(tiny_model_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    """The identity names the c.i.d. test whose verdicts the records hold: a store written before it (no key) is
    refused, naming it, rather than resumed with verdicts of two tests mixed."""
    out = tmp_path / "drift"
    in_process(command("drift", tiny_model_dir, out))
    untestable = sum(records["cid_min_p"] > CID_ALPHA for records in stored(out)[1].values())
    # -J 2: whether a question's check could reject at all depends on its paths' θ_0, and the warning says so
    assert ("the c.i.d. check cannot reject" in capsys.readouterr().err) == (untestable > 0)
    assert stored(out)[0]["cid_test"] == CID_TEST
    assert all(0 < records["cid_min_p"] <= records["cid_p"] <= 1 for records in stored(out)[1].values())
    with RunStore.open(out / STORE_FILE) as store:  # as written before the key (with the config's checksum)
        store._db.execute("DELETE FROM config WHERE key = 'cid_test'")
        texts = store._db.execute("SELECT key, value FROM config").fetchall()
        store._db.execute(CHECKSUM_INSERT, ("config", "", "", *checksum_row(config_parts(texts))))
    capsys.readouterr()
    assert main(command("drift", tiny_model_dir, out)) == 2
    assert "cid_test: stored None" in capsys.readouterr().err
