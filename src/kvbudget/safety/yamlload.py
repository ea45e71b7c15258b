"""YAML loaded with limits: file size, nesting depth and alias expansion.

``yaml.safe_load`` builds aliases as shared references, so a 1 KB "billion laughs" file loads
quickly and then exhausts memory (or hangs) as soon as anything walks the tree; a self-referring
alias makes a cycle no validator terminates on. :func:`load_yaml_text` composes the node graph
first, refuses cycles and documents whose alias-expanded size exceeds :data:`MAX_YAML_NODES`
or whose depth exceeds :data:`MAX_YAML_DEPTH`, then constructs the data. Every refusal is a
one-line :class:`~kvbudget.errors.ConfigError` naming the file and the limit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from kvbudget.errors import ConfigError

#: largest YAML file read (bytes)
MAX_YAML_BYTES = 4 * 1024 * 1024
#: most nodes after expanding every alias (scalars, lists and mappings together)
MAX_YAML_NODES = 200_000
#: deepest nesting of lists and mappings
MAX_YAML_DEPTH = 64


def _check_graph(root: Node, source: str) -> None:
    """Expanded size and depth of the composed graph, without expanding it (memoized)."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order walk: no recursion limit, no exponential blow-up
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            if size[key] > MAX_YAML_NODES:
                raise ConfigError(
                    f"{source}: the YAML expands to more than {MAX_YAML_NODES:,} nodes (aliases "
                    "counted at every use); write the values out or shrink the file",
                )
            if depth[key] > MAX_YAML_DEPTH:
                raise ConfigError(
                    f"{source}: the YAML nests deeper than {MAX_YAML_DEPTH} levels; flatten it",
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise ConfigError(
                f"{source}: a YAML alias refers to a node that contains it (a cycle); remove "
                "the self-reference",
            )
        on_path.add(key)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) not in size:
                stack.append((kid, False))


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def load_yaml_text(text: str, *, source: str) -> Any:
    """Parse one YAML document from ``text`` within the limits (``None`` for an empty one).

    :raises yaml.YAMLError: a syntax error (callers name line and column)
    :raises ConfigError: a limit is exceeded"""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(
            f"{source}: {len(text):,} characters is more than the {MAX_YAML_BYTES:,} a YAML "
            "file may have; shrink it"
        )
    loader = yaml.SafeLoader(text)
    old_limit = sys.getrecursionlimit()
    try:
        # the composer recurses once per nesting level; the depth check follows right after
        sys.setrecursionlimit(max(old_limit, 10_000))
        try:
            node = loader.get_single_node()
        except RecursionError as exc:
            raise ConfigError(
                f"{source}: the YAML nests deeper than {MAX_YAML_DEPTH} levels; flatten it"
            ) from exc
        finally:
            sys.setrecursionlimit(old_limit)
        if node is None:
            return None
        _check_graph(node, source)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_text_file(path: Path, *, what: str = "file", max_bytes: int = MAX_YAML_BYTES) -> str:
    """A UTF-8 text file, or a one-line :class:`ConfigError` (missing, unreadable, too big,
    not UTF-8; a UTF-16 file is refused by name)."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ConfigError(
                f"{what} {str(path)!r}: {size:,} bytes is more than the {max_bytes:,} allowed; "
                "shrink it"
            )
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} {str(path)!r} not found; check the path") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{what} {str(path)!r} is a directory; give a file") from exc
    except OSError as exc:
        raise ConfigError(
            f"{what} {str(path)!r} cannot be read ({exc.strerror or exc}); check its permissions"
        ) from exc
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise ConfigError(
            f"{what} {str(path)!r} is UTF-16; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {str(path)!r} is not valid UTF-8 (byte {exc.start}); save it as UTF-8"
        ) from exc


def load_yaml_file(path: Path, *, what: str = "file") -> Any:
    """:func:`read_text_file` then :func:`load_yaml_text` (syntax errors as ConfigError with
    line and column)."""
    text = read_text_file(path, what=what)
    try:
        return load_yaml_text(text, source=f"{what} {str(path)!r}")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(
            f"{what} {str(path)!r}: YAML syntax error{where}: {problem}; fix the YAML syntax"
        ) from exc
