"""Dagster resources: where the lake lives and which data it is built from. The storage code itself
is in warehouse/ (no Dagster).

Fields read the environment through Dagster's EnvVar (resolved when a run starts and shown in the UI):
AUTHEVAL_LAKE (lake root, default warehouse/lake), AUTHEVAL_LANDING (default <lake>/landing),
AUTHEVAL_SOURCE (reference | synthetic | isic2019), AUTHEVAL_INPUT, AUTHEVAL_FREEZE, for the model
mechanisms AUTHEVAL_MODELS (1 turns them on), AUTHEVAL_SCORER_DIR, AUTHEVAL_VISION_DIR, AUTHEVAL_FINETUNE,
AUTHEVAL_GRPO, and for monitoring AUTHEVAL_PROTOCOL (the acceptance protocol), AUTHEVAL_NOTIFY_COMMAND or
AUTHEVAL_NOTIFY_URL (the notifier), AUTHEVAL_MONITOR_CRON and AUTHEVAL_MONITOR_TZ (the schedule)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from dagster import ConfigurableResource, EnvVar

from autheval import __version__
from autheval.estimation.estimators import DEFAULT_REPS
from autheval.review.rules import RuleFile, load_rules
from warehouse.lake import DEFAULT_LAKE, Lake
from warehouse.snapshots import LakeRun, keep_snapshots, lock_wait

LAKE_ENV = "AUTHEVAL_LAKE"
LANDING_ENV = "AUTHEVAL_LANDING"
INPUT_ENV = "AUTHEVAL_INPUT"
FREEZE_ENV = "AUTHEVAL_FREEZE"


def env_or(name: str, default: str, choices: tuple[str, ...] = (), required: bool = False) -> EnvVar | str:
    """EnvVar(name) where the variable is set, else the default: the field then follows the variable
    (Dagster resolves it when a run starts), and an unset variable is no configuration error. The value
    is checked where it is read (check_env_text): one line naming the variable (ValueError)."""
    var = EnvVar(name)
    value = var.get_value()
    if value is None:
        return default
    check_env_text(name, value, choices, required)
    return var


def check_env_text(name: str, value: str, choices: tuple[str, ...] = (), required: bool = False) -> str:
    """A text setting from the environment: no control characters (a newline, a tab), no surrounding
    whitespace; not empty where `required` (an empty AUTHEVAL_LAKE would be the current folder); one of
    `choices` where given (empty: the default). ValueError naming the variable otherwise."""
    shown = repr(value[:60])
    if any(ord(c) < 32 or ord(c) == 127 for c in value) or value != value.strip():
        raise ValueError(f"${name}={shown}: must not hold control characters or surrounding whitespace")
    if required and not value:
        raise ValueError(f"${name} is set but empty: name a folder, or unset it for the default")
    if choices and value and value not in choices:
        raise ValueError(f"${name}={shown}: must be one of {', '.join(choices)}")
    return value


class LakeResource(ConfigurableResource):
    """The Parquet lake root (catalog at <root>/autheval.duckdb; landing folder <root>/landing unless
    `landing` says otherwise).

    Every Dagster run is one lake run (warehouse/snapshots.py): its tables are staged and commit as one
    snapshot at the `catalog` step, or when the run ends without a failed step; a failed run commits
    nothing. A run started while this process already has one open on the lake (the demo's stages)
    joins it, and the opener commits. A second writer fails at start with "lake ... in use by run X"."""

    root: str = str(DEFAULT_LAKE)
    landing: str = ""
    # committed snapshots that stay queryable; None: $AUTHEVAL_KEEP_SNAPSHOTS, else 10 (DEFAULT_KEEP)
    keep_snapshots: int | None = None

    def lake(self) -> Lake:
        return Lake(self.root, keep_snapshots=self.keep_snapshots)

    def check(self) -> None:
        """The settings a run needs, checked before it starts (one line naming each: the retention, the
        lock wait, the lake's pointer); nothing is written."""
        keep_snapshots(self.keep_snapshots)
        lock_wait()
        self.lake().snapshot()

    def landing_dir(self) -> Path:
        return Path(self.landing or Path(self.root) / "landing").resolve()

    def setup_for_execution(self, context) -> None:
        self._run = None
        dagster_run = getattr(context, "run", None)
        run_id = dagster_run.run_id if dagster_run is not None else None
        lake = self.lake()
        if run_id and lake.run() is None:  # a run of its own (sensors and schedules' ticks have no run)
            self._run = LakeRun(
                lake.location, run_id, lake._legacy_tables, self.keep_snapshots, software=f"autheval {__version__}"
            ).open()

    def owns_run(self) -> bool:
        """Did this Dagster run open its lake run (rather than join the demo's)?"""
        return getattr(self, "_run", None) is not None

    def commit(self) -> int | None:
        """Commit this Dagster run's tables as one snapshot (the catalog step); None when nothing was
        staged, or when the run joined one opened by this process (the demo): its opener commits."""
        run = getattr(self, "_run", None)
        return run.commit() if run is not None else None

    def teardown_after_execution(self, context) -> None:
        run = getattr(self, "_run", None)
        if run is None:
            return
        try:
            if not _run_failed(context):
                # what a run without a committing step (the catalog asset, a landed partition) staged;
                # a failure here cannot fail the run any more, so it is logged and nothing is committed
                try:
                    run.commit()
                except Exception as err:
                    context.log.error(f"lake run {run.run_id} not committed: {err}")
        finally:
            run.close()


def _run_failed(context) -> bool:
    """Did any step of this Dagster run fail (a blocking check failing fails its step)?"""
    from dagster import DagsterEventType

    records = context.instance.get_records_for_run(context.run.run_id, of_type=DagsterEventType.STEP_FAILURE).records
    return bool(records)


def lake_resource(root: str | None = None) -> LakeResource:
    """The lake at `root`, else at $AUTHEVAL_LAKE (default warehouse/lake); landing at $AUTHEVAL_LANDING
    (default <root>/landing)."""
    return LakeResource(
        root=root or env_or(LAKE_ENV, str(DEFAULT_LAKE), required=True), landing=env_or(LANDING_ENV, "")
    )


SOURCE_ENV = "AUTHEVAL_SOURCE"
SOURCES = ("reference", "synthetic", "isic2019")


class SourceResource(ConfigurableResource):
    """Which data the lake is built from: the embedded reference study, or a cohort folder in the
    official ISIC 2019 layout (synthetic or real) with an optional frozen split."""

    kind: str = "reference"
    input_dir: str = ""
    freeze: str = ""
    workers: int = 0  # hashing processes; 0 = all cores
    reps: int = DEFAULT_REPS  # bootstrap replicates of the estimates (`autheval demo --reps`)
    proposals: str = ""  # a proposals file (CSV or Parquet); synthetic: <input_dir>/proposals.csv if present
    gate_scores: str = ""  # per-image s_gate given by the source (image_id, s_gate), instead of the proxy
    evaluate_split: str = "test"  # the split the review and the estimates run on; 'all' for every image
    min_group_clusters: int = 30  # subgroups with fewer clusters (or images) are reported as not estimable
    benchmark: str = (
        ""  # a benchmark file (CSV or Parquet; autheval/estimation/benchmark.py); synthetic: <input_dir>/benchmark.csv
    )

    def check(self) -> None:
        if self.kind not in SOURCES:
            raise ValueError(f"unknown source {self.kind!r}: expected one of {', '.join(SOURCES)}")
        if self.kind != "reference" and not self.input_dir:
            raise ValueError(f"source {self.kind!r} needs input_dir (a folder in the ISIC 2019 layout)")

    @property
    def is_reference(self) -> bool:
        return self.kind == "reference"

    def require_raw(self, what: str) -> None:
        """Raw-path tables (gate proxy, contexts) need a cohort: the reference study ships neither its
        images' metadata nor its gate scores."""
        if self.is_reference:
            raise ValueError(
                f"{what} is built from a raw cohort (source synthetic or isic2019); the reference "
                "study ships no image metadata or gate scores"
            )

    def proposals_file(self) -> str | None:
        """The proposals file of a raw source: as configured, else the synthetic cohort's own."""
        if self.proposals:
            return self.proposals
        default = Path(self.input_dir) / "proposals.csv"
        return str(default) if self.kind == "synthetic" and default.is_file() else None

    def benchmark_file(self) -> str | None:
        """The benchmark file: as configured, else the synthetic cohort's own (autheval/raw/synth_benchmark.py)."""
        if self.benchmark:
            return self.benchmark
        default = Path(self.input_dir) / "benchmark.csv"
        return str(default) if self.kind == "synthetic" and default.is_file() else None

    def require_reference(self, what: str) -> None:
        """The reference study's traces exist only for the embedded reference source."""
        if not self.is_reference:
            raise ValueError(
                f"{what} comes from the reference study's traces; source is {self.kind!r}. "
                "Materialize the ingest and duplicates groups for a raw cohort."
            )


class DeclaredRules:
    """The run's declared local rules (a YAML file; default: the study's, shipped in the package), parsed
    once by autheval.review.rules.load_rules on first use and shared by every asset that applies or names them
    (assets/declared_rules.py shows them in the graph). A plain object rather than a ConfigurableResource:
    Dagster copies those for every run, and the demo's stages, several runs in one process, share this
    one parse. Given a RuleFile (the command line's, already checked) it parses nothing."""

    def __init__(self, rules: RuleFile | str | Path | None = None):
        self.path = rules.source if isinstance(rules, RuleFile) else (str(rules) if rules else None)
        self._rule_file = rules if isinstance(rules, RuleFile) else None

    def rule_file(self) -> RuleFile:
        if self._rule_file is None:
            self._rule_file = load_rules(self.path)
        return self._rule_file


def default_source() -> SourceResource:
    """The source named by $AUTHEVAL_SOURCE, $AUTHEVAL_INPUT and $AUTHEVAL_FREEZE (default: the
    embedded reference study)."""
    return SourceResource(
        kind=env_or(SOURCE_ENV, "reference", choices=SOURCES),
        input_dir=env_or(INPUT_ENV, ""),
        freeze=env_or(FREEZE_ENV, ""),
    )


MODELS_ENV = "AUTHEVAL_MODELS"
SCORER_DIR_ENV = "AUTHEVAL_SCORER_DIR"
VISION_DIR_ENV = "AUTHEVAL_VISION_DIR"
FINETUNE_ENV = "AUTHEVAL_FINETUNE"
GRPO_ENV = "AUTHEVAL_GRPO"
TINY_SCORER = "tiny-gemma3"
TINY_MORPH_SCORER = "tiny-gemma3-morph"  # its tokenizer learnt the morphology task's texts (models/tiny.py)
TINY_VISION = "tiny-clip-vision"


class ModelsResource(ConfigurableResource):
    """The proposal mechanisms the lake runs itself (assets/model_proposals.py): the VLM likelihood
    scorer with its readout and K prompt variants for CCT, the linear probe over a frozen vision tower,
    and optionally a LoRA fine-tune of the scorer. A model is a local directory; an empty directory
    field means the tiny random model of that kind, built once into <lake>/models (models/tiny.py).
    Disabled (the default): the model assets write empty tables and `proposals` is the file's alone."""

    enabled: bool = False
    scorer_dir: str = ""  # a local VLM (Gemma3 / LLaVA style); empty: tiny Gemma3
    vision_dir: str = ""  # a local vision tower for the probe (CLIPVisionModel); empty: tiny CLIP vision
    variants: int = 4  # K prompt variants for CCT (variant 0 = the spec prompt)
    batch_size: int = 8
    device: str = ""  # empty: CUDA when present, else CPU
    finetune: bool = False  # run the LoRA fine-tune and score it as its own mechanism
    finetune_max_steps: int = 0  # 0: one full epoch over the train split
    grpo: bool = False  # GRPO on the MAVIC reward from the fine-tuned model, scored as its own mechanism
    grpo_max_steps: int = 0  # 0: one full epoch over the train split (one image's group per step)
    # the fine-tune and GRPO train on the learnable morphology task (models/morph_task.py; scorer
    # default tiny-gemma3-morph) instead of the risk continuations; 0 steps above: its recipe's own
    morph_task: bool = False
    cct_lam: float = 1.0
    cct_beta: float = 1.0
    torch_threads: int = 0  # intra-op CPU threads during a run; 0: 1 with the tiny models, torch's default otherwise

    def setup_for_execution(self, context) -> None:
        """With the tiny models, torch runs single-threaded for the run (their operations are too small
        to share; models/device.py set_cpu_threads); the previous setting comes back after the run."""
        self._previous_threads = None
        threads = self.torch_threads or (1 if not (self.scorer_dir or self.vision_dir) else 0)
        if self.enabled and threads:
            from models.device import set_cpu_threads

            self._previous_threads = set_cpu_threads(threads)

    def teardown_after_execution(self, context) -> None:
        if getattr(self, "_previous_threads", None):
            from models.device import set_cpu_threads

            set_cpu_threads(self._previous_threads)

    def model_root(self, lake: Lake) -> Path:
        return lake.root / "models"

    def scorer_model(self, lake: Lake) -> Path:
        """The scorer's model directory (the tiny Gemma3 is built on first use)."""
        if self.scorer_dir:
            return Path(self.scorer_dir)
        return _tiny(TINY_MORPH_SCORER if self.morph_task else TINY_SCORER, self.model_root(lake))

    def vision_model(self, lake: Lake) -> Path:
        """The probe's vision tower directory (the tiny CLIP vision model is built on first use)."""
        return Path(self.vision_dir) if self.vision_dir else _tiny(TINY_VISION, self.model_root(lake))

    def device_or_none(self) -> str | None:
        return self.device or None


def _tiny(kind: str, root: Path) -> Path:
    from models.tiny import ensure_tiny_model  # torch: imported only when a model runs

    return ensure_tiny_model(kind, root)


FLAG_VALUES = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _env_flag(name: str) -> bool:
    """An on/off setting: 1, true, yes, on (any case) or 0, false, no, off; unset or empty is off.
    Anything else is one line naming the variable (ValueError), never silently off."""
    import os

    text = os.environ.get(name, "")
    if not text.strip():
        return False
    if text.strip().lower() not in FLAG_VALUES:
        raise ValueError(f"${name}={text[:60]!r}: must be 1 or 0 (or true/false, yes/no, on/off)")
    return FLAG_VALUES[text.strip().lower()]


def default_models() -> ModelsResource:
    """The model mechanisms as the environment says ($AUTHEVAL_MODELS=1 turns them on; the model
    directories from $AUTHEVAL_SCORER_DIR and $AUTHEVAL_VISION_DIR, the fine-tune from
    $AUTHEVAL_FINETUNE=1, GRPO after it from $AUTHEVAL_GRPO=1, which implies the fine-tune); disabled
    otherwise."""
    grpo = _env_flag(GRPO_ENV)
    return ModelsResource(
        enabled=_env_flag(MODELS_ENV),
        scorer_dir=env_or(SCORER_DIR_ENV, ""),
        vision_dir=env_or(VISION_DIR_ENV, ""),
        finetune=_env_flag(FINETUNE_ENV) or grpo,
        grpo=grpo,
    )


ENGINE_ENV = "AUTHEVAL_ENGINE"
ENGINE_KINDS = ("duckdb", "spark")  # warehouse.engine.ENGINES, named here so that no engine is imported
SPARK_MASTER_ENV = "AUTHEVAL_SPARK_MASTER"


class EngineResource(ConfigurableResource):
    """Where the estimate assets run their estimators (warehouse/engine.py): `duckdb` in the step's own
    process (the default), or `spark`: a local session bound to 127.0.0.1, or the cluster at
    `spark_master` (spark://HOST:7077, sc://HOST:15002, yarn, k8s://...). The numbers agree to 1e-12.
    Set from $AUTHEVAL_ENGINE and $AUTHEVAL_SPARK_MASTER."""

    kind: str = "duckdb"
    spark_master: str = ""

    @contextmanager
    def engine(self):
        """None for duckdb (the estimators run in process), else a started engine, stopped at the end
        of the block. A bad configuration raises warehouse.engine.EngineError (one line)."""
        from warehouse.engine import connect_engine, engine_config

        config = engine_config(self.kind, self.spark_master or None)
        if config.kind == "duckdb":
            yield None
            return
        with connect_engine(config) as started:
            yield started


def default_engine() -> EngineResource:
    """The engine named by $AUTHEVAL_ENGINE (default duckdb) and $AUTHEVAL_SPARK_MASTER."""
    return EngineResource(
        kind=env_or(ENGINE_ENV, "duckdb", choices=ENGINE_KINDS), spark_master=env_or(SPARK_MASTER_ENV, "")
    )


PROTOCOL_ENV = "AUTHEVAL_PROTOCOL"


class ProtocolResource(ConfigurableResource):
    """The declared acceptance protocol the monitor decides by (autheval.monitoring.protocol): a YAML file, or the
    packaged default when `path` is empty (set from $AUTHEVAL_PROTOCOL); `bootstrap_reps`: replicates
    of the fixed-sample interval shown beside each confidence sequence."""

    path: str = ""
    bootstrap_reps: int = DEFAULT_REPS

    def protocol(self):
        from autheval.monitoring.protocol import load_protocol

        return load_protocol(self.path or None)


def default_protocol() -> ProtocolResource:
    """The protocol named by $AUTHEVAL_PROTOCOL (default: the packaged one)."""
    return ProtocolResource(path=env_or(PROTOCOL_ENV, ""))


NOTIFY_COMMAND_ENV = "AUTHEVAL_NOTIFY_COMMAND"
NOTIFY_URL_ENV = "AUTHEVAL_NOTIFY_URL"


class NotifierResource(ConfigurableResource):
    """Where a new monitor alert is sent (autheval.monitoring.notify), once: `command` (run with the alert as JSON on
    stdin) or `url` (an HTTP POST of the JSON); neither: alerts show in the UI and `autheval monitor
    status` only. Set from $AUTHEVAL_NOTIFY_COMMAND or $AUTHEVAL_NOTIFY_URL."""

    command: str = ""
    url: str = ""
    timeout_seconds: float = 30.0

    @property
    def declared(self) -> bool:
        return bool(self.command or self.url)

    def send(self, payload: dict) -> None:
        """Deliver one alert; raises autheval.monitoring.notify.NotifyError when it was not delivered."""
        from autheval.monitoring.notify import send

        send(payload, self.command, self.url, self.timeout_seconds)


def default_notifier() -> NotifierResource:
    """The notifier named by $AUTHEVAL_NOTIFY_COMMAND or $AUTHEVAL_NOTIFY_URL (default: none)."""
    return NotifierResource(command=env_or(NOTIFY_COMMAND_ENV, ""), url=env_or(NOTIFY_URL_ENV, ""))


MONITOR_CRON_ENV = "AUTHEVAL_MONITOR_CRON"
MONITOR_TZ_ENV = "AUTHEVAL_MONITOR_TZ"
DEFAULT_MONITOR_CRON = "0 6 1 * *"  # monthly: 06:00 on the first day of the month
DEFAULT_MONITOR_TZ = "UTC"


def monitor_schedule_settings(cron: str | None = None, timezone: str | None = None) -> tuple[str, str]:
    """The recurring job's cron string and time zone: as given, else $AUTHEVAL_MONITOR_CRON and
    $AUTHEVAL_MONITOR_TZ, else monthly at 06:00 UTC. A time zone that is not an IANA name is one line
    (ValueError); the cron string is checked where the schedule is made (assets/trend.py)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    cron = (cron if cron is not None else EnvVar(MONITOR_CRON_ENV).get_value() or DEFAULT_MONITOR_CRON).strip()
    timezone = (timezone if timezone is not None else EnvVar(MONITOR_TZ_ENV).get_value() or DEFAULT_MONITOR_TZ).strip()
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"monitor schedule time zone {timezone!r} (${MONITOR_TZ_ENV}): not a time zone; give an "
            "IANA name such as UTC or Europe/Paris"
        ) from None
    return cron, timezone


PG_URL_ENV = "AUTHEVAL_DAGSTER_PG_URL"  # a team's server: the Dagster instance on PostgreSQL (docs/deploy.md)
PG_DRIVER = "postgresql+psycopg2"  # the team extra's driver (dagster-postgres's own dependency)
PG_URL_SCHEMES = ("postgresql", PG_DRIVER)
PG_CONNECT_TIMEOUT = 5  # seconds the probe waits for the database before the run is refused


def dagster_pg_url() -> str | None:
    """$AUTHEVAL_DAGSTER_PG_URL, checked: a postgresql:// URL (the password from $PGPASSWORD or the
    URL, never echoed) of a database that answers within PG_CONNECT_TIMEOUT seconds with these
    credentials, with the `team` extra installed. Returned with the psycopg2 driver named
    (postgresql+psycopg2://, what dagster-postgres then needs); None where unset (the instance stays on sqlite).
    Anything else is one line naming the variable (ValueError), before any run starts."""
    import importlib.util

    value = EnvVar(PG_URL_ENV).get_value()
    if not value:
        return None
    check_env_text(PG_URL_ENV, value)
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError
    from sqlalchemy.pool import NullPool

    try:
        url = make_url(value)
    except (ArgumentError, ValueError) as err:  # no scheme, or a part that does not parse (a port 'abc')
        why = "no scheme" if "://" not in value else f"a URL that does not parse ({str(err).splitlines()[0][:120]})"
        raise ValueError(f"${PG_URL_ENV}: must be a postgresql://USER@HOST:PORT/DATABASE URL, got {why}") from None
    if url.drivername not in PG_URL_SCHEMES:
        raise ValueError(
            f"${PG_URL_ENV}: must be a postgresql://USER@HOST:PORT/DATABASE URL, got scheme {url.drivername}://"
        )
    if not url.database:
        raise ValueError(f"${PG_URL_ENV}: names no database (postgresql://USER@HOST:PORT/DATABASE)")
    url = url.set(drivername=PG_DRIVER)  # SQLAlchemy 2.1 reads plain postgresql:// as psycopg 3, not installed
    shown = url.render_as_string(hide_password=True)
    if importlib.util.find_spec("psycopg2") is None or importlib.util.find_spec("dagster_postgres") is None:
        raise ValueError(
            f"${PG_URL_ENV}={shown}: needs the team extra "
            "(pip install 'autheval-lake[team]': dagster-postgres, psycopg2)"
        )
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT})
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as err:
        cause = str(getattr(err, "orig", None) or err).strip().splitlines()
        reason = " ".join(line.strip() for line in cause[:2])[:300] or type(err).__name__
        raise ValueError(f"${PG_URL_ENV}={shown}: cannot connect ({reason})") from None
    finally:
        engine.dispose()
    return url.render_as_string(hide_password=False)


def check_environment() -> None:
    """Every AUTHEVAL_* setting that a run reads, checked at once before it starts (the demo, `autheval
    monitor run`, `autheval ui`), each failure one line naming its variable: the lake and landing
    folders, the source, the model switches and folders, the engine, the protocol, the notifier, the
    schedule, the snapshots kept and the lock wait, DuckDB's memory, threads and query spill, the
    estimators' memory limit. Nothing is written."""
    from autheval.estimation.compiled_stream import compiled_setting
    from autheval.estimation.estimators import memory_limit_bytes
    from autheval.monitoring.notify import check_notifier
    from warehouse.catalog import SPILL_ENV
    from warehouse.sql import available_cores, declared_size, duckdb_memory_limit

    lake_resource()
    default_source()
    default_models()
    default_engine()
    default_protocol()
    default_notifier()
    check_notifier(EnvVar(NOTIFY_COMMAND_ENV).get_value() or "", EnvVar(NOTIFY_URL_ENV).get_value() or "")
    monitor_schedule_settings()
    keep_snapshots()
    lock_wait()
    duckdb_memory_limit()
    available_cores()
    declared_size(SPILL_ENV, minimum=0)
    memory_limit_bytes()
    compiled_setting()
    dagster_pg_url()  # last: the one check that reaches the network (a few seconds at most)
