"""Recurring evaluation: landing by content, only complete files, and a trend that pools what can be
pooled. Everything runs in-process (dagster.materialize, build_sensor_context) on a temporary lake."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from dagster import DagsterInstance, build_sensor_context, materialize

from dagster_project.definitions import build_definitions, study_assets
from dagster_project.demo import QUIET
from warehouse.catalog import query
from warehouse.lake import Lake

LOG = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,utility_proposed_local,{col}\n"
ROLE_LOG = "case_id,cluster_id,proposed_action,executed_action,utility_executed_local,{col}\n"
JAN = [
    "a1,k1,a2,a1,-1.0,-2.0,2026-01-03",
    "a2,k2,a0,a0,0.0,0.0,2026-01-04",
    "a3,k3,a3,a2,-0.5,-4.0,2026-01-09",
    "a4,k4,a1,a1,0.0,0.0,2026-01-10",
]
FEB = ["b1,k1,a2,a2,-1.0,-1.0,2026-02-01", "b2,k5,a1,a0,-0.5,0.0,2026-02-11", "b3,k6,a3,a1,-2.0,-1.5,2026-02-20"]


def write_log(folder: Path, name: str, col: str, rows: list[str], header: str = LOG) -> Path:
    path = folder / name
    path.write_text(header.format(col=col) + "\n".join(rows) + "\n")
    return path


class Lakeside:
    """A temporary lake with its landing folder, one Dagster instance and the sensor's cursor."""

    def __init__(self, root: Path, instance: DagsterInstance | None = None):
        self.root = root
        self.landing = root / "landing"
        self.landing.mkdir(parents=True, exist_ok=True)
        self.defs = build_definitions(str(root))
        self.instance = instance or DagsterInstance.ephemeral()
        self.cursor: str | None = None

    def tick(self):
        """One sensor evaluation; registers the partitions it asks for, as the daemon would."""
        from assets.landing import landing_sensor

        with build_sensor_context(instance=self.instance, resources=self.defs.resources, cursor=self.cursor) as context:
            result = landing_sensor(context)
        self.cursor = result.cursor
        for request in result.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        return result.run_requests or []

    def land(self, request, tags: dict | None = None) -> bool:
        return materialize(
            study_assets(),
            selection=["landed_records"],
            partition_key=request.partition_key,
            resources=self.defs.resources,
            instance=self.instance,
            run_config=QUIET,
            tags={**request.tags, **(tags or {})},
            raise_on_error=False,
        ).success

    def settle(self) -> list[tuple[str, bool]]:
        """Tick until nothing is waiting (two looks), landing every request: [(key, success)]."""
        done = []
        for _ in range(3):
            for request in self.tick():
                done.append((request.partition_key, self.land(request)))
        return done

    def folder(self, name: str) -> list[str]:
        where = self.landing / name
        return sorted(p.name for p in where.iterdir()) if where.is_dir() else []

    def landed(self) -> list[dict]:
        return Lake(self.root).read("landed_records").select(["landed_key", "landed_file", "case_id"]).to_pylist()


@pytest.fixture
def lake(tmp_path) -> Lakeside:
    return Lakeside(tmp_path / "lake")


