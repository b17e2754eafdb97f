"""The Dagster definitions of the lake: assets, checks, jobs, the landing and alert sensors, the schedule.

`dagster dev -m dagster_project` (or `autheval ui`) serves them; `autheval demo` materializes them
in-process. The lake root comes from AUTHEVAL_LAKE (default warehouse/lake), through the resources'
EnvVar fields.

The instance settings live here too (INSTANCE_SETTINGS: the `duckdb_catalog` pool, limit 1, so one
catalog publish runs at a time; telemetry and the UI's "Join the Dagster community" pop-up off). A lake's
runs are recorded in one persistent instance, `lake_instance()`, in `instance_home()`: $DAGSTER_HOME,
else <lake>/.dagster_home, whose dagster.yaml is `instance_yaml()`. `autheval ui` serves that home and
`autheval monitor run` (cron) and `autheval demo` record into it, so the UI shows what they did. Tests
run on `project_instance()`, in memory; ./dagster.yaml (what `dagster dev` run from the repository uses
when DAGSTER_HOME is unset) is `instance_yaml()` too."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dagster import (
    AssetSelection,
    DagsterInstance,
    Definitions,
    define_asset_job,
    in_process_executor,
    load_asset_checks_from_package_module,
    load_assets_from_package_module,
)

import assets
from assets.catalog import catalog_asset
from assets.landing import landed_logs_job, landing_sensor
from assets.monitor import monitor_alert_sensor
from assets.resources import (
    PG_URL_ENV,
    DeclaredRules,
    ModelsResource,
    ProtocolResource,
    SourceResource,
    dagster_pg_url,
    default_engine,
    default_models,
    default_notifier,
    default_protocol,
    default_source,
    lake_resource,
)
from assets.site_exports import site_exports_job
from assets.trend import recurring_evaluation_job, recurring_evaluation_schedule
from autheval.errors import RecordError
from autheval.review.rules import RuleFile
from dagster_project.stages import COMMIT, JOBS
from warehouse.lake import Lake

# Concurrency pools and their limits: the catalog is published by one step at a time, in every run.
CATALOG_POOL = "duckdb_catalog"
POOL_LIMITS = {CATALOG_POOL: 1}
INSTANCE_SETTINGS = {
    "telemetry": {"enabled": False},
    "nux": {"enabled": False},  # no "Join the Dagster community" pop-up on the UI's first page
    # every pool of the project is limited to 1 (the only pool is the catalog's); POOL_LIMITS also
    # sets it by name on the instances this project builds. One run at a time: the lake admits one
    # writer, so the runs the daemon launches (the landing sensor's, the schedule's, a person's from the
    # UI) wait in the queue for the one before instead of failing on the lake's lock (a landing run that
    # failed so keeps its run key, and its log would not be requested again)
    "concurrency": {"pools": {"default_limit": min(POOL_LIMITS.values())}, "runs": {"max_concurrent_runs": 1}},
}
# the settings of earlier versions: a dagster.yaml this project wrote with them is rewritten, not kept
EARLIER_INSTANCE_SETTINGS = (
    {**INSTANCE_SETTINGS, "concurrency": {"pools": {"default_limit": min(POOL_LIMITS.values())}}},
)


# A team's server (docs/deploy.md): the instance's runs, event log and schedules in PostgreSQL. The file
# names the variable, never its value (Dagster reads it at start), so no password lands in the lake.
PG_STORAGE = {"postgres": {"postgres_url": {"env": PG_URL_ENV}}}


def instance_yaml(postgres: bool | None = None, settings: dict | None = None) -> str:
    """INSTANCE_SETTINGS (or `settings`) as a dagster.yaml; with `storage: postgres` when `postgres`
    (default: when $AUTHEVAL_DAGSTER_PG_URL is set), else Dagster's default, sqlite files in the
    instance's home."""
    import yaml

    if postgres is None:
        postgres = bool(os.environ.get(PG_URL_ENV))
    settings = INSTANCE_SETTINGS if settings is None else settings
    return yaml.safe_dump({**settings, "storage": PG_STORAGE} if postgres else settings, sort_keys=True)


def configure_instance(instance: DagsterInstance) -> DagsterInstance:
    """Set POOL_LIMITS on an instance (its pools then show these limits in the UI)."""
    for pool, limit in POOL_LIMITS.items():
        instance.event_log_storage.set_concurrency_slots(pool, limit)
    return instance


def project_instance() -> DagsterInstance:
    """An in-memory instance with the project's settings and pool limits (tests; nothing is recorded)."""
    return configure_instance(DagsterInstance.ephemeral(settings=INSTANCE_SETTINGS))


DAGSTER_HOME_ENV = "DAGSTER_HOME"
LAKE_DAGSTER_HOME = ".dagster_home"  # the lake's own instance, inside the lake, when $DAGSTER_HOME is unset


