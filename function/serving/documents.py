"""The YAML documents `function render` reads: any bytes in, JSON-shaped documents or one clear error out.

Its input is whatever a user points it at (a file, a directory, standard
input), so nothing about it is assumed: it is read up to a bound, must be
UTF-8 text without NUL bytes or lines longer than any Kubernetes object,
and each document must be what the API server would store: JSON (string
keys; strings, finite numbers within int64, booleans, null, lists and
maps), nested no deeper than MAX_DEPTH, its aliases expanding to no more
than MAX_NODES nodes and never into themselves (a YAML bomb, a cycle).
Timestamps stay strings, as Kubernetes reads them.
"""

from __future__ import annotations

import math
from typing import IO, Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

# What one input may hold: far more than any stream of Federations or their observed
# Objects (the pure-Python YAML parser takes about a second a MiB).
MAX_BYTES = 64 * 2**20
# No line of a Kubernetes object is longer than the object: the API server takes at most
# 3 MiB in a request's body.
MAX_LINE_BYTES = 3 * 2**20
# Kubernetes objects nest a few dozen levels at most (a pod template's affinity, say 20).
MAX_DEPTH = 100
# Nodes of one document once its aliases are expanded: an object the API server would
# take has fewer.
MAX_NODES = 1_000_000
TIMESTAMP = "tag:yaml.org,2002:timestamp"
INT64 = range(-(2**63), 2**63)
# What the safe loader makes of YAML's types that JSON has not.
YAML_ONLY: dict[type, str] = {bytes: "a !!binary value", tuple: "an !!omap or !!pairs entry"}


class InputError(Exception):
    """Input that is not YAML documents of Kubernetes shape; the message says where and why."""


def read(source: str, stream: IO[bytes]) -> str:
    """The text of a binary stream, checked: bounded, UTF-8, no NUL byte, no line longer than an object."""
    try:
        data = stream.read(MAX_BYTES + 1)
    except OSError as err:
        msg = f"{source}: cannot read: {err.strerror or err}"
        raise InputError(msg) from None
    if len(data) > MAX_BYTES:
        msg = f"{source}: more than {MAX_BYTES // 2**20} MiB: function render reads at most that from one input"
        raise InputError(msg)
    if (nul := data.find(b"\0")) >= 0:
        msg = f"{source}: binary data (a NUL byte at {_at(data, nul)}): function render reads YAML text"
        raise InputError(msg)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        msg = f"{source}: not UTF-8 text: byte 0x{data[err.start]:02x} at {_at(data, err.start)}"
        raise InputError(msg) from None
    for number, line in enumerate(data.split(b"\n"), 1):
        if len(line) > MAX_LINE_BYTES:
            msg = (
                f"{source}: line {number} is {len(line) / 2**20:.1f} MiB long, longer than any Kubernetes object "
                f"(the API server takes at most {MAX_LINE_BYTES // 2**20} MiB)"
            )
            raise InputError(msg)
    return text


def _at(data: bytes, offset: int) -> str:
    """A byte offset as line and column (of bytes), both from 1."""
    line = data.count(b"\n", 0, offset) + 1
    column = offset - data.rfind(b"\n", 0, offset)
    return f"line {line}, column {column}"


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, bounded in depth, reading timestamps as strings and integers as int64."""

    # As Kubernetes (sigs.k8s.io/yaml) reads YAML: a timestamp is a string.
    yaml_implicit_resolvers = {  # noqa: RUF012 - PyYAML's own class attribute, replaced as its subclasses do
        first: [(tag, pattern) for tag, pattern in resolvers if tag != TIMESTAMP]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """A node, refused past MAX_DEPTH levels (PyYAML composes recursively)."""
        if self.depth >= MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_yaml_int(self, node: ScalarNode) -> int:
        """An integer, refused where Python cannot read it (thousands of digits)."""
        try:
            return super().construct_yaml_int(node)
        except ValueError:
            raise ConstructorError(
                None, None, "an integer too long for any Kubernetes field", node.start_mark
            ) from None

    def construct_string(self, node: ScalarNode) -> str:
        """An explicitly tagged timestamp (!!timestamp) as its text, as Kubernetes reads it."""
        return str(self.construct_scalar(node))


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_constructor(TIMESTAMP, _Loader.construct_string)


def load(source: str, text: str) -> list[Any]:
    """The documents of text, each checked; InputError naming source and the document."""
    docs: list[Any] = []
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as err:  # a character YAML does not allow, found before parsing
        err.name = source
        msg = f"{source}: not YAML: {err}"
        raise InputError(msg) from None
    # What PyYAML's marks call the input ("<unicode string>" for text).
    loader.name = source
    try:
        while loader.check_node():
            node = loader.get_node()
            where = f"{source}: document {len(docs) + 1}"
            if node is not None:
                _expanded(node, where)
            doc = loader.construct_document(node)
            _json(doc, where, "")
            docs.append(doc)
    except yaml.YAMLError as err:
        msg = f"{source}: not YAML: {err}"
        raise InputError(msg) from None
    finally:
        loader.dispose()
    return docs


def _expanded(root: Node, where: str) -> None:
    """Refuse a document whose aliases make a cycle, or expand it past MAX_DEPTH or MAX_NODES."""
    sizes: dict[int, tuple[int, int]] = {}  # a node's expanded (nodes, height), by identity
    open_: set[int] = set()

    def visit(node: Node, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            msg = f"{where}: its aliases nest it deeper than {MAX_DEPTH} levels ({_mark(node)})"
            raise InputError(msg)
        key = id(node)
        if key in open_:
            msg = f"{where}: an alias refers to a node that holds it, a cycle ({_mark(node)})"
            raise InputError(msg)
        if key not in sizes:
            open_.add(key)
            children = _children(node)
            counted = [visit(child, depth + 1) for child in children]
            open_.discard(key)
            sizes[key] = (1 + sum(n for n, _ in counted), 1 + max((h for _, h in counted), default=0))
        nodes, height = sizes[key]
        if depth + height > MAX_DEPTH:
            msg = f"{where}: its aliases nest it deeper than {MAX_DEPTH} levels ({_mark(node)})"
            raise InputError(msg)
        return nodes, height

    nodes, _ = visit(root, 0)
    if nodes > MAX_NODES:
        msg = f"{where}: its aliases expand it to {nodes:,} nodes, more than {MAX_NODES:,} (a YAML bomb?)"
        raise InputError(msg)


def _mark(node: Node) -> str:
    return f"line {node.start_mark.line + 1}, column {node.start_mark.column + 1}"


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, SequenceNode):
        return list(node.value)
    return []


def _json(value: Any, where: str, path: str) -> None:
    """Refuse what a Kubernetes object (JSON) cannot hold, naming its path in the document."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                msg = f"{where}: {path or 'the document'} has the key {key!r}, not a string: quote it"
                raise InputError(msg)
            _json(item, where, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _json(item, where, f"{path}[{i}]")
    elif (why := _scalar(value)) is not None:
        msg = f"{where}: {path or 'the document'}: {why}"
        raise InputError(msg)


def _scalar(value: Any) -> str | None:
    """Why a Kubernetes object (JSON) cannot hold value, or None if it can."""
    if value is None or isinstance(value, bool | str):
        return None
    if isinstance(value, int):
        bits = value.bit_length()
        return None if value in INT64 else f"an integer of {bits} bits, more than a Kubernetes integer holds (int64)"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value} is no JSON number"
    what = YAML_ONLY.get(type(value), f"a {type(value).__name__}")
    return f"{what}, which a Kubernetes object (JSON) cannot hold"
