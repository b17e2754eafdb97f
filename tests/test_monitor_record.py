"""The monitor as a record (issue 28, items 1.2, 1.4, 1.5): the append-only decision record
(monitor_decisions), a report and a receipt that `autheval verify` re-derives for every `monitor run`,
retention that counts runs rather than landed files, and corrections that replace a landed file (with
its trail kept) instead of counting its cases twice. Real lakes: `autheval synth deployment` logs dropped
into <lake>/landing/, then `monitor_run` in-process."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pytest

from autheval.monitoring.deployment_sim import DeploymentModel, write_deployment
from warehouse.lake import Lake
from warehouse.snapshots import committed_snapshots

MONTH = "site-1_2026-01.csv"


def logs(where: Path, seed: int = 20260101, **model) -> Path:
    """A simulated deployment's monthly logs in `where` (not a lake)."""
    write_deployment(DeploymentModel(**{"sites": 1, "months": 1, **model}), where, seed=seed)
    (where / "deployment.json").unlink()
    return where


def drop(root: Path, log: Path, name: str | None = None, table: pa.Table | None = None) -> None:
    """Drop a log (or `table`, as CSV) into the lake's landing folder."""
    (root / "landing").mkdir(parents=True, exist_ok=True)
    target = root / "landing" / (name or log.name)
    if table is None:
        target.write_bytes(log.read_bytes())
    else:
        pcsv.write_csv(table, target)


def renamed(table: pa.Table, prefix: str) -> pa.Table:
    """Other cases and lesions: every case_id and cluster_id with `prefix` before it."""
    for column in ("case_id", "cluster_id"):
        i = table.schema.get_field_index(column)
        table = table.set_column(i, column, pc.binary_join_element_wise(prefix, table.column(column), ""))
    return table


def run_monitor(root: Path) -> tuple[int, list[str]]:
    from dagster_project.monitor_run import monitor_run

    lines: list[str] = []
    return monitor_run(root, None, out=lines.append, settle_seconds=0.1), lines


def landed_key(root: Path, name: str) -> str:
    [copy] = (root / "landing" / "processed").glob(f"*__{name}")
    return copy.name.split("__", 1)[0]


def look_rows(table: pa.Table, metric: str = "intervention_rate") -> list[dict]:
    return [
        r for r in table.to_pylist() if (r["site"], r["model_version"], r["metric"]) == ("site-1", "model-1", metric)
    ]


# --- 1.2: a decision, once made, is recorded as made -------------------------------------------------


def test_a_look_decided_pass_keeps_its_decision_when_later_data_changes_its_status(tmp_path):
    root = tmp_path / "lake"
    drop(root, logs(tmp_path / "first", clusters_per_month=100, intervention_rate=0.3) / MONTH)
    code, lines = run_monitor(root)
    assert code == 0, lines
    first = Lake(root).read("monitor_decisions")
    [decided] = look_rows(first)
    assert (decided["period"], decided["look"], decided["status"]) == ("2026-01", 1, "pass")
    assert decided["decided_run"].startswith("monitor-") and decided["decided_snapshot"] >= 1
    assert len(decided["protocol_sha256"]) == 64 and len(decided["data_sha256"]) == 64
    [served] = look_rows(Lake(root).read("monitor"))
    assert (served["decided_status"], served["decision"]) == ("pass", "decided_now")

    # a late file for the same month (other cases, many more lesions, far more interventions)
    late = pcsv.read_csv(logs(tmp_path / "late", seed=7, clusters_per_month=300, intervention_rate=0.95) / MONTH)
    drop(root, Path("late.csv"), table=renamed(late, "late-"))
    code, lines = run_monitor(root)
    assert code == 3, lines  # the look now alerts
    store = Lake(root)
    record = store.read("monitor_decisions")
    assert record.slice(0, first.num_rows).equals(first)  # the earlier rows, as they were
    assert look_rows(record) == [decided]  # no second row for a look decided before
    [served] = look_rows(store.read("monitor"))
    assert served["status"] == "alert"
    assert (served["decided_status"], served["decided_run"]) == ("pass", decided["decided_run"])
    assert served["decision"] == "superseded_by_later_data"


# --- 1.5: corrections without double counting ---------------------------------------------------------


def test_the_same_cases_landing_again_without_a_declared_correction_are_refused_in_one_line(tmp_path):
    root = tmp_path / "lake"
    drop(root, logs(tmp_path / "first") / MONTH)
    assert run_monitor(root)[0] == 0
    # a re-export of the same month (same cases and lesions, other values): not declared as a correction
    again = pcsv.read_csv(logs(tmp_path / "again", seed=99) / MONTH)
    drop(root, Path("site-1_2026-01_v2.csv"), table=again)
    code, lines = run_monitor(root)
    assert code == 0, lines
    [rejected] = [line for line in lines if line.startswith("rejected")]
    assert "site-1_2026-01_v2.csv" in rejected and "case_id" in rejected and "supersedes" in rejected
    assert "already landed (site, period, case_id) in site-1_2026-01.csv" in rejected and "\n" not in rejected
    [moved] = list((root / "landing" / "rejected").glob("*__site-1_2026-01_v2.csv"))
    assert "case_id" in moved.with_name(moved.name + ".reason.txt").read_text()
    [row] = look_rows(Lake(root).read("monitor"))
    assert row["n_clusters"] == 40  # counted once