def instance_home(lake: Lake | str | os.PathLike) -> Path:
    """The Dagster home that records the runs on a lake (a Lake or its root): $DAGSTER_HOME, else
    <lake>/.dagster_home, made when missing and given a dagster.yaml from instance_yaml() when it has none
    (one it has is kept, unless it is one instance_yaml() wrote for the other storage). The one rule for
    `autheval ui` (which serves it) and the runs started outside the UI. An object-store lake has no local
    folder for it: $DAGSTER_HOME must name one (RecordError)."""
    from warehouse.atomic import atomic_write_text

    store = lake if isinstance(lake, Lake) else Lake(lake)
    declared = os.environ.get(DAGSTER_HOME_ENV)
    if not declared and not store.location.is_local:
        raise RecordError(
            f"${DAGSTER_HOME_ENV}",
            None,
            f"is unset and the lake {store.location.uri('').rstrip('/')} is in an object store; "
            "name a local folder for the Dagster instance",
        )
    if declared is not None and (declared != declared.strip() or any(c < " " or c == "\x7f" for c in declared)):
        raise RecordError(f"${DAGSTER_HOME_ENV}", None, f"{declared!r}: no surrounding spaces or control characters")
    own = Path(store.root) / LAKE_DAGSTER_HOME
    if not declared:  # as the lake's state files, never followed out of the lake: the home, nor what is in it
        links = [own] if own.is_symlink() else sorted(p for p in own.glob("*") if p.is_symlink())
        if links:
            raise RecordError(
                str(links[0]), None, "is a link, not a file of the lake's Dagster home; remove it or set $DAGSTER_HOME"
            )
    try:
        home = Path(declared or own).expanduser().resolve()
    except (RuntimeError, OSError) as err:  # a link loop, ~user of no such user
        raise RecordError(f"${DAGSTER_HOME_ENV}", None, f"{declared!r} is not a usable folder ({err})") from None
    config = home / "dagster.yaml"
    try:
        home.mkdir(parents=True, exist_ok=True)
        wanted = instance_yaml()
        # one this project wrote follows $AUTHEVAL_DAGSTER_PG_URL (set or unset); one edited by hand is kept
        if not config.exists() or (_read_text(config) in GENERATED_YAMLS and _read_text(config) != wanted):
            atomic_write_text(config, wanted)
    except OSError as err:
        what = f"${DAGSTER_HOME_ENV}={home}" if declared else str(home)
        raise RecordError(what, None, f"cannot hold the Dagster instance ({err.strerror or err})") from None
    return home


MAX_INSTANCE_YAML_BYTES = 1_000_000
GENERATED_YAMLS = frozenset(
    instance_yaml(postgres, settings)
    for postgres in (False, True)
    for settings in (INSTANCE_SETTINGS, *EARLIER_INSTANCE_SETTINGS)
)


def _read_text(path: Path) -> str | None:
    """`path`'s text, or None where it is not readable text (lake_instance names the fault)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@contextmanager
def lake_instance(lake: Lake | str | os.PathLike) -> Iterator[DagsterInstance]:
    """The persistent instance of instance_home(lake) (sqlite files there unless its dagster.yaml
    names other storage), with POOL_LIMITS, disposed on leaving so that no sqlite file stays open. A
    dagster.yaml that cannot be read, is not YAML or not an instance configuration: one line naming it.
    With $AUTHEVAL_DAGSTER_PG_URL set it is checked first (assets.resources.dagster_pg_url), and the
    database lost under the block (restarted, unreachable) is one line naming it (ConnectionError, exit 1);
    the sqlite files' storage failing (a full disk) is an OSError naming the home (one line, exit 1)."""
    from dagster import DagsterError
    from dagster._check import CheckError
    from sqlalchemy.exc import SQLAlchemyError

    from autheval.parse import load_yaml

    pg_url = dagster_pg_url()  # a bad $AUTHEVAL_DAGSTER_PG_URL: one line naming it, before the instance opens
    if pg_url:  # with its driver named, for this process and what it starts (the UI, the daemon)
        os.environ[PG_URL_ENV] = pg_url
    config = instance_home(lake) / "dagster.yaml"
    try:
        if config.stat().st_size > MAX_INSTANCE_YAML_BYTES:  # read whole before anything starts: kept small
            raise RecordError(
                str(config), None, f"is over {MAX_INSTANCE_YAML_BYTES:,} bytes; an instance setting is short"
            )
        text = config.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise RecordError(str(config), None, f"cannot be read ({getattr(err, 'strerror', None) or err})") from None
    settings = load_yaml(text, str(config), "a Dagster instance configuration")  # broken YAML: its line
    if settings is not None and not isinstance(settings, dict):
        raise RecordError(str(config), None, "must be a mapping of Dagster instance settings (e.g. telemetry: ...)")
    try:
        instance = DagsterInstance.from_config(str(config.parent))
    except ImportError as err:  # storage whose driver is not installed (postgres without the team extra)
        rule = f"names storage whose driver is not installed ({err}); install the team extra or use sqlite"
        raise RecordError(str(config), None, rule) from None
    except (DagsterError, CheckError, OSError, SQLAlchemyError) as err:
        rule = f"not a usable Dagster instance configuration: {_first_error(err)}"
        raise RecordError(f"${PG_URL_ENV}" if pg_url else str(config), None, rule) from None
    try:
        yield configure_instance(instance)
    except Exception as err:
        if type(err).__module__.split(".")[0] not in DATABASE_ERROR_MODULES:
            raise
        # the instance's storage failed under a run (the database restarted or unreachable, the sqlite
        # files' disk full): the run commits nothing (the lake keeps its last snapshot) and stops in one
        # line, exit 1, as for what the machine refuses
        cause = getattr(err, "__cause__", None) or err
        reason = " ".join(str(cause).split("[SQL:")[0].split())[:200] or type(err).__name__
        if pg_url:
            raise ConnectionError(
                f"${PG_URL_ENV}: the instance's database stopped answering during the run ({reason}); "
                "nothing of it was committed, run it again once the database is back"
            ) from None
        home = config.parent
        code = errno.ENOSPC if _no_space_left(home) else errno.EIO
        raise OSError(code, f"{os.strerror(code)} (the Dagster instance's storage: {reason})", str(home)) from None
    finally:
        instance.dispose()


