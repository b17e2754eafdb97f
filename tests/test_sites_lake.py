"""A hub lake (issue 29, the lake side: autheval.sites.lake, assets/site_exports.py, `autheval site land`):
signed site exports land like logs, are recorded in site_exports and pool into the lake's estimates,
intervals, contrasts, heterogeneity and monitor tables, equal, cell for cell as text, to `autheval
pool`'s CSVs of the same exports; a forged, altered, replayed, unsigned, unregistered, partial or
same-site export, or one of another protocol, is refused in one line and the lake keeps what it had."""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

from autheval.cli.main import main
from autheval.reporting.tables import cell
from autheval.review.rules import default_rules_text
from tests.test_sites import REPS, SEED, _export, arms, logs, signed  # noqa: F401  (module fixtures)
from tests.test_sites_monitor import sparse  # noqa: F401  (module fixture)
from warehouse.lake import Lake


def _run(*argv) -> int:
    return main([str(a) for a in argv])


def _csv(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def _hub_lake(root: Path, trust: Path) -> Path:
    lake = root / "lake"
    lake.mkdir(parents=True)
    shutil.copytree(trust, lake / "trusted_keys")
    return lake


def _land(lake: Path, *exports, extra=()) -> int:
    argv = ["site", "land", "--lake", lake, *extra]
    for e in exports:
        argv += ["--export", e]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _run(*argv)


def _differences(rows: list[dict], table: pa.Table, skip=()) -> list:
    """(row, column, csv, lake) of every cell of `rows` the lake table writes otherwise (as text: floats
    as their shortest round-trip repr, so equal text is the same double)."""
    assert len(rows) == table.num_rows, (len(rows), table.num_rows)
    out = []
    for i, (want, got) in enumerate(zip(rows, table.to_pylist())):
        out += [(i, c, t, got[c]) for c, t in want.items() if c not in skip and cell(got[c]) != t]
    return out


@pytest.fixture(scope="module")
def hub(signed, arms, tmp_path_factory):  # noqa: F811
    """The three sites' two-arm exports (the paired contrast `b minus a`) pooled by `autheval pool` and
    landed in a hub lake by `site land`."""
    _, trust, _ = signed
    exports = arms[3]
    out = tmp_path_factory.mktemp("hub")
    folders = list(exports.values())
    argv = ["pool", "--trust", trust, "--output-dir", out / "pool"]
    for f in folders:
        argv += ["--export", f]
    assert _run(*argv) == 0
    lake = _hub_lake(out, trust)
    assert _land(lake, *folders) == 0
    return out / "pool", lake


def test_hub_lake_tables_equal_the_pool_of_the_same_exports(hub):
    pooled, lake = hub
    store = Lake(lake)
    rows = _csv(pooled / "estimates.csv")
    boot = [r for r in rows if r["interval_method"] != "delta_method"]
    estimates = store.read("estimates")
    assert _differences(boot, estimates, skip=("model",)) == []
    assert set(estimates.column("site").to_pylist()) == {"all", "north", "south", "west"}
    assert {"study", "mechanism", "regime", "analysis_order", "rule_sha256", "engine", "software_version"} <= set(
        estimates.column_names
    )
    pooled_hash = {r["data_sha256"] for r in boot if r["source"] == "pooled"}
    assert len(pooled_hash) == 1 and all(f"{s}=" in next(iter(pooled_hash)) for s in ("north", "south", "west"))
    intervals = store.read("intervals")
    delta = [r for r in rows if r["interval_method"] == "delta_method"]
    absent = set(rows[0]) - set(intervals.column_names)  # the records lake's intervals: no p-value, n, quantiles
    assert not absent & {"analysis", "unit", "metric", "interval_method", "estimate", "ci_lower", "ci_upper", "scheme"}
    assert _differences(rows, intervals, skip=absent) == []
    errors = [r for r in intervals.to_pylist() if r["interval_method"] == "delta_method"]
    assert len(errors) == len(delta) and any(r["std_error"] for r in errors)  # the delta method's standard error
    contrasts = store.read("contrasts")
    assert _differences(_csv(pooled / "paired_contrast.csv"), contrasts) == []
    assert {"bootstrap_poisson_by_site", "delta_method"} == set(contrasts.column("interval_method").to_pylist())
    het = store.read("heterogeneity")
    assert _differences(_csv(pooled / "heterogeneity.csv"), het) == []
    exports = store.read("site_exports").to_pylist()
    assert [e["site"] for e in exports] == ["north", "south", "west"]
    assert {e["analyses"] for e in exports} == {"a;b"} and {e["contrasts"] for e in exports} == {"b minus a"}
    for e in exports:  # what the lake keeps names every file and its hash, and no case or cluster id
        assert Path(e["stored"]).is_dir() and e["export_key"] in Path(e["stored"]).name
        assert "statistics.json=" in e["files"] and "replicates.parquet=" in e["files"]
    assert not any((lake / "landing" / "exports").glob(".incoming-*"))


def _state(lake: Path) -> tuple:
    """What a refusal must leave as it was: the snapshot and every table's rows."""
    store = Lake(lake)
    return store.snapshot().snapshot, {n: store.read(n) for n in sorted(store.tables())}


def _refused(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and all(n in err for n in needles), (code, err)
    return err


def _waiting(lake: Path) -> list[str]:
    return sorted(p.name for p in (lake / "landing" / "exports").iterdir())


def _copy(folder: Path, target: Path) -> Path:
    shutil.copytree(folder, target)
    return target


def test_hostile_exports_are_refused_in_one_line_and_the_lake_keeps_what_it_had(logs, signed, tmp_path, capsys):  # noqa: F811
    root, trust, exports = signed
    _, per_site, _ = logs
    lake = _hub_lake(tmp_path, trust)
    assert _land(lake, exports["north"]) == 0
    before = _state(lake)
    north = exports["north"]
    unsigned = _copy(north, tmp_path / "unsigned")
    os.unlink(unsigned / "manifest.sig")
    altered = _copy(exports["south"], tmp_path / "altered")
    data = bytearray((altered / "statistics.json").read_bytes())
    data[len(data) // 2] ^= 1
    (altered / "statistics.json").write_bytes(bytes(data))
    partial = _copy(exports["south"], tmp_path / "partial")
    os.unlink(partial / "replicates.parquet")
    assert _run("site", "keygen", "--out", tmp_path / "rogue") == 0
    forged = tmp_path / "forged"  # south's records signed by a key the lake never registered
    assert _export(per_site["south"], "south", forged, tmp_path / "rogue" / "site.key", seed=SEED, reps=REPS) == 0
    same_site = tmp_path / "same-site"  # another export of north (south's records, north's key)
    assert _export(per_site["south"], "north", same_site, root / "key-north" / "site.key", seed=SEED, reps=REPS) == 0
    other_seed = tmp_path / "other-seed"
    key = root / "key-west" / "site.key"
    assert _export(per_site["west"], "west", other_seed, key, seed=SEED + 1, reps=REPS) == 0
    capsys.readouterr()
    rules = tmp_path / "rules.yaml"  # the hub lake's --rules: west's export declares none
    rules.write_text(default_rules_text())
    _refused(capsys, _land(lake, exports["west"], extra=("--rules", rules)), "export-west", "declares no rules")
    assert _state(lake)[0] == before[0] and _waiting(lake) == ["processed"]
    cases = [
        (unsigned, "unsigned"),
        (altered, "altered after signing"),
        (partial, "partial"),
        (forged, "not registered"),
        (north, "replay"),
        (_copy(north, tmp_path / "replayed"), "replay"),
        (same_site, "both exports of site 'north'"),
        (other_seed, "seed"),
    ]
    for folder, rule in cases:
        _refused(capsys, _land(lake, folder), f"export {folder.name}", rule)
        assert _state(lake)[0] == before[0] and _waiting(lake) == ["processed"]  # nothing copied in
    # dropped into the landing folder by hand: set aside with its reason, as a bad log is
    for folder, rule in cases[:4]:
        dropped = _copy(folder, lake / "landing" / "exports" / f"dropped-{folder.name}")
        assert _land(lake) == 2
        out = capsys.readouterr().out
        assert f"export {dropped.name}" in out and rule in out, out
        reason = lake / "landing" / "exports" / "rejected" / f"{dropped.name}.reason.txt"
        assert rule in reason.read_text() and not dropped.exists()
        now = _state(lake)
        assert now[0] == before[0] and now[1].keys() == before[1].keys()
        assert all(now[1][n].equals(before[1][n]) for n in now[1])
    assert _land(lake, exports["south"]) == 0  # a good export still lands after all that
    assert Lake(lake).read("site_exports").column("site").to_pylist() == ["north", "south"]


def test_a_lake_without_keys_or_holding_landed_logs_is_refused(signed, tmp_path, capsys):  # noqa: F811
    _, trust, exports = signed
    bare = tmp_path / "bare"
    bare.mkdir()
    _refused(capsys, _land(bare, exports["north"]), "trusted_keys", "registered")
    logs_lake = _hub_lake(tmp_path / "logs", trust)
    (logs_lake / "landed_records").mkdir()
    Lake(logs_lake).write_partition("landed_records", "k", pa.table({"x": [1]}))
    _refused(capsys, _land(logs_lake, exports["north"]), "landed logs")
    _refused(capsys, _run("monitor", "run", "--lake", _hub_lake_with_exports(tmp_path, trust, exports)), "hub lake")


def _hub_lake_with_exports(tmp_path: Path, trust: Path, exports: dict) -> Path:
    lake = _hub_lake(tmp_path / "hub", trust)
    assert _land(lake, exports["north"]) == 0
    return lake


def test_monitor_parts_pool_into_the_lakes_monitor_and_another_protocol_is_refused(sparse, tmp_path, capsys):  # noqa: F811
    from autheval.monitoring.decisions import HISTORY_COLUMNS
    from autheval.monitoring.protocol import DEFAULT_PROTOCOL

    root, _, exports = sparse
    argv = ["pool", "--trust", root / "trust", "--output-dir", tmp_path / "pool", "--protocol", DEFAULT_PROTOCOL]
    for e in exports:
        argv += ["--export", e]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert _run(*argv) == 0
    lake = _hub_lake(tmp_path, root / "trust")
    other = tmp_path / "other.yaml"  # the packaged protocol but for its version: another SHA-256
    other.write_text(Path(DEFAULT_PROTOCOL).read_text().replace("version:", "version: other-", 1))
    _refused(capsys, _land(lake, exports[0], extra=("--protocol", other)), "protocol")
    assert not Lake(lake).tables()
    assert _land(lake, *exports) == 0
    store = Lake(lake)
    monitor = _csv(tmp_path / "pool" / "monitor.csv")
    assert _differences(monitor, store.read("monitor"), skip=HISTORY_COLUMNS) == []
    assert _differences(_csv(tmp_path / "pool" / "monitor_case_mix.csv"), store.read("monitor_case_mix")) == []
    decided = store.read("monitor_decisions")
    assert decided.num_rows == len(_csv(tmp_path / "pool" / "monitor_decisions.csv"))
    runs = set(decided.column("decided_run").to_pylist())  # decided by the lake's run, not a pool's
    assert len(runs) == 1 and not next(iter(runs)).startswith("pool-")


def test_links_fifos_odd_folders_and_reserved_names_are_refused(signed, tmp_path, capsys):  # noqa: F811
    """An export folder that is a link, holds a link, a FIFO or a folder, is empty, or is named as the
    landing's own folders; a file dropped where a folder is expected; a linked trusted_keys: one line."""
    _, trust, exports = signed
    north = exports["north"]
    lake = _hub_lake(tmp_path, trust)
    linked = tmp_path / "linked-folder"
    linked.symlink_to(north, target_is_directory=True)
    holds_link = _copy(north, tmp_path / "holds-link")
    os.unlink(holds_link / "statistics.json")
    (holds_link / "statistics.json").symlink_to(north / "statistics.json")
    holds_fifo = _copy(north, tmp_path / "holds-fifo")
    os.unlink(holds_fifo / "replicates.parquet")
    os.mkfifo(holds_fifo / "replicates.parquet")
    holds_folder = _copy(north, tmp_path / "holds-folder")
    (holds_folder / "monitor.json").mkdir()  # a name an export may hold, as a folder
    holds_sub = _copy(north, tmp_path / "holds-sub")
    (holds_sub / "sub").mkdir()
    empty = tmp_path / "empty"
    empty.mkdir()
    reserved = _copy(north, tmp_path / "named" / "processed")
    for folder, rule in (
        (linked, "not an export folder"),
        (holds_link, "not a plain file"),
        (holds_fifo, "not a plain file"),
        (holds_folder, "not a plain file"),
        (holds_sub, "'sub', which no site export holds"),
        (empty, "no such site export manifest"),
        (reserved, "the landing's own"),
    ):
        _refused(capsys, _land(lake, folder), rule)
        assert not Lake(lake).tables() and not (lake / "landing" / "exports" / "processed").exists()
    (lake / "landing" / "exports").mkdir(parents=True, exist_ok=True)
    (lake / "landing" / "exports" / "stray.csv").write_text("a\n1\n")
    assert _land(lake) == 2 and "not an export folder" in capsys.readouterr().out
    assert (lake / "landing" / "exports" / "rejected" / "stray.csv.reason.txt").is_file()
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.rmtree(lake / "landing" / "exports" / "rejected")
    (lake / "landing" / "exports" / "rejected").symlink_to(outside, target_is_directory=True)
    _refused(capsys, _land(lake, north), "rejected", "symbolic link")
    assert not any(outside.iterdir())
    shutil.rmtree(lake / "trusted_keys")
    (lake / "trusted_keys").symlink_to(trust, target_is_directory=True)
    _refused(capsys, _land(lake, north), "no registered site keys")


def test_hub_rules_reach_dropped_exports_and_no_export_is_copied_before_all_are_verified(
    logs,  # noqa: F811
    signed,  # noqa: F811
    tmp_path,
    capsys,
):
    """`site land --rules` refuses an export dropped by hand that was scored under other rules (not only a
    given --export); of several --export, none is copied in when one is refused, and the refusal names
    each export as given, never the lake's hidden copy, and its rules by version and hash."""
    root, trust, _ = signed
    _, per_site, _ = logs
    ours, other = tmp_path / "rules.yaml", tmp_path / "other.yaml"
    ours.write_text(default_rules_text())
    other.write_text(default_rules_text() + "\n# another file: another SHA-256\n")
    made = {}
    for site, rules in (("north", ours), ("south", other)):
        made[site] = tmp_path / f"ruled-{site}"
        key = root / f"key-{site}" / "site.key"
        assert _export(per_site[site], site, made[site], key, "--rules", rules, seed=SEED, reps=REPS) == 0
    capsys.readouterr()
    lake = _hub_lake(tmp_path, trust)
    dropped = _copy(made["south"], lake / "landing" / "exports" / "dropped")
    assert _land(lake, extra=("--rules", ours)) == 2
    out = capsys.readouterr().out
    assert "export dropped" in out and "not the hub's --rules" in out, out
    assert not dropped.exists() and (dropped.parent / "rejected" / "dropped.reason.txt").is_file()
    assert not Lake(lake).tables()
    err = _refused(capsys, _land(lake, made["north"], made["south"]), "export ruled-south", "rules")
    assert ".incoming" not in err and "{'" not in err and str(made["north"]) in err, err
    assert _waiting(lake) == ["rejected"] and not Lake(lake).tables()
    assert _land(lake, made["north"], extra=("--rules", ours)) == 0  # its rules: every row names them
    declared = hashlib.sha256(ours.read_bytes()).hexdigest()
    for table in ("site_exports", "estimates", "intervals"):
        assert set(Lake(lake).read(table).column("rule_sha256").to_pylist()) == {declared}, table


def test_odd_export_names_and_files_in_place_of_folders_are_refused(signed, tmp_path, capsys):  # noqa: F811
    """An export folder named with a newline, bytes that are not UTF-8 or too long to keep as <key>__<name>
    (given or dropped), and a file where the landing keeps its folders: one line each (the name escaped),
    set aside with its reason when dropped, the lake untouched."""
    _, trust, exports = signed
    lake = _hub_lake(tmp_path, trust)
    odd = tmp_path / "odd"
    names = ("two\nlines", os.fsdecode(b"n\xffx"), "n" * 240)
    for name, rule in zip(names, ("control character", "not UTF-8", "longer than 200 bytes")):
        err = _refused(capsys, _land(lake, _copy(exports["north"], odd / name)), rule)
        assert "\\n" in err or "\n" not in name
        assert not Lake(lake).tables() and not (lake / "landing" / "exports").exists()
    odd_fifo = os.fsdecode(b"f\xff\nx")  # a FIFO in the export, named with a newline and a byte not UTF-8
    os.mkfifo(_copy(exports["north"], odd / "holds-odd-fifo") / odd_fifo)
    _refused(capsys, _land(lake, odd / "holds-odd-fifo"), "f\\xff\\nx", "which no site export holds")
    for name in (*names, "holds-odd-fifo"):
        _copy(exports["north"], lake / "landing" / "exports" / name)
    os.mkfifo(lake / "landing" / "exports" / "holds-odd-fifo" / odd_fifo)
    assert _land(lake) == 2
    capsys.readouterr()
    rejected = lake / "landing" / "exports" / "rejected"
    assert len(list(rejected.glob("*.reason.txt"))) == 4 and _waiting(lake) == ["rejected"]
    assert "f\\xff\\nx', which no site export holds" in (rejected / "holds-odd-fifo.reason.txt").read_text()
    assert not Lake(lake).tables()
    (lake / "landing" / "exports" / "processed").write_text("")
    _refused(capsys, _land(lake, exports["north"]), "processed", "is not a folder")
    assert not Lake(lake).tables() and not list((lake / "landing" / "exports").glob(".incoming-*"))


def test_a_moved_lake_still_pools_and_a_replaced_kept_copy_is_refused(logs, signed, tmp_path, capsys):  # noqa: F811
    """The lake finds its kept copies where it lies now (moved or restored elsewhere), and refuses a kept
    copy that is not the export its row names (another signed export of the site put in its place)."""
    root, trust, exports = signed
    _, per_site, _ = logs
    lake = _hub_lake(tmp_path / "was", trust)
    assert _land(lake, exports["north"]) == 0
    moved = tmp_path / "now" / "lake"
    moved.parent.mkdir()
    shutil.move(lake, moved)
    assert _land(moved, exports["south"]) == 0
    assert Lake(moved).read("site_exports").column("site").to_pylist() == ["north", "south"]
    before = _state(moved)
    (kept,) = (moved / "landing" / "exports" / "processed").glob("*__export-north")
    shutil.rmtree(kept)
    key = root / "key-north" / "site.key"
    assert _export(per_site["north"], "north", kept, key, seed=SEED, reps=REPS + 1) == 0
    capsys.readouterr()
    _refused(capsys, _land(moved, exports["west"]), "site_exports", "not the", "its row names")
    assert _state(moved)[0] == before[0]


def test_a_stray_file_is_refused_before_any_of_the_export_is_copied(signed, tmp_path, capsys, monkeypatch):  # noqa: F811
    """An export holding a file no export holds (given, or dropped into the landing) is refused naming it
    before a byte of the folder is copied into the lake: a stray file of any size costs nothing."""
    import autheval.sites.lake as hub

    _, trust, exports = signed
    lake = _hub_lake(tmp_path, trust)
    copied: list[str] = []
    real = hub._copy_plain
    monkeypatch.setattr(hub, "_copy_plain", lambda src, dst: (copied.append(src.name), real(src, dst))[1])
    stray = _copy(exports["north"], tmp_path / "with-notes")
    (stray / "notes.txt").write_bytes(b"x" * (1 << 20))
    _refused(capsys, _land(lake, stray), "with-notes: holds 'notes.txt', which no site export holds")
    assert copied == [] and not Lake(lake).tables()
    dropped = _copy(stray, lake / "landing" / "exports" / "dropped-with-notes")
    assert _land(lake) == 2 and "'notes.txt', which no site export holds" in capsys.readouterr().out
    assert copied == [] and not dropped.exists() and not list((lake / "landing" / "exports").glob(".incoming*"))
    assert _land(lake, exports["north"]) == 0 and set(copied) == {p.name for p in exports["north"].iterdir()}


def test_each_refusal_is_its_own_line_whatever_the_folder_is_named(signed, tmp_path, capsys):  # noqa: F811
    """Refusals are kept as a list, never a joined line split again: a folder named with ' | ' prints as
    one `rejected` line, beside a landed export and when every waiting export is refused."""
    _, trust, exports = signed
    lake = _hub_lake(tmp_path, trust)
    waiting = lake / "landing" / "exports"
    for name in ("a | b", "c"):
        os.unlink(_copy(exports["south"], waiting / name) / "manifest.sig")
    assert _land(lake) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rejected")]
    assert len(lines) == 2 and "export a | b" in lines[0] and "unsigned" in lines[0] and "export c" in lines[1], lines
    os.unlink(_copy(exports["south"], waiting / "d | e") / "manifest.sig")
    _copy(exports["north"], waiting / "north")
    assert _land(lake) == 2
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("rejected")]
    assert len(lines) == 1 and "export d | e" in lines[0] and "unsigned" in lines[0], out
    assert "landed" in out and Lake(lake).has_table("site_exports")


def test_the_copies_a_killed_landing_left_are_swept_on_this_host_only(signed, tmp_path, capsys):  # noqa: F811
    """A private copy left by a killed process (kill -9: no handler ran) is removed by the next landing
    on the same host; another host's copies on shared storage, and a live process's, are left."""
    import socket
    import subprocess
    import sys

    _, trust, exports = signed
    lake = _hub_lake(tmp_path, trust)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(ended.stdout)
    waiting = lake / "landing" / "exports"
    host = socket.gethostname()
    left = {
        "ours-dead": waiting / f".incoming-{host}-{dead}-abc",
        "ours-alive": waiting / f".incoming-{host}-{os.getpid()}-def",
        "other-host": waiting / f".incoming-{host}x-{dead}-ghi",
    }
    for folder in left.values():
        folder.mkdir(parents=True)
        (folder / "statistics.json").write_text("{}")
    assert _land(lake, exports["north"]) == 0
    assert not left["ours-dead"].exists() and left["ours-alive"].is_dir() and left["other-host"].is_dir()
