"""Hostile input found by attack (round 2) on model folders, `query` output and names pasted into SQL:
a link in a model folder (read /etc/shadow's first bytes), impossible config sizes, a FIFO tokenizer and
repeated keys; temporal values past Python's range, nested values as Python reprs, CR and newlines in
query output; a mechanism named "a\\nb" that broke a SQL template. Each is one line, or written as documented."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from autheval.errors import RecordError
from tests.conftest import run_cli

# ------------------------------------------------------------------ items 1, 2: model folders


def _scorer_folder(root: Path, config: dict | None = None, vocab: int = 16, hidden: int = 8) -> Path:
    """A folder that passes the scorer's folder check (no torch: a config, a tokenizer, a processor and a
    safetensors file whose embedding matches the config)."""
    from safetensors.numpy import save_file

    folder = root / "model"
    folder.mkdir()
    config = config or {
        "model_type": "gemma3",
        "text_config": {"vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": 1},
        "vision_config": {"hidden_size": hidden, "image_size": 32, "patch_size": 8},
    }
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text('{"model": {}}')
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "processor_config.json").write_text("{}")
    save_file({"embed": np.zeros((vocab, hidden), np.float32)}, str(folder / "model.safetensors"))
    return folder


def _refused(folder: Path, *words: str) -> str:
    from models.model_dir import check_model_dir

    with pytest.raises(RecordError) as caught:
        check_model_dir(folder, "--scorer-dir", "scorer")
    text = str(caught.value)
    assert text.startswith(f"--scorer-dir: {folder}: ") and "\n" not in text, text
    for word in words:
        assert word in text, text
    return text


def test_the_plain_folder_passes(tmp_path):
    from models.model_dir import check_model_dir

    check_model_dir(_scorer_folder(tmp_path), "--scorer-dir", "scorer")


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json", "processor_config.json"])
def test_a_link_in_a_model_folder_is_refused_and_nothing_outside_is_read(tmp_path, name):
    folder = _scorer_folder(tmp_path)
    secret = tmp_path / "secret"
    secret.write_bytes(b"root:$6$SECRETHASH:19000:0:99999:7:::\n")
    target = folder / name
    target.rename(tmp_path / "moved")  # the real file moves out; the link points at the secret
    os.symlink(secret, target)
    text = _refused(folder, f"{name} is a link")
    assert "SECRET" not in text and str(int.from_bytes(secret.read_bytes()[:8], "little")) not in text


def test_a_linked_shard_or_folder_inside_is_refused(tmp_path):
    folder = _scorer_folder(tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"embed": "sub/model-00001-of-00001.safetensors"}})
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / "model-00001-of-00001.safetensors").rename(outside / "model-00001-of-00001.safetensors")
    os.symlink(outside, folder / "sub")
    _refused(folder, "sub is a link")


def test_the_demo_refuses_a_linked_weights_file_in_one_line(tmp_path):
    folder = _scorer_folder(tmp_path)
    (folder / "model.safetensors").unlink()
    secret = tmp_path / "shadow"
    secret.write_text("SECRETSECRET\n")
    os.symlink(secret, folder / "model.safetensors")
    proc = run_cli(
        "demo", "--source", "synthetic", "--n", "40", "--scorer-dir", str(folder), "--lake", str(tmp_path / "L")
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
    assert "--scorer-dir" in lines[0] and "model.safetensors is a link" in lines[0], lines[0]
    assert "SECRET" not in lines[0] and str(int.from_bytes(b"SECRETSE", "little")) not in lines[0]
    assert not (tmp_path / "L").exists()


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("text_config", "vocab_size", 10**12),
        ("vision_config", "hidden_size", 2**40),
        ("text_config", "num_hidden_layers", -1),
        ("text_config", "intermediate_size", "64"),
        ("vision_config", "some_dim", 2**40),
    ],
)
def test_a_config_size_no_model_has_is_refused(tmp_path, section, key, value):
    folder = _scorer_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    config[section][key] = value
    (folder / "config.json").write_text(json.dumps(config))
    _refused(folder, f"config.json's {section}.{key} is {value!r}")


def test_a_config_whose_embedding_is_larger_than_the_weights_is_refused(tmp_path):
    folder = _scorer_folder(tmp_path, vocab=16, hidden=8)
    config = json.loads((folder / "config.json").read_text())
    config["text_config"]["vocab_size"] = 100_000  # within the bound, but 800,000 numbers; the file has 128
    (folder / "config.json").write_text(json.dumps(config))
    _refused(folder, "vocab_size x text_config.hidden_size", "128 numbers")


@pytest.mark.parametrize("name", ["config.json", "tokenizer_config.json", "processor_config.json"])
def test_a_json_file_of_the_folder_with_a_key_given_twice_is_refused(tmp_path, name):
    folder = _scorer_folder(tmp_path)
    text = (folder / name).read_text()
    (folder / name).write_text('{"model_type": "x", ' + text[1:] if text != "{}" else '{"a": 1, "a": 2}')
    _refused(folder, name, "given twice")


@pytest.mark.parametrize("name", ["tokenizer.json", "config.json", "model.safetensors"])
def test_a_fifo_in_a_model_folder_is_refused_without_opening_it(tmp_path, name):
    folder = _scorer_folder(tmp_path)
    (folder / name).unlink()
    os.mkfifo(folder / name)
    _refused(folder, f"{name} is not a regular file")


def test_the_training_loaders_check_the_folder_first():
    """finetune and GRPO load the base model themselves: they call the same check before from_pretrained."""
    root = Path(__file__).resolve().parents[1]
    for module in ("models/finetune.py", "models/grpo.py"):
        text = (root / module).read_text()
        assert text.count("check_model_dir(") >= 1, module
        first_load = text.index("AutoModelForImageTextToText.from_pretrained(")
        assert text.index("check_model_dir(") < first_load, module


# ------------------------------------------------------------------ item 3: query output


HOSTILE_SQL = """
select '9999-12-31'::date + 1 as d_next, 'infinity'::date as d_inf, '-infinity'::timestamp as t_ninf,
  '294247-01-01'::timestamp as t_far, '24:00:00'::time as midnight, 'infinity'::timestamptz as tz_inf,
  '2020-01-01 10:00:00+05'::timestamptz as tz, interval '1 month 2 days 3.5 seconds' as iv,
  [1.5::decimal(4,1)] as dl, {'a': 1, 'b': 'x'} as st, map {'k': 2} as mp, '\\x00ab'::blob as bl,
  ['infinity'::date] as ld, 'a' || chr(13) || 'b' as cr, 'x' || chr(10) || 'y' as nl,
  'nan'::double as f_nan, 'inf'::double as f_inf, '-0044-03-15'::date as bc
