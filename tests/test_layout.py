"""The house's measures, re-run on every test run: no import circle (module or folder), imports go down
the floors (only the command line reaches up), no folder holds more than 30% of the code, and Dagster
stays in the assets, the Dagster project and the command line."""

from __future__ import annotations

import textwrap

import pytest

from tests.import_graph import (
    FLOORS,
    cycles,
    external_imports,
    folder_graph,
    folder_shares,
    import_graph,
    source_modules,
    upward_arrows,
)

MAX_FOLDER_SHARE = 0.30
DAGSTER_FLOORS = ("assets", "dagster_project", "autheval.cli")


@pytest.fixture(scope="module")
def project():
    modules = source_modules()
    return modules, import_graph(modules)


def test_no_module_imports_itself_through_others(project):
    _, graph = project
    assert cycles(graph) == []


def test_no_folder_imports_itself_through_others(project):
    modules, graph = project
    assert cycles(folder_graph(graph, modules)) == []


def test_imports_go_down_the_floors(project):
    """warehouse < the core (autheval) < models < assets < dagster_project < the command line."""
    _, graph = project
    assert upward_arrows(graph) == []


def test_only_the_assets_the_project_and_the_command_line_import_dagster(project):
    modules, _ = project
    users = {m for m, names in external_imports(modules).items() if {"dagster", "dagster_webserver"} & names}
    assert users and all(m.startswith(DAGSTER_FLOORS) for m in users), sorted(
        m for m in users if not m.startswith(DAGSTER_FLOORS)
    )


def test_no_folder_holds_more_than_30_percent_of_the_code():
    shares = folder_shares()
    assert len(shares) > 10
    assert max(shares.values()) < MAX_FOLDER_SHARE, max(shares.items(), key=lambda kv: kv[1])


# ---------------------------------------------------------------------- the measures can fail


def _tree(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def test_the_graph_finds_a_lazy_circle_and_an_arrow_up(tmp_path):
    _tree(
        tmp_path,
        {
            "warehouse/__init__.py": "",
            "warehouse/store.py": "def f():\n    from autheval.core import g\n",  # lazy, and up a floor
            "autheval/__init__.py": "",
            "autheval/core.py": "from warehouse.store import f\n",
            "autheval/typed.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autheval.cli import x\n"
            ),
            "autheval/cli/__init__.py": "from autheval import core\n",
        },
    )
    modules = source_modules(tmp_path, ("warehouse", "autheval"))
    graph = import_graph(modules)
    assert graph["autheval.cli"] == {"autheval.core"}  # `from package import module` is the module
    assert graph["autheval.typed"] == set()  # TYPE_CHECKING imports never run
    assert cycles(graph) == [["autheval.core", "warehouse.store"]]
    assert upward_arrows(graph) == [("warehouse.store", "autheval.core")]
    assert cycles(folder_graph(graph, modules)) == [["autheval", "warehouse"]]


def test_the_floors_put_the_command_line_on_top():
    names = [name for name, _ in FLOORS]
    assert names[0] == "warehouse" and names[-1] == "cli"


def test_the_share_counts_each_folders_own_files(tmp_path):
    _tree(tmp_path, {"a/one.py": "x = 1\ny = 2\n\n", "a/b/two.py": "z = 3\n", "sql/q.sql": "select 1\n"})
    shares = folder_shares(tmp_path, ("a", "sql"))
    assert shares == {"a": 0.5, "a/b": 0.25, "sql": 0.25}
