"""The YAML files a user gives (`--config`, `--preset`, `--fields`, a run's config.yaml, an lm-eval task file), read
with bounds: no alias bomb, no mapping that names a key twice; every failure a UserError naming the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from beliefdrift.errors import UserError, first_line, not_utf8, too_many_digits

#: The most values a YAML document may hold once its aliases are followed: a settings file holds hundreds; a "billion
#: laughs" document (aliases of aliases) expands to billions, which reading or printing it would take forever.
YAML_MAX_VALUES = 100_000


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
