"""The map of lake tables (dagster_project/table_index.py) is held to the definitions and the code: it names
every asset key and nothing else; each SQL producer exists and is named, as a string literal, by the
asset's own module or a project module it imports (in autheval/, models/, warehouse/, assets/); each
Python producer imports, from such a module; the generated documents equal what is rendered. The check
itself is shown to fail on a doctored map."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from dagster_project import table_index
from dagster_project.table_index import (
    COMMAND,
    FOLDER_NOTES,
    REFERENCE,
    SOURCES,
    TABLE_NOTES,
    TABLE_PRODUCERS,
    names_in,
    producer_kind,
    sql_folders,
)
from tests.import_graph import ROOT, import_graph, source_modules
from warehouse.sql import load_sql

SEARCHED = ("autheval", "models", "warehouse", "assets")  # where a producer may be named


@pytest.fixture(scope="module")
def assets() -> dict[str, tuple[str, str, str]]:
    return table_index.asset_index()


@pytest.fixture(scope="module")
def code() -> tuple[dict[str, Path], dict[str, set[str]]]:
    modules = source_modules()
    return modules, import_graph(modules)


def reachable(module: str, graph: dict[str, set[str]]) -> set[str]:
    """`module` and every project module of SEARCHED it imports, directly or through others."""
    seen, stack = {module}, [module]
    while stack:
        for other in graph.get(stack.pop(), ()):
            if other not in seen and other.split(".")[0] in SEARCHED:
                seen.add(other)
                stack.append(other)
    return seen


_LITERALS: dict[Path, set[str]] = {}


def literals(path: Path) -> set[str]:
    """Every string constant of a module's source."""
    if path not in _LITERALS:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        _LITERALS[path] = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return _LITERALS[path]


