"""User errors: mistakes in the input that the CLI reports as one line (exit status 2), the reading of the YAML
files a user gives, and the checks on a `--model` / `--device` pair that run before anything is loaded or written."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


class UserError(ValueError):
    """A mistake in the user's input (flag, config key, file): the message says what, where and what was
    expected."""


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (its type's name when the message is empty), for one-line errors."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def not_utf8(where: str, err: UnicodeDecodeError) -> str:
    """"where:line: not UTF-8 (why)" for the bytes of a whole file that `err` could not decode."""
    line = err.object.count(b"\n", 0, err.start) + 1
    return f"{where}:{line}: not UTF-8 ({err.reason})"


#: The most values a YAML document may hold once its aliases are followed: a settings file holds hundreds; a "billion
#: laughs" document (aliases of aliases) expands to billions, which reading or printing it would take forever.
YAML_MAX_VALUES = 100_000


def too_many_digits() -> str:
    """An integer longer than Python converts from or to text (`sys.get_int_max_str_digits`), in an error line."""
    return f"an integer of more than {sys.get_int_max_str_digits()} digits (the most Python reads)"


class _Refused(Exception):
    """A YAML document that parses but is refused (a key given twice, an integer too long to read, too many values)."""


def _count_values(reader: Any) -> None:
    """Make the YAML `reader` refuse (`_Refused`) a document once it has composed more than `YAML_MAX_VALUES` values
    (nodes and alias references), before it composes the rest."""
    compose = reader.compose_node
    composed = 0

    def counted(parent: Any, index: Any) -> Any:
        nonlocal composed
        composed += 1
        if composed > YAML_MAX_VALUES:
            raise _Refused(f"holds more than {YAML_MAX_VALUES} values, the most a YAML file may hold; expected a "
                           "settings file")
        return compose(parent, index)

    reader.compose_node = counted


def _expanded_size(root: Any) -> int:
    """How many nodes the YAML node graph `root` holds with every alias followed (each shared node counted as often
    as it is reached), computed once per node; a cycle counts as too many."""
    import yaml

    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in sizes and not expanded:
            continue
        children = ([item for pair in node.value for item in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if not expanded:
            sizes[id(node)] = -1  # on the path: reached again before it is done means a cycle
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        if any(sizes.get(id(child), -1) < 0 for child in children):
            return YAML_MAX_VALUES + 1
        sizes[id(node)] = min(1 + sum(sizes[id(child)] for child in children), YAML_MAX_VALUES + 1)
    return sizes[id(root)]


def _bounded_loader() -> type:
    """A `yaml.SafeLoader` that refuses a mapping naming a key twice (YAML keeps the last silently; keys merged in
    with `<<` may be overridden, as YAML allows) and an integer too long for Python to read or print."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_yaml_int(self, node: Any) -> int:
            try:
                value = super().construct_yaml_int(node)
                str(value)  # a hexadecimal one reads, but could not be printed in an error naming it
            except ValueError:
                raise _Refused(f"line {node.start_mark.line + 1}: {too_many_digits()}") from None
            return value

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value if isinstance(node, yaml.MappingNode) else []:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: SafeLoader's own error names it
                    continue
                if first is not key_node:
                    raise _Refused(f"line {key_node.start_mark.line + 1}: the key {key!r} given again (first on "
                                   f"line {first.start_mark.line + 1}); a mapping names a key once")
            return super().construct_mapping(node, deep)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    return Loader


def yaml_node(text: str, where: str, loader: type | None = None) -> Any:
    """The YAML document `text` composed (its tags not yet applied), refused with a UserError starting with `where`
    when it is not valid YAML, holds more than `YAML_MAX_VALUES` values (refused once it has composed that many) or
    expands to more with its aliases followed (an alias bomb)."""
    import yaml

    reader = (loader or yaml.SafeLoader)(text)
    _count_values(reader)
    try:
        node = reader.get_single_node()
    except _Refused as err:
        raise UserError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise UserError(f"{where}: not valid YAML ({' '.join(str(err).split())})") from None
    except RecursionError:
        raise UserError(f"{where}: not valid YAML (nested too deeply)") from None
    finally:
        reader.dispose()
    if node is not None and _expanded_size(node) > YAML_MAX_VALUES:
        raise UserError(f"{where}: its aliases expand to more than {YAML_MAX_VALUES} values (an alias bomb?), the "
                        "most a YAML file may hold; expected a settings file")
    return node


