"""Runs started outside the UI are recorded where the UI looks (issue 28, item 2.5): `monitor run` from
cron and `autheval demo` record their Dagster runs, materializations and check results in the lake's
persistent instance ($DAGSTER_HOME, else <lake>/.dagster_home; dagster_project.definitions.lake_instance),
the one `autheval ui` serves; telemetry and the "Join the Dagster community" pop-up are off; a bad
dagster.yaml there is one line, exit 2, before anything lands. The browser's view of it is in test_ui.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from dagster import AssetKey, DagsterEventType, DagsterInstance

from assets.monitor import MONITOR, NO_ALERTS
from assets.trend import recurring_evaluation_job
from autheval.errors import RecordError
from autheval.monitoring.deployment_sim import DeploymentModel, write_deployment
from dagster_project.definitions import (
    INSTANCE_SETTINGS,
    LAKE_DAGSTER_HOME,
    instance_home,
    instance_yaml,
    lake_instance,
    project_instance,
)
from tests.conftest import ROOT, land_and_monitor, run_cli
from tests.test_ui import free_port
from warehouse.lake import Lake

OFF = {"enabled": False}


@pytest.fixture(autouse=True)
def no_dagster_home(monkeypatch):
    """Each test says where DAGSTER_HOME points; by default it is unset (the lake's own instance)."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)


def open_files_under(folder: Path) -> list[str]:
    """The files of `folder` this process holds open (Linux: /proc/self/fd)."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            held.append(target)
    return held


def test_a_monitor_run_is_recorded_in_the_lakes_instance(tmp_path):
    lake, code = land_and_monitor(tmp_path, DeploymentModel(sites=1, months=2, clusters_per_month=30))
    assert code in (0, 3)
    home = lake / LAKE_DAGSTER_HOME
    if Path("/proc/self/fd").is_dir():
        assert not open_files_under(home), "the pass left the instance's sqlite files open"
    instance = DagsterInstance.from_config(str(home))
    try:
        runs = instance.get_runs()
        assert sorted(r.job_name for r in runs) == ["landed_logs_job"] * 2 + [recurring_evaluation_job.name]
        assert all(r.is_success for r in runs)
        [recurring] = [r for r in runs if r.job_name == recurring_evaluation_job.name]
        materialized = instance.get_latest_materialization_event(AssetKey(MONITOR))
        assert materialized is not None and materialized.run_id == recurring.run_id
        evaluations = [
            r.event_log_entry.dagster_event.event_specific_data
            for r in instance.get_records_for_run(
                recurring.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION
            ).records
        ]
        assert [(e.asset_key, e.check_name) for e in evaluations if e.check_name == NO_ALERTS] == [
            (AssetKey(MONITOR), NO_ALERTS)
        ]
        assert len(instance.get_dynamic_partitions("landed_logs")) == 2  # the partitions the UI lists
    finally:
        instance.dispose()


def test_the_home_is_dagster_home_else_the_lakes_own(tmp_path, monkeypatch):
    lake = tmp_path / "lake"
    assert instance_home(lake) == (lake / LAKE_DAGSTER_HOME).resolve()
    declared = tmp_path / "declared_home"
    monkeypatch.setenv("DAGSTER_HOME", str(declared))
    assert instance_home(lake) == declared.resolve()
    assert (declared / "dagster.yaml").read_text() == instance_yaml()
    mine = "telemetry:\n  enabled: false\n"  # a dagster.yaml the user wrote is kept
    (declared / "dagster.yaml").write_text(mine)
    instance_home(lake)
    assert (declared / "dagster.yaml").read_text() == mine
    monkeypatch.delenv("DAGSTER_HOME")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(lake / LAKE_DAGSTER_HOME)
    (lake / LAKE_DAGSTER_HOME).symlink_to(elsewhere)  # like the lake's state files, never followed out of it
    with pytest.raises(RecordError, match=r"\.dagster_home: is a link, not a file of the lake's Dagster home"):
        instance_home(lake)
    assert not list(elsewhere.iterdir())
    bucket = Lake("s3://bucket/lake?region=us-east-1&endpoint_override=127.0.0.1:9&scheme=http")  # never reached
    with pytest.raises(RecordError, match=r"^\$DAGSTER_HOME: is unset and the lake s3://bucket/lake is in an object"):
        instance_home(bucket)


def test_telemetry_and_the_community_pop_up_are_off(tmp_path):
    assert INSTANCE_SETTINGS["nux"] == OFF and INSTANCE_SETTINGS["telemetry"] == OFF
    ephemeral = project_instance()
    assert ephemeral.get_settings("nux") == OFF and ephemeral.get_settings("telemetry") == OFF
    written = yaml.safe_load((instance_home(tmp_path / "lake") / "dagster.yaml").read_text())
    assert written == INSTANCE_SETTINGS
    with lake_instance(tmp_path / "lake") as instance:
        assert instance.is_persistent
        assert not instance.nux_enabled and not instance.telemetry_enabled
    # `dagster dev` from the repository (no DAGSTER_HOME) reads ./dagster.yaml: the same settings
    assert yaml.safe_load((ROOT / "dagster.yaml").read_text()) == INSTANCE_SETTINGS


def test_the_daemons_runs_on_a_lake_wait_in_the_queue_one_at_a_time(tmp_path):
    """The lake admits one writer: the instance queues the runs the daemon launches (sensor, schedule, UI)
    one at a time, so a landing run waits for the schedule's instead of failing on the lake's lock. A
    dagster.yaml an earlier version wrote (no run limit) is rewritten; one edited by hand is kept."""
    from dagster_project.definitions import EARLIER_INSTANCE_SETTINGS

    with lake_instance(tmp_path / "lake") as instance:
        queue = instance.get_concurrency_config().run_queue_config  # what the run queue daemon reads
        assert queue is not None and queue.max_concurrent_runs == 1
    config = instance_home(tmp_path / "lake") / "dagster.yaml"
    for earlier in EARLIER_INSTANCE_SETTINGS:
        config.write_text(instance_yaml(settings=earlier))
        instance_home(tmp_path / "lake")
        assert config.read_text() == instance_yaml()
    config.write_text(instance_yaml(settings=EARLIER_INSTANCE_SETTINGS[0]) + "# ours\n")
    instance_home(tmp_path / "lake")
    assert config.read_text().endswith("# ours\n")


def drop_logs(root: Path) -> list[str]:
    """A lake folder whose landing holds two monthly logs; their names."""
    write_deployment(DeploymentModel(sites=1, months=2, clusters_per_month=20), root / "landing")
    (root / "landing" / "deployment.json").unlink()
    return sorted(p.name for p in (root / "landing").iterdir())


BAD_HOMES = {
    "broken YAML": ("telemetry: [\n", r"dagster\.yaml: not valid YAML at line 2"),
    "an unknown setting": ("telemetry:\n  enabled: false\nbogus: 1\n", r'unexpected config entry "bogus"'),
    "a wrong type": ("telemetry: yes\n", r"root:telemetry must be dict"),
    "a list": ("- telemetry\n", r"dagster\.yaml: must be a mapping of Dagster instance settings"),
    "a folder": (None, r"dagster\.yaml: cannot be read \(Is a directory\)"),
    "postgres storage without its driver": (
        'storage:\n  postgres:\n    postgres_url: "postgresql+pg8000://u:p@127.0.0.1:1/x"\n',
        r"dagster\.yaml: names storage whose driver is not installed",
    ),
    "over a megabyte": ("#" * 1_000_001 + "\n", r"dagster\.yaml: is over 1,000,000 bytes"),
}


@pytest.mark.parametrize("text, rule", BAD_HOMES.values(), ids=BAD_HOMES.keys())
def test_a_bad_dagster_yaml_is_one_line_before_anything_lands(tmp_path, monkeypatch, text, rule):
    from dagster_project.monitor_run import monitor_run

    root = tmp_path / "lake"
    waiting = drop_logs(root)
    home = tmp_path / "home"
    home.mkdir()
    if text is None:
        (home / "dagster.yaml").mkdir()
    else:
        (home / "dagster.yaml").write_text(text)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with pytest.raises(RecordError, match=rule) as err:
        monitor_run(root, out=lambda line: None, settle_seconds=0)
    assert str(err.value).startswith(f"{(home / 'dagster.yaml').resolve()}: ") and "\n" not in str(err.value)
    assert sorted(p.name for p in (root / "landing").iterdir()) == waiting  # nothing landed or set aside
    assert not Lake(root).has_table("landed_records")


def test_every_command_refuses_a_bad_dagster_home_with_exit_2(tmp_path):
    """The command line: monitor run, demo and ui each say one line naming the dagster.yaml (or the
    DAGSTER_HOME that is a file) and exit 2; the UI starts no server."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry: [\n")
    not_a_folder = tmp_path / "a_file"
    not_a_folder.write_text("")
    lake = str(tmp_path / "lake")
    runs = [
        (home, ("monitor", "run", "--lake", lake), "dagster.yaml: not valid YAML"),
        (home, ("demo", "--lake", lake, "--reps", "200"), "dagster.yaml: not valid YAML"),
        (home, ("ui", "--port", str(free_port()), "--lake", lake), "dagster.yaml: not valid YAML"),
        (not_a_folder, ("monitor", "run", "--lake", lake), "cannot hold the Dagster instance"),
    ]
    for declared, args, said in runs:
        result = run_cli(*args, env={**os.environ, "DAGSTER_HOME": str(declared)}, timeout=120)
        assert result.returncode == 2, (args, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and str(declared.resolve()) in lines[0], (args, lines)
        assert "Dagster UI on" not in result.stderr
    assert not Lake(tmp_path / "lake").has_table("monitor")


def test_the_demo_command_records_its_runs_in_the_lakes_instance(tmp_path, monkeypatch):
    """`autheval demo` (its stages cut to the recurring step, as a demo of no stages runs): the runs are
    in <lake>/.dagster_home; the instance is disposed when the command ends."""
    import dagster_project.demo
    from autheval.cli.main import main

    monkeypatch.setattr(dagster_project.demo, "REFERENCE_STAGES", ())
    lake = tmp_path / "lake"
    assert main(["demo", "--lake", str(lake), "--reps", "200"]) == 0
    home = lake / LAKE_DAGSTER_HOME
    if Path("/proc/self/fd").is_dir():
        assert not open_files_under(home)
    instance = DagsterInstance.from_config(str(home))
    try:
        assert len(instance.get_runs()) == 1
        assert instance.get_latest_materialization_event(AssetKey(MONITOR)) is not None
    finally:
        instance.dispose()


def test_verify_re_runs_a_monitor_receipt_without_recording_into_the_users_dagster_home(tmp_path, monkeypatch):
    from autheval.reporting.receipt import verification_lines, verify

    lake, code = land_and_monitor(tmp_path, DeploymentModel(sites=1, months=1))
    assert code == 0
    home = tmp_path / "ui-home"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_yaml())
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # the user's UI instance, set in their shell
    (tmp_path / "verify").mkdir()
    result = verify(lake / "monitor" / "receipt.json", workdir=tmp_path / "verify")
    assert result.identical, verification_lines(result)
    with DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs() == []  # the re-run's lake is temporary: its runs are not the user's