def test_landed_logs_become_partitions_and_a_trend(lake):
    write_log(lake.landing, "2026-01.csv", "timestamp", JAN)
    write_log(lake.landing, "2026-02.csv", "timestamp", FEB)
    write_log(lake.landing, "broken.csv", "timestamp", ["c1,k7,a2,a1,abc,-2.0,2026-02-03"])
    assert lake.tick() == []  # first look: remembered, not yet known to be complete
    requests = lake.tick()
    assert sorted(r.tags["autheval/landed_file"] for r in requests) == ["2026-01.csv", "2026-02.csv", "broken.csv"]
    assert all(len(r.partition_key) == 20 for r in requests)
    results = {r.tags["autheval/landed_file"]: lake.land(r) for r in requests}
    assert results == {"2026-01.csv": True, "2026-02.csv": True, "broken.csv": False}
    rejected = lake.folder("rejected")
    assert len(rejected) == 2 and rejected[0].endswith("__broken.csv")
    reason = (lake.landing / "rejected" / rejected[1]).read_text()
    assert rejected[1] == rejected[0] + ".reason.txt"
    assert "column 'utility_executed_local'" in reason and "finite number" in reason
    assert not (lake.landing / "broken.csv").exists()
    assert [n.split("__", 1)[1] for n in lake.folder("processed")] == ["2026-01.csv", "2026-02.csv"]
    assert lake.tick() == []  # nothing new; the rejected file is not retried
    assert materialize(
        study_assets(),
        selection=["trend", "catalog"],
        resources=lake.defs.resources,
        instance=lake.instance,
        run_config=QUIET,
    ).success
    store = Lake(lake.root)
    rows = query(
        store,
        "select period, pool, estimate, n from trend where metric = 'intervention_rate' "
        "and unit = 'image_weighted' and site = 'all' and model_version = 'all' "
        "order by period",
    ).to_pylist()
    assert [(r["period"], r["pool"], r["n"]) for r in rows] == [
        ("2026-01", "full_counterfactual", 4),
        ("2026-02", "full_counterfactual", 3),
        ("all", "full_counterfactual", 7),
    ]
    assert rows[2]["estimate"] == pytest.approx(4 / 7)
    landed = query(store, "select landed_file, count(*) as n from landed_records group by 1 order by 1").to_pylist()
    assert landed == [{"landed_file": "2026-01.csv", "n": 4}, {"landed_file": "2026-02.csv", "n": 3}]
    assert (lake.root / "reports" / "trend.png").stat().st_size > 1000


def test_landed_log_without_a_period_column_is_rejected(tmp_path):
    from autheval.errors import RecordError
    from autheval.monitoring.landing import read_landed

    path = write_log(tmp_path, "x.csv", "note", ["a1,k1,a2,a1,-1.0,-2.0,hello"])
    with pytest.raises(RecordError, match="timestamp or a batch column"):
        read_landed(path)


def test_a_spaced_period_header_is_the_period_and_no_unused_column_warning(tmp_path, recwarn):
    from autheval.monitoring.landing import read_landed

    path = write_log(tmp_path, "x.csv", " timestamp ", JAN)
    records, table = read_landed(path)
    assert sorted(set(table.column("period").to_pylist())) == ["2026-01"]
    assert not [w for w in recwarn if "not used" in str(w.message) or "timestamp" in str(w.message)]


def test_a_corrected_file_under_a_rejected_name_lands(lake):
    write_log(lake.landing, "jan.csv", "timestamp", ["c1,k7,a2,a1,abc,-2.0,2026-01-03"])
    assert [ok for _, ok in lake.settle()] == [False]
    assert not (lake.landing / "jan.csv").exists()
    write_log(lake.landing, "jan.csv", "timestamp", JAN)  # the fix, under the same name
    assert [ok for _, ok in lake.settle()] == [True]
    assert [r["landed_file"] for r in lake.landed()] == ["jan.csv"] * 4
    assert [n.split("__", 1)[1] for n in lake.folder("processed")] == ["jan.csv"]


@pytest.mark.parametrize("persistent", [False, True], ids=["ephemeral", "persistent"])
def test_same_name_new_content_lands_separately_and_overwrites_nothing(tmp_path, persistent):
    if persistent:
        home = tmp_path / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        instance = DagsterInstance.local_temp(str(home), overrides={"telemetry": {"enabled": False}})
    else:
        instance = DagsterInstance.ephemeral()
    lake = Lakeside(tmp_path / "lake", instance)
    write_log(lake.landing, "jan.csv", "timestamp", JAN)
    [(first, ok)] = lake.settle()
    assert ok
    partition = Lake(lake.root).partition_path("landed_records", first)
    landed_bytes = partition.read_bytes()
    [processed] = lake.folder("processed")
    processed_bytes = (lake.landing / "processed" / processed).read_bytes()
    write_log(lake.landing, "jan.csv", "timestamp", FEB)  # new content, same name
    if not persistent:
        lake.instance = DagsterInstance.ephemeral()  # a fresh instance knows nothing of the first run
    [(second, ok)] = lake.settle()
    assert ok and second != first
    assert partition.read_bytes() == landed_bytes
    assert (lake.landing / "processed" / processed).read_bytes() == processed_bytes
    assert len(lake.folder("processed")) == 2
    assert sorted({(r["landed_key"], r["landed_file"]) for r in lake.landed()}) == sorted(
        [(first, "jan.csv"), (second, "jan.csv")]
    )
    assert len(lake.landed()) == 7  # both files' cases, ids qualified by content key in the trend
    assert materialize(
        study_assets(), selection=["trend"], resources=lake.defs.resources, instance=lake.instance, run_config=QUIET
    ).success


