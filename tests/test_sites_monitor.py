"""Monitoring from site exports (issue 29): each site exports its monitor part (`site export --monitor`),
the hub pools the parts (`pool --protocol`) into the monitor, case-mix and decision tables the lake's
`monitor run` of all the sites' logs writes; suppressed periods; the one-line refusals."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import shutil
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from autheval.cli.main import main
from autheval.monitoring.decisions import HISTORY_COLUMNS

SITES = ("site-1", "site-2", "site-3")


def _run(*argv) -> int:
    return main([str(a) for a in argv])


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _same(text: str, value) -> bool:
    """A CSV cell equals a lake value: floats to 1e-12 (relative above 1), the rest as written."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return text == ""
    if isinstance(value, bool):
        return text == str(value)
    if isinstance(value, float):
        return text != "" and abs(float(text) - value) <= 1e-12 * max(1.0, abs(value))
    return text == str(value)


def _mismatches(hub: list[dict], lake: pa.Table, skip=HISTORY_COLUMNS, expect=None) -> list:
    """(row, column, hub, lake) of every cell that differs; `expect(row)`: the lake row as the hub should
    write it (the pooled slice's interval columns)."""
    assert [list(r) for r in hub[:1]] == [lake.column_names]  # the same columns, in order
    assert len(hub) == lake.num_rows
    out = []
    for i, (h, lk) in enumerate(zip(hub, lake.to_pylist())):
        lk = expect(lk) if expect else lk
        out += [(i, c, h[c], v) for c, v in lk.items() if c not in skip and not _same(h[c], v)]
    return out


def _export_site(root: Path, site: str, logs: Path, *extra) -> Path:
    """`site export --monitor` of one site's logs with its own key (made and registered on first use)."""
    key = root / f"key-{site}"
    if not key.exists():
        assert _run("site", "keygen", "--out", key) == 0
        (root / "trust").mkdir(exist_ok=True)
        shutil.copy(key / "site.pub", root / "trust" / f"{site}.pub")
    out = root / f"export-{site}"
    assert (
        _run("site", "export", "--monitor", logs, "--site", site, "--out", out, "--key", key / "site.key", *extra) == 0
    )
    return out


def _pool(root: Path, exports, *extra, out: Path | None = None) -> int:
    """`autheval pool` of `exports` with the sites' trust folder, into `out` (default root/hub)."""
    argv = ["pool", "--trust", root / "trust", "--output-dir", out or root / "hub", *extra]
    for e in exports:
        argv += ["--export", e]
    return _run(*argv)


