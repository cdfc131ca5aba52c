"""`beliefdrift demo` end to end on the tiny model: table, metric tables, EMD section and drift figure."""

from __future__ import annotations

from beliefdrift.cli import main


def test_demo_writes_summary_and_figure(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--model", str(tiny_model_dir), "--n", "2", "-J", "2", "-N", "3", "--emd-questions", "1",
                 "--reasoning-questions", "0", "--out", str(out)])
    assert code == 0
    summary = (out / "summary.md").read_text()
    for method in ("Direct-Query", "PPR + NoSEED", "PPR + SEED_1", "PPR + SEED_5"):
        assert method in summary
    assert "**Table 1.**" in summary and "Expected martingale drift" in summary
    assert (out / "marginal_drift.png").stat().st_size > 0 and (out / "marginal_drift.pdf").exists()
    assert "wrote" in capsys.readouterr().err  # a message, not data: on stderr