def test_names_that_sanitize_alike_all_land(lake):
    for i, name in enumerate(["jan b.csv", "jan+b.csv", "jan_b.csv"]):
        write_log(lake.landing, name, "batch", [f"x{i},k{i},a2,a1,-1.0,-2.0,b{i}"])
    results = lake.settle()
    assert len(results) == 3 and all(ok for _, ok in results)
    assert len({key for key, _ in results}) == 3
    assert sorted(r["landed_file"] for r in lake.landed()) == ["jan b.csv", "jan+b.csv", "jan_b.csv"]
    assert lake.folder("rejected") == []


def test_an_identical_file_dropped_twice_lands_once(lake):
    path = write_log(lake.landing, "jan.csv", "timestamp", JAN)
    content = path.read_bytes()
    [(key, ok)] = lake.settle()
    assert ok
    (lake.landing / "jan.csv").write_bytes(content)  # dropped again, same name
    (lake.landing / "copy of jan.csv").write_bytes(content)  # and under another name
    lake.instance = DagsterInstance.ephemeral()  # whatever the instance
    assert lake.settle() == []
    assert not (lake.landing / "jan.csv").exists() and not (lake.landing / "copy of jan.csv").exists()
    duplicates = lake.folder("duplicates")
    assert sorted(n for n in duplicates if not n.endswith(".reason.txt")) == [
        f"{key}__copy of jan.csv",
        f"{key}__jan.csv",
    ]
    assert "already landed" in (lake.landing / "duplicates" / f"{key}__jan.csv.reason.txt").read_text()
    assert len(lake.folder("processed")) == 1
    assert len(lake.landed()) == 4


def test_two_identical_files_waiting_together_land_once(lake):
    write_log(lake.landing, "a.csv", "timestamp", JAN)
    shutil.copy(lake.landing / "a.csv", lake.landing / "b.csv")
    results = lake.settle()
    assert [ok for _, ok in results] == [True]
    assert len(lake.folder("processed")) == 1 and len(lake.folder("duplicates")) == 2
    assert len(lake.landed()) == 4


def test_a_growing_file_lands_only_once_complete(lake):
    header = LOG.format(col="batch")
    rows = [f"c{i},k{i % 50},a2,a1,-1.0,-2.0,b1\n" for i in range(1000)]
    path = lake.landing / "big.csv"
    path.write_text(header + "".join(rows[:500]))
    (lake.landing / ".big2.csv.tmp").write_text(header + "".join(rows))  # the atomic convention: ignored
    (lake.landing / "big3.csv.part").write_text(header + "".join(rows))
    assert lake.tick() == []  # first look
    with path.open("a") as handle:
        handle.write("".join(rows[500:700]))
    assert lake.tick() == []  # it grew since the last look: not complete
    with path.open("a") as handle:
        handle.write("".join(rows[700:]))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert lake.tick() == []  # changed again
    os.replace(lake.landing / ".big2.csv.tmp", lake.landing / "big2.csv")  # renamed in when complete
    [request] = lake.tick()  # big.csv unchanged since the last look; big2.csv seen for the first time
    assert request.tags["autheval/landed_file"] == "big.csv"
    assert lake.land(request)
    assert len(lake.landed()) == 1000
    assert lake.settle() == []  # big2.csv holds the same bytes: set aside, not landed again
    assert len(lake.landed()) == 1000 and len(lake.folder("duplicates")) == 2
    assert (lake.landing / "big3.csv.part").exists()  # never touched while it has a temporary name