def _site_folders(sim: Path, root: Path) -> dict[str, Path]:
    """Each site's own logs (the files its lake would land), in a folder of its own."""
    folders = {}
    for site in SITES:
        folder = root / f"logs-{site}"
        folder.mkdir(parents=True)
        for path in sim.glob(f"{site}_*.csv"):
            shutil.copy(path, folder / path.name)
        folders[site] = folder
    return folders


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """Three sites' monthly logs (site-3 on a second model version from month 2, whose proposals fall
    away: an alert) landed and monitored by `monitor run`; each site's export of the same logs; the hub's
    pool of the three."""
    from autheval.monitoring.deployment_sim import DeploymentModel
    from autheval.monitoring.protocol import DEFAULT_PROTOCOL
    from tests.conftest import land_and_monitor
    from warehouse.lake import Lake

    root = tmp_path_factory.mktemp("monitor")
    model = DeploymentModel(sites=3, months=4, clusters_per_month=60)
    lake, code = land_and_monitor(root, model, "site-3:proposer_quality:-1.0:from=2:version=v2-rc")
    assert code == 3  # something alerts
    folders = _site_folders(root / "sim", root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exports = [_export_site(root, site, folders[site]) for site in SITES]
    assert _pool(root, exports, "--protocol", DEFAULT_PROTOCOL) == 0
    return Lake(lake), root / "hub", exports


def test_monitor_from_exports_equals_the_lakes_monitor_of_the_same_logs(deployment):
    from autheval.sites.monitor import POOLED_NO_INTERVAL

    lake, hub, _ = deployment
    monitor = lake.read("monitor")
    rows = _rows(hub / "monitor.csv")
    by_slice = {(r["site"], r["model_version"]) for r in rows}
    assert ("site-3", "v2-rc") in by_slice and ("site-3", "all") in by_slice and ("all", "all") in by_slice

    def as_hub(row: dict) -> dict:  # the pooled slice: no rows to resample, said in its reason
        if row["site"] != "all":
            return row
        return {
            **row,
            "ci_lower": None,
            "ci_upper": None,
            "reason": f"{row['reason']}; no bootstrap interval: {POOLED_NO_INTERVAL}",
        }

    assert _mismatches(rows, monitor, expect=as_hub) == []
    assert [r["status"] for r in rows] == monitor.column("status").to_pylist()
    assert {r["status"] for r in rows} >= {"alert", "pass"}
    assert [r["decision"] for r in rows] == ["decided_now"] * len(rows)
    # the site slices' fixed-sample intervals are each site's own, as the lake's
    site_rows = [(r, m) for r, m in zip(rows, monitor.to_pylist()) if r["site"] != "all" and m["ci_lower"] is not None]
    assert site_rows and all(_same(r["ci_lower"], m["ci_lower"]) for r, m in site_rows)

    assert _mismatches(_rows(hub / "monitor_case_mix.csv"), lake.read("monitor_case_mix")) == []
    record = lake.read("monitor_decisions")
    assert _mismatches(_rows(hub / "monitor_decisions.csv"), record, expect=as_hub_decision) == []
    summary = json.loads((hub / "summary.json").read_text())
    assert summary["monitor"]["alerts"] and set(summary["monitor"]["exports"]) == set(SITES)


def as_hub_decision(row: dict) -> dict:
    from autheval.sites.monitor import POOLED_NO_INTERVAL

    if row["site"] != "all":
        return row
    return {**row, "reason": f"{row['reason']}; no bootstrap interval: {POOLED_NO_INTERVAL}"}


def test_a_monitor_export_holds_no_case_cluster_or_timestamp(deployment):
    """Every byte of a monitor export: no case id, cluster id or timestamp of the site's logs, and no
    per-cluster row (the monitor part's entries are per model version and period)."""
    _, _, exports = deployment
    for site, export in zip(SITES, exports):
        ids = set()
        for log in (export.parent / f"logs-{site}").glob("*.csv"):
            table = pacsv.read_csv(log, convert_options=pacsv.ConvertOptions(strings_can_be_null=False))
            for column in ("case_id", "cluster_id"):
                ids.update(table.column(column).cast(pa.string()).to_pylist())
            ids.update(t.isoformat(sep=" ") for t in table.column("timestamp").to_pylist())
        assert sorted(p.name for p in export.iterdir()) == ["manifest.json", "manifest.sig", "monitor.json"]
        for path in export.iterdir():
            text = path.read_bytes().decode("latin-1")
            assert not [i for i in ids if i in text], path
            assert "lesion" not in text
        part = json.loads((export / "monitor.json").read_text())
        assert all(len(cell["periods"]) <= 4 for cell in part["cells"])  # one entry per period, none per cluster


# --- suppression -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sparse(tmp_path_factory):
    """site-1 with a sparse second month (carried into the third) and a sparse last month (withheld), site-2
    full; monitored in one lake and exported with --min-clusters 25."""
    from autheval.monitoring.deployment_sim import DeploymentModel, write_deployment
    from autheval.monitoring.landing import read_landed
    from autheval.monitoring.monitor import monitor_table
    from autheval.monitoring.protocol import load_protocol

    root = tmp_path_factory.mktemp("sparse")
    paths = write_deployment(DeploymentModel(sites=2, months=4, clusters_per_month=40), root / "sim", seed=3)
    for month in ("2026-02", "2026-04"):  # keep 8 of site-1's lesions in these months
        path = root / "sim" / f"site-1_{month}.csv"
        table = pacsv.read_csv(path)
        lesions = sorted(set(table.column("cluster_id").to_pylist()))[:8]
        pacsv.write_csv(table.filter(pa.compute.is_in(table.column("cluster_id"), pa.array(lesions))), path)
    logs = sorted(p for p in paths if p.suffix == ".csv")
    landed = pa.concat_tables([read_landed(p)[1] for p in logs], promote_options="permissive")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lake = monitor_table(landed, load_protocol(None), reps=20)
        folders = {}
        for site in ("site-1", "site-2"):
            folders[site] = root / f"logs-{site}"
            folders[site].mkdir()
            for p in logs:
                if p.name.startswith(site + "_"):
                    shutil.copy(p, folders[site] / p.name)
        minimum = ("--min-clusters", "25", "--min-changed-clusters", "1", "--replicates", "20")
        exports = [_export_site(root, site, folders[site], *minimum) for site in ("site-1", "site-2")]
    return root, lake, exports


def test_a_suppressed_period_is_carried_and_its_look_left_undecided(sparse):
    from autheval.monitoring.protocol import DEFAULT_PROTOCOL

    root, lake, exports = sparse
    part = json.loads((exports[0] / "monitor.json").read_text())
    periods = {e["period"]: e for e in next(c for c in part["cells"] if c["model_version"] == "model-1")["periods"]}
    assert periods["2026-02"]["suppressed"] and "carried into 2026-03" in periods["2026-02"]["reason"]
    assert periods["2026-04"]["suppressed"] and "withheld" in periods["2026-04"]["reason"]
    assert not periods["2026-03"]["suppressed"] and periods["2026-03"]["clusters"] >= 25
    assert "sums" not in periods["2026-02"] and "moments" not in periods["2026-04"]

    assert _pool(root, exports, "--protocol", DEFAULT_PROTOCOL) == 0
    hub = {
        (r["site"], r["model_version"], r["metric"], r["unit"], r["look"]): r
        for r in _rows(root / "hub" / "monitor.csv")
    }
    for row in lake.table.to_pylist():
        got = hub[(row["site"], row["model_version"], row["metric"], row["unit"], str(row["look"]))]
        if row["site"] == "site-2" or (row["site"] == "site-1" and row["period"] in ("2026-01", "2026-03")):
            assert _same(got["estimate"], row["estimate"]) and _same(got["n_clusters"], row["n_clusters"]), got
        elif row["site"] == "site-1" or (row["site"] == "all" and row["period"] in ("2026-02", "2026-04")):
            assert got["status"] == "insufficient" and got["estimate"] == got["n_clusters"] == "", got
            assert "site-1 suppressed the period" in got["reason"] and "--min-clusters" in got["reason"], got
        else:  # the pooled slice at a period both sites' sums reach
            assert _same(got["estimate"], row["estimate"]), got


# --- refusals ----------------------------------------------------------------------------------------------


def _refused(capsys, code: int, *needles: str) -> None:
    err = capsys.readouterr().err.strip()
    assert code == 2 and all(n in err for n in needles) and len(err.splitlines()) == 1, err


def _resign(export: Path, target: Path, edit, manifest_edit=None) -> Path:
    """A copy of `export` with monitor.json edited by `edit` (and the manifest by `manifest_edit`), the
    manifest updated and re-signed with the site's own key (a site that lies about its sums)."""
    from autheval.sites.signing import load_private_key, sign

    shutil.copytree(export, target)
    part = json.loads((target / "monitor.json").read_text())
    edit(part)
    (target / "monitor.json").write_text(json.dumps(part))
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["files"]["monitor.json"] = hashlib.sha256((target / "monitor.json").read_bytes()).hexdigest()
    if manifest_edit is not None:
        manifest_edit(manifest)
    data = json.dumps(manifest).encode()
    (target / "manifest.json").write_bytes(data)
    site = manifest["site"]
    key = load_private_key(export.parent / f"key-{site}" / "site.key")
    (target / "manifest.sig").write_text(sign(key, data) + "\n")
    return target


def test_monitor_parts_of_another_protocol_or_none_are_refused_and_nothing_is_written(sparse, tmp_path, capsys):
    from autheval.monitoring.protocol import DEFAULT_PROTOCOL, default_protocol_text

    root, _, exports = sparse
    other = tmp_path / "other.yaml"
    other.write_text(default_protocol_text().replace("version: ", "version: other-", 1))
    hub = tmp_path / "hub"
    code = _pool(root, exports, "--protocol", other, out=hub)
    _refused(capsys, code, "its monitor part was made under protocol")
    assert not hub.exists()
    # an export without a monitor part beside monitor parts: the hub pools parts of every site or none
    log = tmp_path / "log.csv"
    first = next((exports[0].parent / "logs-site-2").glob("*.csv"))
    pacsv.write_csv(pacsv.read_csv(first).drop_columns(["timestamp", "site", "model_version", "risk_stratum"]), log)
    plain = tmp_path / "plain"
    assert (
        _run(
            "site",
            "export",
            "--input",
            log,
            "--site",
            "site-2",
            "--out",
            plain,
            "--key",
            root / "key-site-2" / "site.key",
            "--replicates",
            "20",
        )
        == 0
    )
    _refused(capsys, _pool(root, [exports[0], plain], out=hub), "every site exports the same parts")
    _refused(capsys, _pool(root, [plain], "--protocol", other, out=hub), "holds no monitor part")
    code = _pool(root, exports, out=hub)
    _refused(capsys, code, "the exports hold monitor parts only: give the hub's --protocol")
    fewer = tmp_path / "fewer"  # fixed-sample intervals of another replicate count: the export's replicates
    key = root / "key-site-2" / "site.key"
    argv = ["--monitor", root / "logs-site-2", "--min-clusters", "25", "--min-changed-clusters", "1"]
    assert _run("site", "export", *argv, "--site", "site-2", "--out", fewer, "--key", key, "--replicates", "30") == 0
    _refused(capsys, _pool(root, [exports[0], fewer], "--protocol", DEFAULT_PROTOCOL, out=hub), "has reps 30 but")
    assert not hub.exists()


def test_a_signed_monitor_part_that_breaks_its_rules_is_one_line(sparse, tmp_path, capsys):
    from autheval.monitoring.protocol import DEFAULT_PROTOCOL

    root, _, exports = sparse
    site2 = exports[1]

    def cell(part):
        return part["cells"][0]["periods"]

    cases = {
        "below": (
            lambda p: cell(p)[0].update(clusters=20, changed_clusters=3),
            "below the manifest's minimum counts but is not suppressed",
        ),
        "moments": (
            lambda p: cell(p)[0]["moments"]["cluster_equal/J"].pop(),
            "must be a list of 5 finite numbers or nulls",
        ),
        "periods": (lambda p: cell(p).pop(), "must list the cell's periods of the files"),
        "protocol": (lambda p: p["protocol"].update(version="x"), "names another protocol than the manifest's"),
        "site": (lambda p: p.update(site="site-1"), "names another site than its manifest"),
        "case_mix": (lambda p: p["case_mix"][0].__setitem__(1, 99), "case_mix[0] must be"),
        "files": (lambda p: p["files"][0].__setitem__(0, "zz"), "files[0] must be"),
        "format": (lambda p: p.update(format="x"), "format must be autheval-site-monitor/1"),
        "reps": (lambda p: p.update(reps=7), "reps must equal the manifest's monitor reps"),
        "sums": (lambda p: cell(p)[0]["sums"].update(cases=1), "sums is inconsistent with the period's clusters"),
        "failed": (lambda p: cell(p)[0].update(failed={"rule": 1}), "failed must be null or an object"),
        "intervals": (lambda p: cell(p)[0]["intervals"].update(x=[0, 1]), "intervals may name only"),
        "centres": (lambda p: p["cells"][0]["centres"].clear(), "centres must name exactly"),
        "cells": (lambda p: p["cells"].pop(), "cells must hold one cell per model version"),
        "count": (lambda p: cell(p)[0]["sums"].update(executed=-1), "sums.executed must be a whole number"),
    }
    for name, (edit, needle) in cases.items():
        bad = _resign(site2, tmp_path / name, edit)
        argv = ["--protocol", DEFAULT_PROTOCOL, "--export", exports[0], "--export", bad]
        code = _run("pool", "--trust", root / "trust", "--output-dir", tmp_path / "hub", *argv)
        _refused(capsys, code, needle, str(bad / "monitor.json"))
    assert not (tmp_path / "hub").exists()


def test_a_signed_manifest_naming_a_log_outside_its_folder_is_one_line(sparse, tmp_path, capsys):
    from autheval.monitoring.protocol import DEFAULT_PROTOCOL

    root, _, exports = sparse
    for i, name in enumerate(("../../etc/passwd", "..", "a/b.csv")):

        def outside(manifest, name=name):
            manifest["monitor"]["logs"][0]["file"] = name

        bad = _resign(exports[1], tmp_path / f"bad{i}", lambda p: None, outside)
        argv = ["--protocol", DEFAULT_PROTOCOL, "--export", exports[0], "--export", bad]
        code = _run("pool", "--trust", root / "trust", "--output-dir", tmp_path / "hub", *argv)
        _refused(capsys, code, "monitor.logs[0].file must be a log's plain file name", str(bad / "manifest.json"))
    assert not (tmp_path / "hub").exists()


def test_site_monitor_inputs_that_break_a_rule_are_one_line(sparse, tmp_path, capsys):
    root, _, _ = sparse
    key = root / "key-site-1" / "site.key"
    logs = root / "logs-site-1"

    def export(folder, *extra):
        return _run(
            "site", "export", "--monitor", folder, "--site", "site-1", "--out", tmp_path / "out", "--key", key, *extra
        )

    _refused(capsys, export(logs, "--site", "site-2"), "must name the exporting site 'site-2'")
    empty = tmp_path / "empty"
    empty.mkdir()
    _refused(capsys, export(empty), "holds no log")
    twice = tmp_path / "twice"
    shutil.copytree(logs, twice)
    first = sorted(twice.glob("*.csv"))[0]
    shutil.copy(first, twice / "zz-again.csv")
    _refused(capsys, export(twice), "holds the same bytes as")
    pacsv.write_csv(pacsv.read_csv(first).drop_columns(["risk_stratum"]), twice / "zz-again.csv")  # same cases
    _refused(capsys, export(twice), "already in")
    code = _run(
        "site",
        "export",
        "--input",
        first,
        "--protocol",
        "p.yaml",
        "--site",
        "site-1",
        "--out",
        tmp_path / "out",
        "--key",
        key,
    )
    _refused(capsys, code, "give the logs it monitors with --monitor DIR")
    assert not (tmp_path / "out").exists()


def test_a_monitor_folder_with_an_odd_log_or_holding_the_export_is_refused(sparse, tmp_path, capsys):
    """A FIFO or a folder named as a log would be skipped silently; an --out inside the --monitor folder
    would be read as its logs next time: one line each, nothing written."""
    root, _, _ = sparse
    key = root / "key-site-1" / "site.key"
    for odd in ("fifo", "folder"):
        logs = tmp_path / odd
        shutil.copytree(root / "logs-site-1", logs)
        if odd == "fifo":
            os.mkfifo(logs / "zz-odd.csv")
        else:
            (logs / "zz-odd.csv").mkdir()
        code = _run("site", "export", "--monitor", logs, "--site", "site-1", "--out", tmp_path / "out", "--key", key)
        _refused(capsys, code, "zz-odd.csv is named as a log but is not a plain file")
    logs = root / "logs-site-1"
    code = _run("site", "export", "--monitor", logs, "--site", "site-1", "--out", logs / "export", "--key", key)
    _refused(capsys, code, "lies inside the input --monitor")
    assert not (tmp_path / "out").exists() and not (logs / "export").exists()
