"""Reading JSON and YAML that someone else wrote: the one loader of each for every parser of the project
(the rule and protocol files, MAVIC configs, schemas, completions and labels, ontologies, receipts, the
lake's record of notified alerts). What the standard loaders let through, or crash on, is refused in one
RecordError line naming the file (and the column, row or key where there is one):

* nesting deeper than MAX_DEPTH levels: both loaders recurse, so a few thousand `[` would be a
  RecursionError traceback (or a value that breaks whatever walks it next);
* a key given twice in one object or mapping: both loaders keep the last one silently;
* YAML aliases: more than MAX_ALIASES of them, a recursive one, or aliases that expand to more than
  MAX_NODES values (an alias bomb: a few lines that expand to gigabytes), refused before any value is built;
* JSON's NaN and Infinity (not JSON; Python's loader takes them) unless the caller allows them, and
  integers beyond Python's conversion limit.

Plain Python and PyYAML only (no numpy, pyarrow or DuckDB), so the rule loader stays light.
"""

from __future__ import annotations

import itertools
import json
import re

import yaml

from autheval.errors import RecordError

MAX_DEPTH = 64  # levels of nested arrays/objects (sequences/mappings): no input of the project needs 10
MAX_ALIASES = 100  # a declared file needs a few aliases at most; an alias bomb needs many
MAX_NODES = 100_000  # YAML values after alias expansion (the default rule file has about 150)

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)  # a JSON string (escapes included)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def key_path(loc: tuple) -> str:
    """A key's path as a file's author writes it: `profiles.BCN_like.w_over`, `rules[1].lower`."""
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item == "[key]":
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (brackets inside strings not counted),
    without recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(_STEP[c] for c in brackets), default=0)


class _Repeated(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _Repeated(key)
        out[key] = value
    return out


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def load_json(
    text: str | bytes,
    source: str,
    column: str | None = None,
    example: str | None = None,
    *,
    what: str = "JSON",
    allow_nan: bool = False,
):
    """One JSON document, or one RecordError line (`source`, `column`, the rule, `example`: e.g. the row)
    when it is not valid JSON, nests deeper than MAX_DEPTH, repeats a key in one object, or (unless
    `allow_nan`) holds NaN or Infinity. `what` names the document in the rule (`a receipt`)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(source, column, f"{what} is not UTF-8 text", example) from None
    if json_depth(text) > MAX_DEPTH:
        raise RecordError(source, column, f"{what} nests deeper than {MAX_DEPTH} levels", example)
    hooks: dict = {"object_pairs_hook": _pairs}
    if not allow_nan:
        hooks["parse_constant"] = _no_constant
    try:
        return json.loads(text, **hooks)
    except _Repeated as err:
        raise RecordError(source, column, f"{what}: key {err.key!r} is given twice in one object", example) from None
    except RecursionError:  # not reached after the depth check; kept as a one-line refusal all the same
        raise RecordError(source, column, f"{what} nests too deeply", example) from None
    except ValueError as err:  # JSONDecodeError; an integer past Python's conversion limit; NaN
        said = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise RecordError(source, column, f"not valid {what}: {said}", example) from None


class SafeYamlLoader(yaml.SafeLoader):
    """PyYAML's safe loader, plus what a declared file must not rely on: collections nested deeper than
    MAX_DEPTH are refused while the document is composed; `checked_data()` then walks the composed nodes
    once (each anchored node once, however often it is aliased) and refuses a key given twice in one
    mapping, more than MAX_ALIASES aliases, a recursive alias, or more than MAX_NODES values after
    alias expansion, all before any Python value is built. Each refusal is a RecordError naming the key."""

    def __init__(self, stream, source: str = "<yaml>", what: str = "this file"):
        super().__init__(stream)
        self.source, self.what, self._depth = source, what, 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise RecordError(self.source, None, f"not valid YAML: nested too deeply for {self.what}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def checked_data(self):
        node = self.get_single_node()
        if node is None:
            return None
        self._check_nodes(node)
        return self.construct_document(node)

    @staticmethod
    def _children(node, path):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                yield key, path
                yield value, path + ((key.value if isinstance(key, yaml.ScalarNode) else "?"),)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                yield item, path + (i,)

    def _duplicates(self, node, path) -> None:
        """A key given twice in one mapping (compared as YAML scalars: tag and text)."""
        if not isinstance(node, yaml.MappingNode):
            return
        first_line: dict = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue  # a complex key: the schema refuses it by name
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first_line:
                first = first_line[(key.tag, key.value)]
                where = f"lines {first} and {line}" if first != line else f"on line {line}"
                raise RecordError(
                    self.source,
                    key_path(path + (key.value,)),
                    f"key given twice ({where}): give each key once (YAML would keep the last silently)",
                )
            first_line[(key.tag, key.value)] = line

    def _check_nodes(self, root) -> None:
        """One iterative depth-first walk: a node met again is an alias (counted; on the walk's own
        path, a recursive one); each node's expanded size is 1 + its children's."""
        size: dict[int, int] = {}
        entered: set[int] = set()
        aliases = 0
        self._duplicates(root, ())
        entered.add(id(root))
        stack = [(root, (), iter(self._children(root, ())))]
        while stack:
            node, path, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                size[id(node)] = 1 + sum(size[id(c)] for c, _ in self._children(node, path))
                if size[id(node)] > MAX_NODES:
                    raise RecordError(
                        self.source,
                        key_path(path) or None,
                        f"YAML aliases expand to more than {MAX_NODES} values (an alias bomb?); {self.what} "
                        "needs far fewer",
                    )
                continue
            child, child_path = child
            if id(child) in entered:
                if id(child) not in size:
                    raise RecordError(
                        self.source,
                        key_path(child_path) or None,
                        "a YAML alias refers to a value that contains it (recursive alias)",
                    )
                aliases += 1
                if aliases > MAX_ALIASES:
                    raise RecordError(
                        self.source,
                        key_path(child_path) or None,
                        f"more than {MAX_ALIASES} YAML aliases: {self.what} needs few (an alias bomb?)",
                    )
                continue
            self._duplicates(child, child_path)
            entered.add(id(child))
            stack.append((child, child_path, iter(self._children(child, child_path))))


def load_yaml(text: str, source: str, what: str = "this file"):
    """One YAML document as Python values through SafeYamlLoader, or one RecordError line: broken YAML
    (with its line), nesting deeper than MAX_DEPTH, a key given twice, an alias bomb, an integer past
    Python's conversion limit. `what` names the document in the rule (`a rule file`)."""
    loader = SafeYamlLoader(text, source, what)
    try:
        return loader.checked_data()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RecordError(source, None, f"not valid YAML{where}: {problem}") from None
    except RecursionError:  # not reached after the depth bound; kept as a one-line refusal all the same
        raise RecordError(source, None, f"not valid YAML: nested too deeply for {what}") from None
    except RecordError:
        raise
    except ValueError as err:  # e.g. an integer of more than 4300 digits (Python's conversion limit)
        raise RecordError(source, None, f"not valid YAML: {str(err).split(':')[0]}") from None
    finally:
        loader.dispose()