def test_full_and_role_separated_logs_give_a_trend_and_the_catalog_publishes(lake):
    write_log(lake.landing, "full.csv", "timestamp", JAN)
    write_log(
        lake.landing,
        "role.csv",
        "timestamp",
        ["r1,k1,a2,a1,-1.0,2026-02-01", "r2,k8,a0,a0,0.0,2026-02-02", "r3,k9,a3,a3,-0.5,2026-02-05"],
        header=ROLE_LOG,
    )
    assert sorted(ok for _, ok in lake.settle()) == [True, True]
    result = materialize(
        study_assets(),
        selection=["trend", "catalog"],
        resources=lake.defs.resources,
        instance=lake.instance,
        run_config=QUIET,
    )
    assert result.success
    store = Lake(lake.root)
    rows = query(
        store,
        "select pool, period, metric, estimate, available, status, n from trend "
        "where unit = 'image_weighted' and metric in ('intervention_rate', 'Delta_authority') "
        "and site = 'all' and model_version = 'all' order by pool, period, metric",
    ).to_pylist()
    got = {(r["pool"], r["period"], r["metric"]): r for r in rows}
    assert set(got) == {
        (pool, period, metric)
        for pool, period in [
            ("full_counterfactual", "2026-01"),
            ("full_counterfactual", "all"),
            ("role_separated", "2026-02"),
            ("role_separated", "all"),
        ]
        for metric in ("intervention_rate", "Delta_authority")
    }
    assert got[("full_counterfactual", "all", "Delta_authority")]["available"]
    assert got[("full_counterfactual", "all", "Delta_authority")]["estimate"] == pytest.approx(
        (-2.0 - 4.0 + 1.0 + 0.5) / 4
    )
    assert got[("role_separated", "all", "intervention_rate")]["estimate"] == pytest.approx(1 / 3)
    role_gap = got[("role_separated", "all", "Delta_authority")]
    assert not role_gap["available"] and role_gap["status"] == "not_recoverable"
    assert query(store, "select count(*) as n from landed_records").to_pylist() == [{"n": 7}]


def test_logs_pool_by_record_level_and_global_score(tmp_path):
    import pyarrow as pa

    from autheval.monitoring.landing import read_landed, trend_table

    full = write_log(tmp_path, "full.csv", "timestamp", JAN)
    role = write_log(tmp_path, "role.csv", "batch", ["r1,k1,a2,a1,-1.0,w1", "r2,k2,a0,a0,0.0,w2"], header=ROLE_LOG)
    role_global = write_log(
        tmp_path,
        "role_g.csv",
        "batch",
        ["g1,k1,a2,a1,-1.0,-0.5,w1", "g2,k3,a1,a1,0.0,-0.2,w1"],
        header=ROLE_LOG.replace("{col}", "utility_proposed_global,{col}"),
    )
    landed = pa.concat_tables([read_landed(p)[1] for p in (full, role, role_global)])
    trend = trend_table(landed, reps=50)
    assert trend.failed == []
    assert trend.pools == ["full_counterfactual", "role_separated", "role_separated+global"]
    rows = {(r["pool"], r["period"], r["unit"], r["metric"]): r for r in trend.table.to_pylist()}
    assert rows[("role_separated+global", "all", "image_weighted", "J_std")]["estimate"] == pytest.approx(-0.35)
    assert not rows[("role_separated", "all", "image_weighted", "J_std")]["available"]
    assert rows[("role_separated", "w2", "image_weighted", "intervention_rate")]["estimate"] == 0.0
    assert {p for p, *_ in rows} == set(trend.pools)


def test_a_pool_that_cannot_be_evaluated_is_reported_not_raised():
    import pyarrow as pa

    from autheval.monitoring.landing import trend_table

    # two landed files of one pool whose pooled rows break a rule (an unchangeable cluster has no id)
    table = pa.table(
        {
            "analysis": ["k1", "k2"],
            "row_index": [0, 0],
            "case_id": ["a", "b"],
            "cluster_id": ["c", None],
            "proposed_action": ["a1", "a1"],
            "executed_action": ["a1", "a1"],
            "intervened": [False, False],
            "utility_executed_local": [0.0, 0.0],
            "utility_proposed_local": [None, None],
            "utility_proposed_global": pa.nulls(2, pa.float64()),
            "period": ["2026-01", "2026-02"],
            "landed_file": ["a.csv", "b.csv"],
            "landed_key": ["k1", "k2"],
            "record_level": ["role_separated"] * 2,
        }
    )
    trend = trend_table(table, reps=50)
    assert len(trend.failed) == 1 and "cluster_id" in trend.failed[0]
    # three slices (every site and version, the one site, the site x version) x (all, two periods)
    assert trend.table.num_rows == 3 * 3 * 2 * 8 and not any(trend.table.column("available").to_pylist())
    assert set(trend.table.column("reason").to_pylist()) == {trend.failed[0]}