"""


def _write(fmt: str) -> str:
    from autheval.reporting.tables import write_batches

    out = io.StringIO()
    write_batches(duckdb.connect().execute(HOSTILE_SQL).to_arrow_reader(), fmt, out)
    return out.getvalue()


EXPECTED = {
    "d_next": "+10000-01-01",
    "d_inf": "infinity",
    "t_ninf": "-infinity",
    "t_far": "+294247-01-01 00:00:00",
    "midnight": "24:00:00",
    "tz_inf": "infinity",
    "tz": "2020-01-01 05:00:00+00:00",
    "iv": "P1M2DT3.5S",
    "bl": "\\x00ab",
    "bc": "-0044-03-15",
}


def test_query_csv_writes_every_value_with_one_rendering_and_rows_stay_rows():
    rows = list(csv.DictReader(io.StringIO(_write("csv"))))
    assert len(rows) == 1
    row = rows[0]
    for key, value in EXPECTED.items():
        assert row[key] == value, (key, row[key])
    assert row["dl"] == "[1.5]" and json.loads(row["st"]) == {"a": 1, "b": "x"} and json.loads(row["mp"]) == {"k": 2}
    assert json.loads(row["ld"]) == ["infinity"]
    assert row["cr"] == "a\rb" and row["nl"] == "x\ny"
    assert row["f_nan"] == "" and row["f_inf"] == "inf"
    assert "Decimal(" not in _write("csv") and "MonthDayNano" not in _write("csv") and "b'" not in _write("csv")


def test_query_json_is_valid_and_matches_the_csv_renderings():
    (row,) = json.loads(_write("json"))
    for key, value in EXPECTED.items():
        assert row[key] == value, (key, row[key])
    assert row["dl"] == [1.5] and row["st"] == {"a": 1, "b": "x"} and row["mp"] == {"k": 2}
    assert row["cr"] == "a\rb" and row["f_nan"] is None and row["f_inf"] is None


def test_query_table_is_one_line_per_row_with_control_characters_escaped():
    lines = _write("table").splitlines()
    assert len(lines) == 3, lines
    assert "a\\rb" in lines[2] and "x\\ny" in lines[2] and "24:00:00" in lines[2] and "NaN" in lines[2]


def test_query_on_a_lake_writes_far_dates_without_a_traceback(tmp_path):
    from warehouse.catalog import publish_catalog
    from warehouse.lake import Lake

    lake = Lake(tmp_path / "lake")
    lake.write("estimates", pa.table({"metric": ["J"], "estimate": [0.5]}))
    publish_catalog(lake)
    for fmt in ("csv",):  # the three formats share one rendering (the tests above); one run of the command
        proc = run_cli(
            "query",
            "select '9999-12-31'::date + 1 as d, 'infinity'::date as i, '-infinity'::timestamp as t from estimates",
            "--lake",
            str(lake.root),
            "--format",
            fmt,
        )
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert "+10000-01-01" in proc.stdout and "-infinity" in proc.stdout, proc.stdout


def test_query_help_documents_nan_and_infinity_per_format():
    proc = run_cli("query", "--help")
    text = " ".join(proc.stdout.split())
    assert "NaN, inf, -inf as such" in text and "null and NaN as an empty cell" in text
    assert "NaN and infinities are written as null" in text


# ------------------------------------------------------------------ item 4: names pasted into SQL


def test_a_literal_with_a_newline_is_not_filled_into_a_comment(tmp_path):
    """sql/records/records_dataset_lake.sql names {analysis} in a comment: a newline in the name ended the
    comment and its rest was SQL (ParserException). Placeholders are filled in SQL only."""
    from warehouse.sql import fill

    con = duckdb.connect()
    con.execute("create table t as select 'a\nb / capacity_ceiling' as analysis, 'c' as case_id")
    path = str(tmp_path / "records.parquet")
    con.execute("copy t to $path", {"path": path})
    sql = fill(
        "records/records_dataset_lake",
        identifiers={"view": "v"},
        literals={"analysis": "a\nb / capacity_ceiling"},
        fragments={"files": f"['{path}']"},
    )
    con.execute(sql)
    assert con.execute("select count(*) from v").fetchone() == (1,)
    assert "{analysis}" in sql  # the comment keeps its placeholder's name


def test_a_literal_with_a_nul_is_refused_before_duckdb_reads_it():
    from warehouse.sql import quote_literal

    with pytest.raises(ValueError, match="NUL"):
        quote_literal("a\x00b")


@pytest.mark.parametrize(
    "column, value", [("mechanism", "a\nb"), ("mechanism", "a\x00b"), ("mechanism", "a\x1bb"), ("image_id", "i\tx")]
)
def test_a_control_character_in_a_mechanism_or_image_id_is_refused_naming_file_column_row(column, value):
    from autheval.proposals.proposals_file import proposals_from_table

    data = {"mechanism": ["m", "m"], "image_id": ["i1", "i2"], "a_head": ["a1", "a2"]}
    data[column][1] = value
    with pytest.raises(RecordError) as caught:
        proposals_from_table(pa.table(data), "proposals.csv")
    text = str(caught.value)
    assert text.startswith(f"proposals.csv: column '{column}': must not hold a control character"), text
    assert "row 2" in text and "\n" not in text, text


def test_a_hugging_face_cache_snapshot_of_links_to_its_blobs_is_read_and_no_other_link(tmp_path):
    """models--org--name/snapshots/<rev>/ holds links to ../../blobs/<sha>: the layout the Hub's cache
    writes, read as given; a link out of the blobs folder is still refused."""
    import shutil

    from models.model_dir import _only_regular_files

    repo = tmp_path / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for name, text in {"config.json": "{}", "tokenizer.json": "{}"}.items():
        (repo / "blobs" / f"sha-{name}").write_text(text)
        (snapshot / name).symlink_to(Path("..", "..", "blobs", f"sha-{name}"))

    def refuse(rule):
        return AssertionError(rule)

    _only_regular_files(snapshot, refuse)  # the cache's own links pass
    outside = tmp_path / "secret"
    outside.write_text("x")
    (snapshot / "model.safetensors").symlink_to(outside)
    with pytest.raises(AssertionError, match="model.safetensors is a link"):
        _only_regular_files(snapshot, refuse)
    shutil.rmtree(repo / "blobs")
    (repo / "blobs").mkdir()
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(AssertionError, match="is a link"):  # a dangling cache link is refused
        _only_regular_files(snapshot, refuse)
