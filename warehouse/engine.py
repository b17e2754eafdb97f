"""The engine seam: one Ibis connection, made from config, that runs the project's SQL files.

`duckdb` (the default) is an in-process DuckDB through Ibis; `spark` is a Spark session through Ibis,
local (`local[N]`, bound to 127.0.0.1) or an existing cluster (`--spark-master URL`). Other Ibis
backends fit the same seam: an `Engine` needs only `register` (an Arrow table in), `create` (a SQL
file's result kept as a table) and `read` (a SQL file's result out, as Arrow).

The SQL files are written in DuckDB's dialect, within the portable subset declared in `sql/README.md`;
Ibis (sqlglot) transpiles them to the engine's dialect. Parameters (`$name` in the files) are bound on
the parsed statement, as typed literals, never by formatting text. Nothing here imports Dagster.

Bad configuration (an unknown engine, the Spark extra or Java missing, an unreachable master) raises
`EngineError`, a ValueError whose message is one line; the command line turns it into exit code 2.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from warehouse.sql import load_sql, sweep_dead_folders

ENGINES = ("duckdb", "spark")
DEFAULT_ENGINE = "duckdb"
SPARK_LOCAL_IP = "127.0.0.1"  # the local session binds here only (else the JVM asks DNS off the machine)
SPARK_MASTER_SCHEMES = ("spark", "sc")  # standalone cluster (classic) and Spark Connect
MASTER_CONNECT_TIMEOUT_S = 3.0


class EngineError(ValueError):
    """Bad engine configuration: one line, exit code 2 on the command line."""


@dataclass(frozen=True)
class EngineConfig:
    """Which engine runs the estimator SQL.

    kind: `duckdb` or `spark`. spark_master: None (a local session, `local[spark_cores]`) or the URL of
    an existing cluster (`spark://host:7077`, `sc://host:15002` for Spark Connect, `yarn`, `k8s://...`).
    spark_cores: local worker threads (default: every core of this machine). shuffle_partitions:
    default: twice the cores, at least 4 (Spark's own default of 200 costs seconds on small data).
    spark_driver_memory: the local JVM's heap (the driver holds the whole local session).
    spark_driver_host: where the driver listens; always 127.0.0.1 for a local session, and for a
    spark:// cluster the address of this machine (pod) that the executors connect back to.
    """

    kind: str = DEFAULT_ENGINE
    spark_master: str | None = None
    spark_cores: int | None = None
    shuffle_partitions: int | None = None
    spark_driver_memory: str = "2g"
    spark_driver_host: str = SPARK_LOCAL_IP  # for a spark:// master: an address its executors can reach
    duckdb_memory: str | None = None

    def master(self) -> str:
        return self.spark_master or f"local[{self.cores()}]"

    def cores(self) -> int:
        return self.spark_cores or os.cpu_count() or 1

    def partitions(self) -> int:
        return self.shuffle_partitions or max(4, 2 * self.cores())

    @property
    def is_local_spark(self) -> bool:
        return self.kind == "spark" and LOCAL_MASTER.fullmatch(self.master()) is not None


def engine_config(kind: str | None = None, spark_master: str | None = None, **options) -> EngineConfig:
    """An EngineConfig from command-line style values (`--engine`, `--spark-master`), checked."""
    config = EngineConfig(kind=kind or DEFAULT_ENGINE, spark_master=spark_master or None, **options)
    check_engine_config(config)
    return config


def check_engine_config(config: EngineConfig) -> None:
    """Everything that can be checked before an engine starts, each failure one line."""
    if config.kind not in ENGINES:
        raise EngineError(f"--engine: unknown engine {config.kind!r}; expected one of {', '.join(ENGINES)}")
    if config.kind == "duckdb":
        if config.spark_master:
            raise EngineError("--spark-master: is for --engine spark (the duckdb engine runs in this process)")
        return
    check_master_syntax(config.master())  # before the extra, Java or a JVM: a bad URL costs nothing
    if importlib.util.find_spec("pyspark") is None:
        raise EngineError(
            "--engine spark: the Spark extra is not installed (pip install 'autheval-lake[spark]'; it needs Java 17)"
        )
    master = config.master()
    scheme = urlparse(master).scheme
    if scheme != "sc" and java_executable() is None:
        raise EngineError(
            "--engine spark: Java is missing (no java on PATH or in JAVA_HOME); "
            "install a Java 17 runtime, e.g. apt-get install openjdk-17-jre-headless"
        )
    if scheme in SPARK_MASTER_SCHEMES:
        check_master_reachable(master)


# Spark's own forms of a local master: local, local[N], local[*], local[N, F] (F task failures), N >= 1
LOCAL_MASTER = re.compile(r"local(\[(\*|[1-9][0-9]{0,5})(\s*,\s*[1-9][0-9]{0,5})?\])?")
MASTER_FORMS = "local, local[N] (N >= 1), local[*], spark://HOST:PORT, sc://HOST:PORT, yarn or k8s://URL"


def check_master_syntax(master: str) -> None:
    """A --spark-master value Spark can take, checked as text (no Java, no JVM): one line naming the
    flag otherwise (`localhost:7077` is not `local`; `local[0]` asks for no threads; a port must be a
    number from 1 to 65535)."""

    def refuse(why: str) -> EngineError:
        return EngineError(f"--spark-master: {master!r} {why} ({MASTER_FORMS})")

    if not master or master != master.strip() or any(c in master for c in "\n\r\t\0"):
        raise refuse("is not a Spark master URL")
    if master == "local" or master.startswith("local["):
        if LOCAL_MASTER.fullmatch(master) is None:
            raise refuse("is not a local master (threads and failures must be whole numbers of at least 1)")
        return
    if master == "yarn":
        return
    scheme = urlparse(master).scheme if "://" in master else ""
    if scheme == "k8s":
        if not master[len("k8s://") :]:
            raise refuse("needs the Kubernetes API server's URL")
        return
    if scheme not in SPARK_MASTER_SCHEMES:
        raise refuse("is not a Spark master URL")
    # spark://h1:p1,h2:p2 (standby masters); sc://host:port[/;params]
    hosts = master[len(scheme) + 3 :].split("/", 1)[0].split(",") if scheme == "spark" else [urlparse(master).netloc]
    for host in hosts:
        name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
        if not name or not colon:
            raise refuse(f"needs a host and a port, e.g. {scheme}://HOST:{7077 if scheme == 'spark' else 15002}")
        if colon and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise refuse(f"has port {port!r}, not a number from 1 to 65535")


def java_executable() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


def check_master_reachable(master: str) -> None:
    """A spark:// or sc:// master must accept a TCP connection (seconds, not a JVM's minutes of retries)."""
    url = urlparse(master)
    host, port = url.hostname, url.port
    if not host or not port:
        raise EngineError(f"--spark-master: {master!r} needs a host and a port, e.g. spark://HOST:7077")
    try:
        with socket.create_connection((host, port), timeout=MASTER_CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        raise EngineError(f"--spark-master: cannot reach {master} ({err.strerror or err})") from None


def bind_parameters(sql: str, params: dict | None = None) -> str:
    """The statement with every `$name` replaced by a typed literal of params[name] (ints as BIGINT,
    floats as DOUBLE, strings quoted), bound on the parsed statement; a missing or unused parameter is
    an error. Returns the statement in DuckDB's dialect, for Ibis to transpile."""
    import sqlglot
    from sqlglot import exp

    params = dict(params or {})
    tree = sqlglot.parse_one(sql, read="duckdb")
    used = set()

    def literal(node):
        if not isinstance(node, exp.Placeholder) or not node.name:
            return node
        if node.name not in params:
            raise KeyError(f"SQL parameter ${node.name} is not bound")
        used.add(node.name)
        value = params[node.name]
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"SQL parameter ${node.name}: {type(value).__name__} is not int, float or str")
        if isinstance(value, str):
            return exp.Literal.string(value)
        kind = "BIGINT" if isinstance(value, int) else "DOUBLE"
        return exp.cast(exp.Literal.number(repr(value)), kind)

    tree = tree.transform(literal)
    unused = set(params) - used
    if unused:
        raise KeyError(f"SQL parameters {sorted(unused)} are not used by the statement")
    return tree.sql(dialect="duckdb")


class Engine:
    """An Ibis backend that runs the project's SQL files by name. Use as a context manager (or call
    `close`): a Spark session is stopped and its temporary warehouse folder removed."""

    def __init__(self, config: EngineConfig, backend, session=None, scratch: Path | None = None):
        self.config = config
        self.kind = config.kind
        self.backend = backend
        self.session = session
        self.scratch = scratch  # temporary folder: Spark's warehouse dir and registered tables
        self._sigterm = None  # the SIGTERM handler to restore at close (_exit_on_sigterm)
        self._registered = 0

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def expression(self, sql_name: str, params: dict | None = None):
        """The Ibis table expression of `sql/<sql_name>.sql` with its parameters bound."""
        return self.backend.sql(bind_parameters(load_sql(sql_name), params), dialect="duckdb")

    def read(self, sql_name: str, params: dict | None = None) -> pa.Table:
        """Run `sql/<sql_name>.sql` and return its result as an Arrow table."""
        return self.expression(sql_name, params).to_pyarrow()

    def create(self, name: str, sql_name: str, params: dict | None = None) -> None:
        """Keep the result of `sql/<sql_name>.sql` as table `name` (computed once, read many times)."""
        expr = self.expression(sql_name, params)
        if self.kind == "spark":
            self.session.catalog.dropTempView(name)  # a registered table of that name would shadow it
            self.backend.create_table(name, expr, overwrite=True)
        else:
            self.backend.create_table(name, expr, temp=True, overwrite=True)

    def register(self, name: str, table: pa.Table) -> None:
        """Make an Arrow table readable as `name`. A local Spark session reads it as Parquet from the
        scratch folder (parallel, no row-by-row conversion); a cluster gets it through the driver."""
        if self.kind != "spark":
            self.backend.create_table(name, table, temp=True, overwrite=True)
        elif self.config.is_local_spark:
            self._registered += 1
            assert self.scratch is not None  # a Spark engine's folder (connect), until close
            path = self.scratch / "registered" / f"{name}-{self._registered}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, path)
            self.backend.read_parquet(str(path), table_name=name)
        else:
            self.session.createDataFrame(table.to_pandas()).createOrReplaceTempView(name)

    def register_files(self, name: str, files: list[str]) -> None:
        """Make Parquet files readable as `name`, read by the engine itself where they lie (Spark's
        own reader: local paths, or URIs its Hadoop filesystems know); nothing passes through here."""
        if self.kind == "spark":
            self.session.read.parquet(*files).createOrReplaceTempView(name)
        else:
            self.backend.read_parquet(list(files), table_name=name)

    def columns(self, name: str) -> list[str]:
        return list(self.backend.table(name).columns)

    def create_column_view(
        self, name: str, source: str, columns: dict[str, str | None], labels: dict[str, str]
    ) -> None:
        """The view `name` over table `source`: each output column of `columns` the source column it
        names (None: a NULL string), beside constant text columns `labels` (computed where it is read)."""
        import ibis

        table = self.backend.table(source)
        exprs = {k: ibis.literal(v, "string") for k, v in labels.items()}
        exprs.update({k: table[v] if v is not None else ibis.null().cast("string") for k, v in columns.items()})
        self.backend.create_view(name, table.select(**exprs), overwrite=True)

    def create_union_view(self, name: str, statements: list[str]) -> None:
        """The view `name`: the rows of every statement (DuckDB's dialect, a SQL file's text), UNION ALL."""
        import ibis

        parts = [self.backend.sql(text, dialect="duckdb") for text in statements]
        self.backend.create_view(
            name, parts[0] if len(parts) == 1 else ibis.union(*parts, distinct=False), overwrite=True
        )

    def table(self, name: str) -> pa.Table:
        return self.backend.table(name).to_pyarrow()

    def close(self) -> None:
        """Stop the session and remove the scratch folder (a copy of the registered records), also when
        the JVM is already gone (a signal reached it too): the folder goes whatever stopping says."""
        try:
            if self.session is not None:
                session, self.session = self.session, None
                try:
                    session.stop()
                except Exception:  # the JVM already gone: nothing left to stop
                    pass
            try:
                self.backend.disconnect()
            except Exception:  # an already stopped session has nothing left to disconnect
                pass
        finally:
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)
                self.scratch = None
            _restore_sigterm(getattr(self, "_sigterm", None))
            self._sigterm = None