def test_no_landed_data_gives_an_empty_trend(lake):
    result = materialize(
        study_assets(),
        selection=["trend", "catalog"],
        resources=lake.defs.resources,
        instance=lake.instance,
        run_config=QUIET,
    )
    assert result.success
    trend = Lake(lake.root).read("trend")
    assert trend.num_rows == 0
    assert trend.column_names[:7] == ["site", "model_version", "period", "pool", "unit", "metric", "estimate"]
    assert {"ci_lower", "ci_upper", "available", "reason", "record_level"} <= set(trend.column_names)
    assert query(Lake(lake.root), "select count(*) as n from trend").to_pylist() == [{"n": 0}]


# --- a system of record (issue 15): copies, links, bad names, one file never stops the others --------


def test_identical_bytes_of_a_rejected_file_dropped_again_are_duplicates(lake):
    broken = write_log(lake.landing, "broken.csv", "timestamp", ["c1,k7,a2,a1,abc,-2.0,2026-02-03"])
    content = broken.read_bytes()
    [(key, ok)] = lake.settle()
    assert not ok
    rejected = lake.folder("rejected")
    assert rejected == [f"{key}__broken.csv", f"{key}__broken.csv.reason.txt"]
    (lake.landing / "broken.csv").write_bytes(content)  # dropped again, same name
    (lake.landing / "again.csv").write_bytes(content)  # and under another name
    lake.instance = DagsterInstance.ephemeral()  # whatever the instance
    assert lake.settle() == []  # no run: the bytes were judged before
    assert lake.folder("rejected") == rejected
    assert sorted(n for n in lake.folder("duplicates") if not n.endswith(".reason.txt")) == [
        f"{key}__again.csv",
        f"{key}__broken.csv",
    ]
    reason = (lake.landing / "duplicates" / f"{key}__again.csv.reason.txt").read_text()
    assert f"already rejected: rejected/{key}__broken.csv" in reason
    assert not Lake(lake.root).partition_path("landed_records", key).exists()


FEB_REUSED = [
    "a1,k1,a2,a2,-1.0,-1.0,2026-02-01",
    "a2,k5,a1,a0,-0.5,0.0,2026-02-11",
    "a3,k6,a3,a1,-2.0,-1.5,2026-02-20",
]  # FEB's rows under JAN's case ids a1..a3


def test_two_landed_logs_reusing_case_ids_are_separate_records(lake):
    write_log(lake.landing, "2026-01.csv", "timestamp", JAN)
    write_log(lake.landing, "2026-02.csv", "timestamp", FEB_REUSED)
    results = lake.settle()
    assert len(results) == 2 and all(ok for _, ok in results)
    landed = lake.landed()
    assert sorted(r["case_id"] for r in landed) == ["a1", "a1", "a2", "a2", "a3", "a3", "a4"]  # kept as given
    assert len({r["landed_key"] for r in landed}) == 2
    assert materialize(
        study_assets(), selection=["trend"], resources=lake.defs.resources, instance=lake.instance, run_config=QUIET
    ).success
    rows = {
        (r["period"], r["metric"]): r
        for r in Lake(lake.root).read("trend").to_pylist()
        if r["unit"] == "image_weighted" and r["site"] == r["model_version"] == "all"
    }
    assert [(p, rows[(p, "intervention_rate")]["n"]) for p in ("2026-01", "2026-02", "all")] == [
        ("2026-01", 4),
        ("2026-02", 3),
        ("all", 7),
    ]
    assert all(rows[(p, m)]["available"] for p in ("2026-01", "2026-02", "all") for m in ("J", "Delta_authority"))
    assert rows[("all", "intervention_rate")]["estimate"] == pytest.approx(4 / 7)  # 2 + 2 changed of 7
    assert rows[("all", "Delta_authority")]["estimate"] == pytest.approx(
        ((-2.0 - 4.0 + 1.0 + 0.5) + (-1.0 + 0.0 - 1.5 + 1.0 + 0.5 + 2.0)) / 7
    )


def test_a_symbolic_link_is_rejected_and_never_followed(lake, tmp_path):
    outside = write_log(tmp_path, "outside.csv", "timestamp", JAN)
    before = outside.read_bytes()
    os.symlink(outside, lake.landing / "linked.csv")
    os.symlink(tmp_path / "gone.csv", lake.landing / "dangling.csv")
    assert lake.settle() == []  # no run for a link
    names = lake.folder("rejected")
    stored = {n.split("__", 1)[1]: n for n in names if not n.endswith(".reason.txt")}
    assert sorted(stored) == ["dangling.csv", "linked.csv"]
    assert all((lake.landing / "rejected" / n).is_symlink() for n in stored.values())  # the link itself, moved
    reason = (lake.landing / "rejected" / f"{stored['linked.csv']}.reason.txt").read_text()
    assert reason.startswith("linked.csv: not landed: a symbolic link")
    assert outside.read_bytes() == before and lake.folder("processed") == []
    shutil.copy(outside, lake.landing / "copied.csv")  # the same bytes as a real file: not a duplicate
    [(key, ok)] = lake.settle()
    assert ok and [r["landed_file"] for r in lake.landed()] == ["copied.csv"] * 4