@pytest.mark.parametrize(
    "declared, said",
    [
        (" home", "no surrounding spaces or control characters"),
        ("ho\nme", "no surrounding spaces"),
        ("~no-such-user-x/h", "is not a usable folder"),
    ],
    ids=["spaces", "newline", "unknown-user"],
)
def test_a_dagster_home_that_is_no_folder_name_is_one_line(tmp_path, monkeypatch, declared, said):
    monkeypatch.setenv("DAGSTER_HOME", declared)
    with pytest.raises(RecordError, match=said) as err:
        instance_home(tmp_path / "lake")
    assert str(err.value).startswith("$DAGSTER_HOME: ") and "\n" not in str(err.value)


def test_a_dagster_home_link_loop_is_one_line(tmp_path, monkeypatch):
    loop = tmp_path / "loopy"
    loop.symlink_to("loopy")
    monkeypatch.setenv("DAGSTER_HOME", str(loop))
    with pytest.raises(RecordError, match="is not a usable folder"):
        instance_home(tmp_path / "lake")


def test_a_link_inside_the_lakes_own_dagster_home_is_not_followed_out_of_the_lake(tmp_path):
    lake = tmp_path / "lake"
    home = instance_home(lake)  # made, with its dagster.yaml
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / "storage").symlink_to(elsewhere)
    with pytest.raises(RecordError, match="is a link, not a file of the lake's Dagster home") as err:
        instance_home(lake)
    assert str(err.value).startswith(str(home / "storage"))
