"""The project's import graph, read from the source (every import, lazy ones in functions included; only
`if TYPE_CHECKING:` blocks are left out, as they never run): the measures the house is held to."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("autheval", "warehouse", "assets", "models", "dagster_project")

# Floors, lowest first: a module may import its own floor and the floors below it, never one above. The
# command line (`autheval.cli`) is the top floor: it alone starts Dagster runs and loads models.
FLOORS = (
    ("warehouse", ("warehouse",)),
    ("core", ("autheval",)),
    ("models", ("models",)),
    ("assets", ("assets",)),
    ("dagster_project", ("dagster_project",)),
    ("cli", ("autheval.cli", "autheval.__main__")),
)
# `python -m autheval` runs autheval/__main__.py, which only calls the command line: it is the command line's
# entry, counted in its folder.
ENTRY_FOLDERS = {"autheval.__main__": "autheval.cli"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    return {module_name(p, root): p for package in packages for p in sorted((root / package).rglob("*.py"))}


def _type_checking_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def runtime_imports(tree: ast.AST):
    """Every import statement that runs: all but those inside `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_block(node):
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _imported_names(tree: ast.AST, module: str, is_package: bool):
    """(name, also-a-submodule candidate) for every import statement that runs."""
    for node in runtime_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                yield target, f"{target}.{alias.name}"


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (a `from package import module` counts as the module)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for target, submodule in _imported_names(
            ast.parse(path.read_text(encoding="utf-8")), name, path.name == "__init__.py"
        ):
            if submodule in modules:
                edges.add(submodule)
            elif target in modules:
                edges.add(target)
        edges.discard(name)
        graph[name] = edges
    return graph


def external_imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the top-level names of everything it imports (project packages included)."""
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found[name] = {
            target.split(".")[0] for target, _ in _imported_names(tree, name, path.name == "__init__.py") if target
        }
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def folder_of(module: str, modules: dict[str, Path]) -> str:
    """The folder (package) a module's file lies in: a package's `__init__` belongs to the package."""
    if module in ENTRY_FOLDERS:
        return ENTRY_FOLDERS[module]
    path = modules[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0] or module


def folder_graph(graph: dict[str, set[str]], modules: dict[str, Path]) -> dict[str, set[str]]:
    """folder -> the folders its modules import, where a folder is never counted as importing its own
    parent package's `__init__` (importing a module runs every `__init__` above it)."""
    folders: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        source = folder_of(module, modules)
        folders.setdefault(source, set())  # a folder that imports no other is still in the graph
        for target in targets:
            other = folder_of(target, modules)
            if other != source and not source.startswith(other + "."):
                folders[source].add(other)
    return dict(folders)


def floor_of(module: str) -> int:
    """The highest floor whose prefixes name the module (the command line sits inside `autheval`)."""
    best = -1
    for level, (_, prefixes) in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            best = level
    return best


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import of a module on a higher floor than the importer's."""
    return sorted(
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if floor_of(target) > floor_of(source)
    )


def code_lines(path: Path) -> int:
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def folder_shares(root: Path = ROOT, packages=PACKAGES + ("sql",)) -> dict[str, float]:
    """Each folder's share of the code: the non-blank lines of its own .py and .sql files (not its
    subfolders'), over all the project's code."""
    lines: dict[str, int] = defaultdict(int)
    for package in packages:
        for path in (root / package).rglob("*"):
            if path.suffix in (".py", ".sql") and path.is_file():
                lines[str(path.parent.relative_to(root))] += code_lines(path)
    total = sum(lines.values())
    return {folder: n / total for folder, n in sorted(lines.items())}