def resolve(dotted: str) -> tuple[object, str]:
    """(the object, the module it was found in) of a dotted Python path; ImportError or AttributeError."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[i:]:
            found = getattr(found, attribute)
        return found, ".".join(parts[:i])
    raise ImportError(f"no module in {dotted!r}")


def _sql_problem(name: str) -> str | None:
    try:
        load_sql(name)
    except (ValueError, FileNotFoundError) as err:
        return str(err)
    return None


def _name_problem(name: str) -> str | None:
    """What is wrong with a SQL file name or Python path a text names, or None."""
    if producer_kind(name) == "sql":
        return _sql_problem(name)
    try:
        resolve(name)
    except (ImportError, AttributeError) as err:
        return f"{name} does not import: {err}"
    return None


def problems(mapping, assets, modules, graph, notes=TABLE_NOTES) -> list[str]:
    """Everything wrong with `mapping` against the definitions (`assets`: table -> (group, module,
    function)) and the code (`modules`, `graph`: tests.import_graph); [] when it holds."""
    found = [f"{t}: an asset key of the definitions, missing from the map" for t in sorted(set(assets) - set(mapping))]
    found += [f"{t}: in the map, but no asset key of the definitions" for t in sorted(set(mapping) - set(assets))]
    for table, producers in mapping.items():
        if not producers:
            found.append(f"{table}: no producer")
        module = assets.get(table, (None, None, None))[1]
        scope = reachable(module, graph) if module in modules else set()
        for source, producer in producers.items():
            where = f"{table} ({source}): {producer}"
            if source not in SOURCES:
                found.append(f"{where}: unknown source {source!r}")
            try:
                kind = producer_kind(producer)
            except ValueError as err:
                found.append(f"{where}: {err}")
                continue
            if kind == "sql":
                trouble = _sql_problem(producer)
                if trouble:
                    found.append(f"{where}: {trouble}")
                elif not any(producer in literals(modules[m]) for m in scope):
                    found.append(f"{where}: named by neither {module} nor a project module it imports")
            elif kind == "python":
                try:
                    target, owner = resolve(producer)
                except (ImportError, AttributeError) as err:
                    found.append(f"{where}: does not import: {err}")
                    continue
                if not callable(target):
                    found.append(f"{where}: not a function")
                if owner not in scope:
                    found.append(f"{where}: {owner} is neither {module} nor a project module it imports")
            else:
                found += [f"{where}: {t}" for name in names_in(producer) if (t := _name_problem(name))]
    for table, note in notes.items():
        if table not in mapping:
            found.append(f"note on {table}: not a table of the map")
        found += [f"note on {table}: {t}" for name in names_in(note) if (t := _name_problem(name))]
    return found


# ---------------------------------------------------------------------------------- the map holds


def test_the_map_names_every_asset_key_of_the_definitions_and_nothing_else(assets):
    assert set(TABLE_PRODUCERS) == set(assets)


def test_every_producer_exists_where_the_asset_can_reach_it(assets, code):
    assert problems(TABLE_PRODUCERS, assets, *code) == []


def test_every_source_is_used_and_every_sql_folder_described():
    used = {source for producers in TABLE_PRODUCERS.values() for source in producers}
    assert used == set(SOURCES)
    assert set(FOLDER_NOTES) == set(sql_folders())
    assert [t for note in FOLDER_NOTES.values() for name in names_in(note) if (t := _name_problem(name))] == []


def test_known_producers_stay_as_read_from_the_code():
    assert TABLE_PRODUCERS["selections"] == {
        REFERENCE: "review/selections_reference",
        "raw cohort": "review/selections_cohort",
    }
    assert TABLE_PRODUCERS["images"] == {REFERENCE: "ingest/images_reference", "raw cohort": "ingest/images_raw"}
    assert "scoring/scores_hierarchical" in TABLE_NOTES["scores"]
    assert TABLE_PRODUCERS["estimates"] == {"every source": "autheval.estimation.estimators.estimate"}
    assert all(
        producer_kind(p) == "none" for t in ("declared_rules", "report", "catalog") for p in TABLE_PRODUCERS[t].values()
    )


def test_the_generated_documents_are_current(assets):
    documents = table_index.documents(assets)
    assert set(documents) == {table_index.TABLES_DOC} | {f"sql/{stage}/README.md" for stage in sql_folders()}
    for path, text in documents.items():
        on_disk = ROOT / path
        assert on_disk.is_file() and on_disk.read_text(encoding="utf-8") == text, f"{path} is stale: run `{COMMAND}`"


def test_the_tables_doc_shows_stage_asset_and_producers(assets):
    text = table_index.render_markdown(assets=assets)
    assert (
        "| `selections` | review | `assets/selections.py: selections` | reference study: `review/selections_reference`"
        "<br>raw cohort: `review/selections_cohort` |" in text
    )
    assert "| `duplicates` | duplicates | `assets/duplicates.py: find_duplicates` |" in text
    assert "* `selections` (raw cohort) -> `review/selections_cohort`" in text
    readme = table_index.render_folder_readme("review")
    assert "| `records` | reference study | `review/records` |" in readme and "Also here: " in readme


# ---------------------------------------------------------------------------------- the check can fail


def _doctored(**changes) -> dict[str, dict[str, str]]:
    mapping = {table: dict(producers) for table, producers in TABLE_PRODUCERS.items()}
    for table, producers in changes.items():
        if producers is None:
            del mapping[table]
        else:
            mapping[table] = producers
    return mapping


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"selections": {REFERENCE: "review/selections_referenc"}}, "no SQL file review/selections_referenc.sql"),
        ({"selections": {REFERENCE: "review/Selections"}}, "is neither stage/name"),
        ({"scores": None}, "scores: an asset key of the definitions, missing from the map"),
        ({"selections": {REFERENCE: "recurring/monitor_case_mix"}}, "named by neither assets.selections"),
        ({"estimates": {"every source": "autheval.estimation.estimators.estimat"}}, "does not import"),
        ({"estimates": {"every source": "autheval.monitoring.monitor.monitor_table"}}, "is neither assets.estimates"),
        ({"records": {"a cohort": "review/records"}}, "unknown source 'a cohort'"),
        ({"no_such_table": {REFERENCE: "review/records"}}, "no_such_table: in the map, but no asset key"),
    ],
)
def test_the_check_fails_on_a_doctored_map(assets, code, changes, expected):
    found = problems(_doctored(**changes), assets, *code)
    assert any(expected in line for line in found), found


def test_a_note_naming_a_missing_sql_file_or_function_fails(assets, code):
    notes = {"scores": "adds `scoring/scores_nowhere`", "records": "by `autheval.review.local_review.nowhere`"}
    found = problems(TABLE_PRODUCERS, assets, *code, notes=notes)
    assert len(found) == 2, found
    assert found[0].startswith("note on scores: no SQL file scoring/scores_nowhere.sql")
    assert found[1].startswith("note on records: autheval.review.local_review.nowhere does not import")


def test_writing_replaces_a_link_in_place_of_a_document_and_never_writes_through_it(tmp_path):
    outside = tmp_path / "outside.md"
    outside.write_text("keep me\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tables.md").symlink_to(outside)
    written = table_index.write(tmp_path)
    assert "docs/tables.md" in written and outside.read_text() == "keep me\n"
    tables = tmp_path / "docs" / "tables.md"
    assert not tables.is_symlink() and tables.read_text() == table_index.render_markdown()
    assert table_index.stale(tmp_path) == []