def connect_engine(config: EngineConfig | str | None = None) -> Engine:
    """Start the configured engine (checked first: a bad configuration costs no JVM start)."""
    if config is None or isinstance(config, str):
        config = EngineConfig(kind=config or DEFAULT_ENGINE)
    check_engine_config(config)
    if config.kind == "duckdb":
        return _duckdb_engine(config)
    return _spark_engine(config)


def _duckdb_engine(config: EngineConfig) -> Engine:
    import ibis

    from warehouse.sql import DUCKDB_MEMORY_ENV, declared_size, spill_folder

    backend = ibis.duckdb.connect(
        memory_limit=config.duckdb_memory or declared_size(DUCKDB_MEMORY_ENV) or "512MB",
        temp_directory=str(spill_folder()),
    )
    return Engine(config, backend)


def _spark_engine(config: EngineConfig) -> Engine:
    """A Spark session bound to 127.0.0.1 (local) with a temporary warehouse folder, no UI, and shuffle
    partitions for this machine; or a session on the cluster at config.spark_master."""
    import ibis

    master = config.master()
    root = Path(tempfile.gettempdir())
    sweep_dead_folders(root, SCRATCH_PREFIX)  # the scratch of a session killed with -9 (no handler ran)
    previous = _exit_on_sigterm()
    scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=root))
    host = SPARK_LOCAL_IP if config.is_local_spark else config.spark_driver_host
    os.environ["SPARK_LOCAL_IP"] = host  # read by the JVM at start: no reverse-DNS lookup
    try:
        from pyspark.sql import SparkSession

        if urlparse(master).scheme == "sc":  # Spark Connect: the server owns the session's settings
            builder = SparkSession.builder.remote(master)
        else:
            builder = (
                SparkSession.builder.master(master)
                .config("spark.driver.host", host)
                .config("spark.driver.bindAddress", host)
                .config("spark.driver.memory", config.spark_driver_memory)
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.log.level", "ERROR")  # the JVM's start-up warnings stay off stderr
                .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
                .config("spark.local.dir", str(scratch / "local"))
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                .config("spark.sql.shuffle.partitions", str(config.partitions()))
                .config("spark.default.parallelism", str(config.partitions()))
            )
        session = builder.appName("autheval").getOrCreate()
        session.sparkContext.setLogLevel("ERROR")
        backend = ibis.pyspark.connect(session)
    except BaseException as err:  # a JVM that does not start, a cluster that refuses the session, SIGTERM
        shutil.rmtree(scratch, ignore_errors=True)
        _restore_sigterm(previous)
        if isinstance(err, EngineError) or not isinstance(err, Exception):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EngineError(f"--engine spark: could not start a Spark session on {master}: {first}") from None
    engine = Engine(config, backend, session=session, scratch=scratch)
    engine._sigterm = previous
    return engine


SCRATCH_PREFIX = "autheval-spark-"  # + the process id: a killed process's folder is swept by the next


def _sigterm_exit(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _exit_on_sigterm():
    """While a Spark session is open, SIGTERM raises SystemExit(143) in the main thread instead of
    ending the process where it stands, so that the engine closes (its scratch folder, which holds a
    copy of the registered records, is removed) and the process's exit handlers run. Installed only
    over the default handler, from the main thread; returns the handler it replaced, else None."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None  # the program handles SIGTERM itself
    signal.signal(signal.SIGTERM, _sigterm_exit)
    return signal.SIG_DFL


def _restore_sigterm(previous) -> None:
    import signal
    import threading

    if previous is not None and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGTERM) is _sigterm_exit:
            signal.signal(signal.SIGTERM, previous)