def test_a_declared_correction_replaces_the_earlier_file_and_keeps_it_marked(tmp_path):
    root = tmp_path / "lake"
    drop(root, logs(tmp_path / "first") / MONTH)
    assert run_monitor(root)[0] == 0
    earlier = landed_key(root, MONTH)
    corrected = pcsv.read_csv(logs(tmp_path / "fixed", seed=99) / MONTH)
    n = corrected.num_rows
    drop(root, Path("fixed.csv"), table=corrected.append_column("supersedes", pa.array([earlier] * n)))
    code, lines = run_monitor(root)
    assert code == 0 and any(line.startswith("landed    fixed.csv") for line in lines), lines
    store = Lake(root)
    [row] = look_rows(store.read("monitor"))
    assert row["n_clusters"] == 40  # replaced, not added: the month counts its 40 lesions once
    landed = store.read("landed_records")
    assert set(landed.column("landed_key").to_pylist()) == {earlier, landed_key(root, "fixed.csv")}  # the trail
    marks = {(r["landed_key"], r["supersedes"]) for r in landed.select(["landed_key", "supersedes"]).to_pylist()}
    assert (landed_key(root, "fixed.csv"), earlier) in marks
    assert list((root / "landing" / "processed").glob(f"{earlier}__{MONTH}"))  # the superseded copy stays

    # a second correction of the same earlier file, and one naming no landed file: each one line, rejected
    drop(root, Path("twice.csv"), table=renamed(corrected, "x").append_column("supersedes", pa.array([earlier] * n)))
    drop(root, Path("nowhere.csv"), table=renamed(corrected, "y").append_column("supersedes", pa.array(["0" * 20] * n)))
    code, lines = run_monitor(root)
    rejected = {line.split()[1]: line for line in lines if line.startswith("rejected")}
    assert "already superseded by" in rejected["twice.csv:"], lines
    assert "names no landed file" in rejected["nowhere.csv:"], lines


@pytest.mark.parametrize(
    "values, said",
    [(["abc", "abc"], "20 lowercase hex digits"), (["a" * 20, "b" * 20], "on every row"), ([None, None], "on every")],
    ids=["not-a-key", "two-keys", "empty"],
)
def test_a_malformed_supersedes_column_is_one_line(tmp_path, values, said):
    from autheval.errors import RecordError
    from autheval.monitoring.landing import read_landed

    table = pcsv.read_csv(logs(tmp_path / "logs") / MONTH).slice(0, 2)
    path = tmp_path / "bad.csv"
    pcsv.write_csv(table.append_column("supersedes", pa.array(values, pa.string())), path)
    with pytest.raises(RecordError, match=said) as err:
        read_landed(path)
    assert err.value.column == "supersedes" and "\n" not in str(err.value)


# --- 1.4: every monitor run is a run of the record ---------------------------------------------------


def test_each_monitor_run_rebuilds_the_report_and_writes_a_receipt_that_verifies(tmp_path):
    from autheval.reporting.receipt import read_receipt, verification_lines, verify

    root = tmp_path / "lake"
    drop(root, logs(tmp_path / "first") / MONTH)
    assert run_monitor(root)[0] == 0
    earlier = landed_key(root, MONTH)
    corrected = pcsv.read_csv(logs(tmp_path / "fixed", seed=99) / MONTH)
    drop(root, Path(MONTH), table=corrected.append_column("supersedes", pa.array([earlier] * corrected.num_rows)))
    code, lines = run_monitor(root)  # the corrected re-export under the same name
    assert code == 0, lines
    report = (root / "reports" / "report.md").read_text()
    assert "Nothing is monitored in this lake yet" not in report and "site-1" in report
    receipt = read_receipt(root / "monitor" / "receipt.json")
    assert receipt["command"] == "monitor" and receipt["argv"][:2] == ["monitor", "run"]
    landed_args = [receipt["argv"][i + 1] for i, a in enumerate(receipt["argv"]) if a == "--land"]
    keys = {p.name.split("__")[0] for p in (root / "landing" / "processed").glob(f"*__{MONTH}")}
    assert [Path(a).name.split("__")[0] for a in landed_args] == [earlier, *(keys - {earlier})]  # in order
    assert len(list((root / "monitor" / "receipts").glob("monitor-*.json"))) == 2  # every run's, kept
    result = verify(root / "monitor" / "receipt.json", workdir=tmp_path)
    lines = verification_lines(result)
    assert result.identical, lines
    assert {v.name for v in result.outputs} == {
        f"table:{t}" for t in ("landed_records", "trend", "monitor", "monitor_case_mix")
    }


def test_retention_keeps_whole_runs_however_many_files_each_lands(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTHEVAL_KEEP_SNAPSHOTS", "2")
    root = tmp_path / "lake"
    made = logs(tmp_path / "logs", months=4)
    months = sorted(made.glob("*.csv"))
    runs = []
    for batch in (months[:1], months[1:3], months[3:]):
        for log in batch:
            drop(root, log)
        assert run_monitor(root)[0] == 0
        runs.append(committed_snapshots(Lake(root).location)[-1].run_id)
    kept = committed_snapshots(Lake(root).location)
    assert {m.run_id for m in kept} == set(runs[1:])  # the last 2 runs, every snapshot of each
    assert sum(m.run_id == runs[1] for m in kept) == 3  # two landed files, then the job with report and receipt
    second = min(m.snapshot for m in kept if m.run_id == runs[1])
    assert Lake(root, snapshot=second).read("landed_records").num_rows > 0
    con = duckdb.connect(str(root / "autheval.duckdb"), read_only=True)
    listed = {r[0] for r in con.execute("select distinct run_id from lake_snapshots").fetchall()}
    assert listed == set(runs[1:])
    receipts = json.loads((root / "monitor" / "receipt.json").read_text())
    assert receipts["command"] == "monitor"
