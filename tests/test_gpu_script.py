"""The GPU scripts' CPU paths: `bench/paper_scale.py` (`bench/gpu.sh DIR paper`) saves a random model of a shape and
runs `beliefdrift evaluate` from the CLI on it, stopped at a question cap, and prints path-answers/s and the whole
split's time from its store; `bench/profile_step.py` reads its profile from the profiler's raw events, as
`key_averages` would give it, without building torch's per-event Python objects."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest
import torch
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity, profile

from beliefdrift.backend import DEFAULT_MODEL
from beliefdrift.backend.loading import model_source
from beliefdrift.registry import parse_method

sys.path.insert(0, str(Path(__file__).parents[1] / "bench"))
import paper_scale  # noqa: E402
import profile_step  # noqa: E402

NUMBER = r"([\d,]+\.?\d*)"


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"no {pattern!r} in:\n{text}"
    return float(match[1].replace(",", ""))


@pytest.fixture(scope="module")
def tokenizer_dir() -> str:
    """The default model's tokenizer (its converted directory): the shaped models' prompts as the GPU runs write."""
    return str(model_source(DEFAULT_MODEL))


def test_paper_scale_runs_evaluate_from_the_cli_and_extrapolates(tmp_path, tokenizer_dir, capsys):
    paper_scale.main([str(tmp_path), "--shape", "tiny", "--device", "cpu", "--dtype", "float32", "--dataset", "demo",
                      "--paths", "2", "--steps", "3", "--questions", "1", "--tokenizer", tokenizer_dir])
    out = capsys.readouterr().out
    assert "evaluate --config paper --model" in out and "stopped at 1 stored questions" in out
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as db:  # the store, read apart from the script
        rows = db.execute("SELECT question_id, method, seconds FROM results").fetchall()
        total = db.execute("SELECT count(*) FROM results").fetchone()[0]
    methods = {method for _, method, _ in rows}
    assert methods == set(paper_scale.PAPER_METHODS) and len(methods) == 7
    questions = {question for question, _, _ in rows}
    assert 1 <= len(questions) < 52 and total == 7 * len(questions)  # stopped early, whole questions kept
    # a question's engine time: one row of the base model's call and one of the adapter's
    engine = sum(sum({parse_method(m).needs_adapter: s for q, m, s in rows if q == question}.values())
                 for question in questions)
    rate = number(r"path-answers/s: " + NUMBER, out)
    assert rate == pytest.approx(len(questions) * 7 * 2 * 3 / engine, abs=0.05)
    assert re.search(rf"\({len(questions)} questions? × 7 methods × J 2 × N 3 / ", out)
    assert "full demo: 52 questions × 7 × 2 × 3 = 2,184 path-answers" in out
    full = number(r"path-answers / [\d,.]+ per s = " + NUMBER + " s", out)
    assert full == pytest.approx(2184 / rate, rel=2e-3)  # the rate printed to one decimal
    assert number(NUMBER + " min", out) == pytest.approx(full / 60, abs=0.05)
    assert number(r"answers drawn/s: " + NUMBER, out) == pytest.approx(rate * 3 / 7, abs=0.1)  # 3 of 7 draw N


def test_paper_scale_counts_the_paper_as_issue_50_does():
    """1,221 CSQA questions × 7 methods × J 32 × N 100 = 27.3 M path-answers: 59 min at 7,718 path-answers/s."""
    at_7718 = paper_scale.Measured(total=1221, questions=1, seconds=7 * 32 * 100 / 7718,
                                   methods=paper_scale.PAPER_METHODS, paths=32, steps=100)
    assert at_7718.path_answers(1221) == 27_350_400
    assert at_7718.rate == pytest.approx(7718)
    assert at_7718.full_seconds / 60 == pytest.approx(59.06, abs=0.01)
    assert at_7718.generating == 3  # ppr, ppr-seed1, ppr-seed5


def test_fused_attention_kernels_are_attention_and_the_answers_log_softmax_is_not():
    for kernel in ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::"
                   "bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
                   "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
                   "cutlass::bfloat16_t>>(Flash_fwd_params)", "aten::_efficient_attention_forward"):
        assert profile_step.group(kernel) == "attention", kernel
    for kernel in ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
                   "nvjet_tst_128x64_64x8_1x1_v_bz_TNN", "aten::mm", "aten::addmm"):
        assert profile_step.group(kernel) == "matrix products", kernel
    for kernel in ("void at::native::vectorized_elementwise_kernel<4>", "aten::_log_softmax",  # the answers' θ
                   "void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, (anonymous namespace)::"
                   "LogSoftMaxForwardEpilogue>(float*, float const*, int)"):
        assert profile_step.group(kernel) == "other", kernel
    assert profile_step.group("aten::_softmax") == "attention"


def test_own_times_equal_key_averages_on_a_cpu_profile():
    """Each operator's own time (less its callees') from the raw events equals `key_averages`'s self time."""
    weight, x = torch.randn(64, 32), torch.randn(8, 16, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            h = torch.nn.functional.linear(x, weight).softmax(-1)
            torch.nn.functional.scaled_dot_product_attention(h, h, h).sum().item()
    times = profile_step.own_times(prof.profiler.kineto_results.events(), torch.device("cpu"))
    expected = {event.key: event.self_cpu_time_total / 1e6 for event in prof.key_averages()}
    assert set(times) == set(expected) and "aten::linear" in times
    for name, own in times.items():
        assert own.seconds == pytest.approx(expected[name], abs=1e-9), name
    assert times["aten::linear"].seconds < sum(own.seconds for own in times.values()) / 2  # nesting subtracted


def test_profile_step_builds_no_per_event_objects(tokenizer_dir, monkeypatch, capsys):
    """The profile is read without torch's per-event parse (~100 µs an event; a 16-question profile on the 8B shape
    holds about a million events), into the same table."""

    def refuse(*args, **kwargs):
        raise AssertionError("the profile was parsed into FunctionEvents")

    monkeypatch.setattr(autograd_profile, "_parse_kineto_results", refuse)
    profile_step.main(["--shape", "tiny", "--paths", "2", "--steps", "2", "--questions", "1",
                       "--tokenizer", tokenizer_dir])
    out = capsys.readouterr().out
    row = re.search(r"^\| 1 \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| – \|$", out, re.MULTILINE)
    assert row and float(row[2]) > 0, out
    assert re.search(r"1 question: [\d,]+ events read in", out)
    assert "| aten::" in out