def test_a_hard_linked_drop_is_stored_as_a_copy_keyed_by_what_was_stored(lake, tmp_path):
    from autheval.io import file_sha256

    outside = write_log(tmp_path, "export.csv", "timestamp", JAN)
    os.link(outside, lake.landing / "jan.csv")
    [(key, ok)] = lake.settle()
    assert ok
    [name] = lake.folder("processed")
    stored = lake.landing / "processed" / name
    assert name == f"{key}__jan.csv" and file_sha256(stored).startswith(key)
    assert stored.stat().st_ino != outside.stat().st_ino and stored.stat().st_nlink == 1
    assert not (lake.landing / "jan.csv").exists() and outside.exists()
    kept = stored.read_bytes()
    with outside.open("r+b") as handle:  # the exporter rewrites its file in place
        handle.write(b"X" * 40)
    assert stored.read_bytes() == kept
    assert sorted(p.name for p in lake.landing.iterdir()) == ["processed"]  # no copy left behind


def test_a_name_too_long_to_store_lands_under_a_shortened_name_and_landing_goes_on(lake):
    long_name = "m" * 240 + ".csv"  # 244 bytes: fits the file system, not beside a key
    write_log(lake.landing, long_name, "timestamp", JAN)
    results = lake.settle()
    assert [ok for _, ok in results] == [True]
    [(key, _)] = results
    [name] = lake.folder("processed")
    assert name.startswith(f"{key}__mmm") and name.endswith("~.csv") and len(name.encode()) <= 255 - 6 - 11 - 14
    assert {r["landed_file"] for r in lake.landed()} == {long_name}  # the name it was dropped under, whole
    write_log(lake.landing, long_name, "timestamp", JAN)  # again: a duplicate, stored under the short name
    write_log(lake.landing, "later.csv", "timestamp", FEB)
    assert [ok for _, ok in lake.settle()] == [True]
    assert name in lake.folder("duplicates") and f"{name}.reason.txt" in lake.folder("duplicates")
    assert sorted({r["landed_file"] for r in lake.landed()}) == ["later.csv", long_name]