def _no_space_left(folder: Path) -> bool:
    """Is the file system of `folder` full (no block left for this user)?"""
    try:
        return os.statvfs(folder).f_bavail == 0
    except OSError:
        return False


# where the errors of a database lost under a run come from (named, so that the team extra is not imported)
DATABASE_ERROR_MODULES = ("dagster_postgres", "psycopg2", "sqlalchemy")


def _first_error(err: BaseException) -> str:
    """The line of a Dagster configuration error that says what is wrong (its first `Error 1:`), without
    the schema it prints after `Expected:`."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
    line = next((line for line in lines if line.startswith("Error 1:")), lines[0])
    return line.removeprefix("Error 1:").split(" Expected:")[0].strip()[:300]


def _assets() -> list:
    """Every asset of the asset package, the catalog last: it depends on every other asset, so it is the
    last step of every run (it commits the run's snapshot). The partitioned landed_records is among its
    dependencies as lineage only: it lands and commits in runs of its own (landed_logs_job)."""
    loaded = load_assets_from_package_module(assets)
    return [*loaded, catalog_asset([key for a in loaded for key in a.keys])]


def study_assets() -> list:
    """Every asset and asset check of the asset package, unbound (dagster.materialize takes these)."""
    return [*_assets(), *load_asset_checks_from_package_module(assets)]


def stage_jobs() -> list:
    """One job per entry of the stage plan: its groups, then the catalog."""
    return [
        define_asset_job(
            name, selection=AssetSelection.groups(*groups) | AssetSelection.assets(COMMIT), description=description
        )
        for name, (groups, description) in JOBS.items()
    ]


def build_definitions(
    lake_root: str | None = None,
    source: SourceResource | None = None,
    models: ModelsResource | None = None,
    rules: RuleFile | str | None = None,
    protocol: str | None = None,
) -> Definitions:
    """The lake's definitions; `rules`: the declared local rules (a RuleFile or a YAML path; default:
    the study's), parsed at most once for every run of these definitions; `protocol`: the monitor's
    acceptance protocol (a YAML path; default $AUTHEVAL_PROTOCOL, else the packaged one). The schedule's
    cron and time zone come from $AUTHEVAL_MONITOR_CRON and $AUTHEVAL_MONITOR_TZ (default monthly, UTC)."""
    # One process per run: a run is one lake run holding the lake's writer lock from its first step to
    # its commit (assets.resources.LakeResource); a step per process would split it.
    return Definitions(
        executor=in_process_executor,
        assets=_assets(),
        asset_checks=load_asset_checks_from_package_module(assets),
        # the recurring jobs (landing; trend, monitor) and a hub lake's (site exports)
        jobs=[*stage_jobs(), landed_logs_job, recurring_evaluation_job, site_exports_job],
        sensors=[landing_sensor, monitor_alert_sensor],
        schedules=[recurring_evaluation_schedule()],
        resources={
            "lake": lake_resource(lake_root),
            "source": source or default_source(),
            "models": models or default_models(),
            "engine": default_engine(),
            "rules": DeclaredRules(rules),
            "protocol": ProtocolResource(path=protocol) if protocol else default_protocol(),
            "notifier": default_notifier(),
        },
    )


defs = build_definitions()
