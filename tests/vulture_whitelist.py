"""Names vulture (`vulture src tests/vulture_whitelist.py`, tests/test_code.py) finds unread in src/ that are read
elsewhere: by a framework, by users of the public API, or by the tests and bench/ (each says so where it lives).
A name is read here by being named; this file is never imported."""
# ruff: noqa: B018

from beliefdrift.backend.kv_cache import GrowingLayer
from beliefdrift.backend.shared_prefix import use_per_path_cache
from beliefdrift.engine.resampling import QuestionRunner
from beliefdrift.report.runs import load_run

_ = object()

# transformers reads these attributes of its models and caches
_.layer_class_to_replicate  # DynamicCache: the layer class a cache grows with (backend/kv_cache.py)
_._can_checkpoint_with_cache  # a gradient-checkpointed decoder layer keeps its cache (backend/compat.py)
_.hf_quantizer  # dropped before a dequantized GGUF model is saved (backend/loading.py)
GrowingLayer.get_seq_length  # the Cache layer API
# logging.StreamHandler writes to `.stream` (cli/main.py's StderrHandler sets it per message)
_.stream
# the public API (docs/getting-started.md)
QuestionRunner.ppr
# the tests' and bench/'s (said in their docstrings)
use_per_path_cache  # tests/test_engine.py, tests/test_families.py: the reference for the shared prefix
load_run  # bench/report.py, tests/test_cli_errors.py: one run's scores
