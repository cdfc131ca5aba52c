"""Models behind an OpenAI-compatible server (`--model openai:BASE_URL`, backend/served.py), tested against a real
llama.cpp server (llama-cpp-python's, started once for the session on a free loopback port with the default model's
GGUF file; the tests that need it skip where llama_cpp is not installed) and, for faults, a small proxy in front of it.

References: θ from the server equals θ from llama.cpp in process (same weights, same token ids) to 1e-6; every
answer and seed is drawn on our side, so a run through the server resumes, after any fault, to the same numbers.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch

from beliefdrift.backend.served import ServerOptions, nucleus_logits
from beliefdrift.cli.main import main
from beliefdrift.cot.generation import nucleus_sampler
from beliefdrift.engine.resampling import make_generator
from beliefdrift.errors import UserError

HAS_LLAMA_CPP = importlib.util.find_spec("llama_cpp") is not None and importlib.util.find_spec("httpx") is not None
needs_server = pytest.mark.skipif(not HAS_LLAMA_CPP, reason="needs llama-cpp-python[server] and httpx (the serve "
                                                            "extra: pip install 'beliefdrift[serve]')")


# ---------------------------------------------------------------------------------------------- no server needed


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0, 1.6])
@pytest.mark.parametrize("top_p", [0.8, 0.95, 1.0])
def test_nucleus_logits_draw_what_the_full_logits_draw(temperature, top_p):
    """From the top L log-probabilities alone, the nucleus sampler keeps the same tokens with the same weights as on
    the full logits whenever `nucleus_logits` says they determine it (the same generator then draws the same
    tokens), and says so for L = vocabulary always, and for some smaller L."""
    vocab, rows = 300, 64
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 3
    banned = [5, 17]
    full = logits.clone()
    full[:, banned] = float("-inf")
    expected = nucleus_sampler(temperature, top_p, make_generator(0, "draws"))(full)
    log_probs = torch.log_softmax(logits.double(), -1)
    determined = {}
    for size in (4, 30, vocab):
        top = log_probs.topk(size, -1)
        made = [nucleus_logits(i.tolist(), v.tolist(), vocab, temperature, top_p, banned)
                for i, v in zip(top.indices, top.values, strict=True)]
        determined[size] = sum(m is not None for m in made)
        if determined[size] < rows:
            continue
        surrogate = torch.stack(made)
        surrogate[:, banned] = float("-inf")
        drawn = nucleus_sampler(temperature, top_p, make_generator(0, "draws"))(surrogate)
        assert torch.equal(drawn, expected)
    assert determined[vocab] == rows
    if temperature == 0:
        assert determined[4] == rows  # greedy needs the top token only
    if top_p == 1.0 and temperature > 0:
        assert determined[30] == 0  # the whole vocabulary is the nucleus
    # each row on its own: where determined, its draw matches the full logits' draw for every uniform
    top = log_probs.topk(30, -1)
    checked = 0
    for row in range(rows):
        made = nucleus_logits(top.indices[row].tolist(), top.values[row].tolist(), vocab, temperature, top_p, banned)
        if made is None:
            continue
        checked += 1
        made[banned] = float("-inf")
        for seed in range(20):
            mine = nucleus_sampler(temperature, top_p, make_generator(seed, row))(made[None])
            theirs = nucleus_sampler(temperature, top_p, make_generator(seed, row))(full[row][None])
            assert mine == theirs
    if temperature == 0 or (temperature, top_p) in ((0.7, 0.8), (0.7, 0.95), (1.0, 0.8)):
        assert checked > 0  # (a flat tail at T > 1, or top_p = 1, needs the whole vocabulary)


def test_server_options_are_checked():
    assert ServerOptions.from_args({"concurrency": 4, "timeout": 2.5, "served_model": "m"}) == ServerOptions(
        served_model="m", concurrency=4, timeout=2.5)
    with pytest.raises(UserError, match="not an option of a served model"):
        ServerOptions.from_args({"low_cpu_mem_usage": True})
    with pytest.raises(UserError, match="concurrency=0: expected an integer ≥ 1"):
        ServerOptions.from_args({"concurrency": 0})
    with pytest.raises(UserError, match="retries=x"):
        ServerOptions.from_args({"retries": "x"})


def test_train_refuses_a_served_model(capsys):
    assert main(["train", "--model", "openai:http://127.0.0.1:9/v1", "--out", "unused"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train needs the model's gradients" in err