def load_yaml(text: str, where: str) -> Any:
    """The YAML document `text` as plain values (`yaml.safe_load`'s), its alias expansion bounded (`yaml_node`) and
    no mapping naming a key twice; else a UserError starting with `where`."""
    import yaml

    loader = _bounded_loader()
    node = yaml_node(text, where, loader)
    if node is None:
        return None
    reader = loader("")
    try:
        return reader.construct_document(node)
    except _Refused as err:
        raise UserError(f"{where}: {err}") from None
    except yaml.YAMLError as err:
        raise UserError(f"{where}: not valid YAML ({' '.join(str(err).split())})") from None
    finally:
        reader.dispose()


def read_yaml(path: Path, where: str) -> Any:
    """The YAML document in the file `path` (a `--config`, `--preset` or `--fields` file, a run's config.yaml); a
    file that cannot be read, is not UTF-8 or is not valid YAML (`load_yaml`) is a UserError starting with
    `where` (the flag and the file)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as err:
        raise UserError(f"{where}: cannot read it ({err.strerror or first_line(err)})") from None
    except UnicodeDecodeError as err:
        raise UserError(not_utf8(where, err)) from None
    return load_yaml(text, where)


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def check_device(device: str) -> None:
    """`device` names a device this machine has (cpu, cuda, cuda:N or auto)."""
    import torch

    if device == "auto":
        return
    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise UserError(f"--device {device}: unknown device; expected cpu, cuda, cuda:N or auto") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {device}: no CUDA GPU is available on this machine; use --device cpu or auto")
    if kind not in ("cpu", "cuda"):
        raise UserError(f"--device {device}: unsupported device type {kind!r}; expected cpu, cuda, cuda:N or auto")


def check_model_files(path: Path, spec: str) -> None:
    """The model directory `path` has a config.json that is a JSON mapping and .safetensors files whose headers
    cover them (a download or copy cut short is named before transformers loads it, with a traceback)."""
    import json

    from safetensors import SafetensorError, safe_open

    try:
        config = json.loads((path / "config.json").read_bytes())
    except (OSError, ValueError) as err:
        raise UserError(f"--model {spec}: config.json is not readable JSON ({first_line(err)})") from None
    if not isinstance(config, dict):
        raise UserError(f"--model {spec}: config.json holds a {type(config).__name__}, not a mapping of settings")
    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(weights, "pt"):
                pass
        except (OSError, SafetensorError) as err:  # a truncated or damaged file
            raise UserError(f"--model {spec}: {weights.name} is not a complete safetensors file ({first_line(err)}); "
                            "a download or copy cut short? fetch it again") from None


def check_model(spec: str) -> None:
    """`spec` is a registry name, a model directory, a .gguf file, or a hub id that is cached or on the hub
    (one request, no retries; none when HF_HUB_OFFLINE is set)."""
    from beliefdrift.backend import REGISTRY

    if spec in REGISTRY:
        return
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise UserError(f"--model {spec}: no such .gguf file")
        return
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise UserError(f"--model {spec}: a directory but not a model (no config.json); expected a "
                            "Hugging Face model directory (config.json, weights, tokenizer)")
        check_model_files(path, spec)
        return
    if path.exists() or spec.startswith((".", "/", "~")):
        raise UserError(f"--model {spec}: not a model directory or .gguf file")
    import huggingface_hub

    what = (f"--model {spec}: neither a registry name ({', '.join(REGISTRY)}), a local directory, a .gguf file "
            "nor a")
    try:
        if huggingface_hub.try_to_load_from_cache(spec, "config.json") is not None:
            return
        if "/" not in spec:  # not cached and not OWNER/NAME: a misspelt name, refused without asking the hub
            from beliefdrift.registry import did_you_mean

            raise UserError(f"{what} hub id (OWNER/NAME){did_you_mean(spec, REGISTRY)}")
        if _hub_offline():
            raise UserError(f"{what} hub id in the local cache (HF_HUB_OFFLINE is set)")
        found = huggingface_hub.file_exists(spec, "config.json")
    except UserError:
        raise
    except Exception as err:  # invalid id, no network, gated: all end in the same one-line message
        raise UserError(f"{what} reachable hub id ({type(err).__name__}: {first_line(err)})") from None
    if not found:
        raise UserError(f"{what} hub id on huggingface.co (no config.json there)")