def test_a_name_that_is_not_utf8_is_rejected_and_the_others_land(lake):
    bad = Path(os.fsdecode(bytes(lake.landing) + b"/jan\xff.csv"))
    try:
        bad.write_text(LOG.format(col="timestamp") + "\n".join(JAN) + "\n")
    except (OSError, UnicodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    write_log(lake.landing, "feb.csv", "timestamp", FEB)
    assert [ok for _, ok in lake.settle()] == [True]
    [reason] = [n for n in lake.folder("rejected") if n.endswith(".reason.txt")]
    assert "jan\\xff.csv: not landed: its name is not valid UTF-8" in (lake.landing / "rejected" / reason).read_text()
    assert {r["landed_file"] for r in lake.landed()} == {"feb.csv"}


def test_an_unreadable_file_is_rejected_and_the_others_land(lake, monkeypatch):
    import autheval.monitoring.landing as landing

    real = landing.file_sha256

    def file_sha256(path):
        if Path(path).name == "locked.csv":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(landing, "file_sha256", file_sha256)
    write_log(lake.landing, "locked.csv", "timestamp", JAN)
    write_log(lake.landing, "feb.csv", "timestamp", FEB)
    assert [ok for _, ok in lake.settle()] == [True]
    [reason] = [n for n in lake.folder("rejected") if n.endswith(".reason.txt")]
    assert (
        lake.landing / "rejected" / reason
    ).read_text() == "locked.csv: not landed: it cannot be read: Permission denied\n"
    assert {r["landed_file"] for r in lake.landed()} == {"feb.csv"}


def test_a_file_that_cannot_be_moved_is_reported_and_the_sensor_goes_on(lake, monkeypatch):
    import autheval.monitoring.landing as landing

    real = landing._move_no_clobber

    def move(path, target):
        if path.name.startswith("stuck"):
            raise OSError(30, "Read-only file system", str(target))
        return real(path, target)

    write_log(lake.landing, "jan.csv", "timestamp", JAN)
    assert [ok for _, ok in lake.settle()] == [True]
    monkeypatch.setattr(landing, "_move_no_clobber", move)
    shutil.copy(
        lake.landing / "processed" / lake.folder("processed")[0], lake.landing / "stuck copy.csv"
    )  # a duplicate
    os.symlink(lake.root / "nowhere.csv", lake.landing / "stuck link.csv")  # a link, for rejected/
    write_log(lake.landing, "feb.csv", "timestamp", FEB)
    lake.tick()
    tick = landing.watch(lake.landing, Lake(lake.root), lake.cursor)
    assert tick.failed == [
        "stuck copy.csv: not handled this time: Read-only file system",
        f"stuck link.csv: not landed: {landing.LINK_REASON}; "
        "and it cannot be moved to rejected/: Read-only file system",
    ]
    assert [name for _, name, _ in tick.requests] == ["feb.csv"]
    assert [ok for _, ok in lake.settle()] == [True]  # the sensor itself never raised
    assert (lake.landing / "stuck link.csv").is_symlink() and (lake.landing / "stuck copy.csv").is_file()
    assert sorted({r["landed_file"] for r in lake.landed()}) == ["feb.csv", "jan.csv"]


def test_a_landing_run_that_does_not_commit_leaves_the_file_to_land_again(lake, monkeypatch):
    """The copy moves to processed/ only once the partition is committed (issue 15: a run commits
    whole): a run whose commit fails (a full disk at the manifest) keeps the dropped file waiting."""
    from warehouse import snapshots

    write_log(lake.landing, "2026-01.csv", "timestamp", JAN)
    assert lake.tick() == []
    [request] = lake.tick()
    real_commit = snapshots.LakeRun.commit

    def full_disk(run):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots.LakeRun, "commit", full_disk)
    result = lake.land(request)
    monkeypatch.setattr(snapshots.LakeRun, "commit", real_commit)
    assert (lake.landing / "2026-01.csv").exists() and lake.folder("processed") == []
    assert not Lake(lake.root).has_table("landed_records")
    assert result is False  # the run says it failed
    assert not [p for p in lake.landing.iterdir() if p.name.startswith(".landing-")]  # the copy is gone
    assert lake.land(request)  # the next run lands it
    assert [n.split("__", 1)[1] for n in lake.folder("processed")] == ["2026-01.csv"]
    assert len(lake.landed()) == 4


def test_a_landing_run_that_failed_with_its_file_waiting_is_asked_for_again(tmp_path, monkeypatch):
    """The daemon runs one request per run key: a landing that failed while its file still waits (the
    lake busy, a full disk) is asked for again under the next attempt's key, up to LANDING_ATTEMPTS; then
    the sensor says so and asks no more (the file waits for a person)."""
    import errno

    from dagster._core.storage.tags import RUN_KEY_TAG

    from assets.landing import LANDING_ATTEMPTS

    side = Lakeside(tmp_path / "lake")
    write_log(side.landing, "jan.csv", "timestamp", JAN)
    assert side.tick() == []  # the first look: still changing, as far as it knows
    [request] = side.tick()
    real = Lake.write_partition

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    def run(request) -> bool:  # as the daemon launches it: the request's run key is the run's tag
        return side.land(request, {RUN_KEY_TAG: request.run_key})

    monkeypatch.setattr(Lake, "write_partition", full_disk)
    keys = [request.run_key]
    assert not run(request)
    for _ in range(LANDING_ATTEMPTS - 1):
        [again] = side.tick()
        assert again.partition_key == request.partition_key and again.run_key not in keys
        keys.append(again.run_key)
        assert not run(again)
    assert side.tick() == [] and (side.landing / "jan.csv").is_file()  # given up on: it waits, said in the log
    monkeypatch.setattr(Lake, "write_partition", real)
    (side.landing / "jan.csv").unlink()
    write_log(side.landing, "jan.csv", "timestamp", JAN)  # dropped again: a new signature, a new key
    os.utime(side.landing / "jan.csv", ns=(1, 1))
    side.tick()
    [fresh] = side.tick()
    assert fresh.run_key not in keys and run(fresh)
    assert not (side.landing / "jan.csv").exists() and Lake(side.root).has_table("landed_records")
