"""Load the project's SQL files by name: SQL lives in `sql/`, never in Python strings."""

from __future__ import annotations

import itertools
import os
import re
from functools import cache
from importlib.resources import files
from pathlib import Path

SQL_PACKAGE = "sql"  # the top-level `sql/` folder, an importable package whose */*.sql files are package data
_NAME = re.compile(r"^[a-z][a-z0-9_]*/[a-z][a-z0-9_]*$")  # stage/name: the stage folder, then the file


@cache
def load_sql(name: str) -> str:
    """Return the text of `sql/<stage>/<name>.sql`, named `stage/name` (from the checkout or the
    installed package alike)."""
    if not _NAME.match(name):
        raise ValueError(f"bad SQL file name {name!r}: expected stage/name, e.g. 'review/selections_cohort'")
    stage, stem = name.split("/")
    resource = files(SQL_PACKAGE).joinpath(stage, f"{stem}.sql")
    if not resource.is_file():
        raise FileNotFoundError(f"no SQL file {name}.sql in the {SQL_PACKAGE!r} package ({resource})")
    return resource.read_text(encoding="utf-8")


def quote_identifier(name: str) -> str:
    """Quote a table name for DDL that cannot take bound parameters (view definitions).

    Only plain lower-case names are accepted, so the name is also a valid identifier on every engine.
    """
    if not re.match(r"^[a-z_][a-z0-9_]*$", name):
        raise ValueError(f"table name {name!r} is not a plain lower-case identifier")
    return f'"{name}"'


def quote_literal(text: str) -> str:
    """Quote a string literal (a file path in a view definition). A NUL ends DuckDB's SQL text early, so
    text holding one is refused (ValueError)."""
    if "\x00" in text:
        raise ValueError(f"{text!r} holds a NUL character: it cannot be written in SQL text")
    return "'" + text.replace("'", "''") + "'"


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def fill(
    name: str,
    identifiers: dict[str, str] | None = None,
    literals: dict[str, str] | None = None,
    fragments: dict[str, str] | None = None,
) -> str:
    """The text of a template file `sql/<name>.sql` with its `{placeholder}`s filled, for what DDL and
    table functions cannot take as bound parameters: `identifiers` checked and quoted (quote_identifier),
    `literals` quoted (quote_literal), `fragments` written as given (SQL the project made: another file's
    text, a list of quoted paths). Every placeholder must be given and every given name be a placeholder,
    and the text is filled in one pass, so a filled value is never read as a placeholder."""
    text = load_sql(name)
    values = {key: quote_identifier(value) for key, value in (identifiers or {}).items()}
    values |= {key: quote_literal(value) for key, value in (literals or {}).items()}
    values |= fragments or {}
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise ValueError(f"sql/{name}.sql takes the placeholders {sorted(wanted)}, not {sorted(values)}")
    # Placeholders are filled in the SQL only, never in a `--` comment: a literal with a newline filled
    # into a comment ended the comment and its rest was read as SQL (a mechanism named "a\nb").
    lines = []
    for line in text.splitlines(keepends=True):
        code, comment = _split_comment(line)
        lines.append(_PLACEHOLDER.sub(lambda match: values[match.group(1)], code) + comment)
    return "".join(lines)


def _split_comment(line: str) -> tuple[str, str]:
    """(the SQL, the `--` comment) of one line of a template; `--` inside a quoted string is SQL."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif line.startswith("--", i):
            return line[:i], line[i:]
    return line, ""


def drop_table(con, name: str) -> None:
    """Drop the native table `name` on `con` if it exists (sql/warehouse/drop_table.sql; the name is checked and
    quoted, as DDL takes no parameters)."""
    con.execute(fill("warehouse/drop_table", identifiers={"table": name}))


def drop_view(con, name: str) -> None:
    """Drop the temporary view `name` on `con` if it exists (sql/warehouse/drop_view.sql)."""
    con.execute(fill("warehouse/drop_view", identifiers={"view": name}))


# Running a named SQL file: the one way. `params` is a dict of the file's $name parameters; names the
# file does not use are left out (DuckDB refuses unused named parameters), so callers pass one dict.


def _bound(sql: str, params) -> dict | None:
    """The subset of `params` that `sql` names as $name, or None when it names none of them."""
    used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", sql))
    return {k: v for k, v in (params or {}).items() if k in used} or None


def run(con, name: str, params=None):
    """`sql/<name>.sql` on `con`, its result as an Arrow table."""
    sql = load_sql(name)
    return con.execute(sql, _bound(sql, params)).arrow().read_all()


def rows(con, name: str, params=None) -> list[dict]:
    """`sql/<name>.sql` on `con`, its rows as dicts (column name -> value)."""
    sql = load_sql(name)
    cursor = con.execute(sql, _bound(sql, params))
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def one(con, name: str, params=None) -> dict:
    """The one row of `sql/<name>.sql` (a check: violations, counts, an example) as a dict."""
    sql = load_sql(name)
    cursor = con.execute(sql, _bound(sql, params))
    names = [d[0] for d in cursor.description]
    return dict(zip(names, cursor.fetchone()))


def _template(name: str, fragments: dict[str, str] | None) -> str:
    """`sql/<name>.sql` as it is, or with its `{placeholder}`s filled by `fragments` (fill)."""
    return load_sql(name) if fragments is None else fill(name, fragments=fragments)


def to_table(con, table: str, name: str, params=None, fragments: dict[str, str] | None = None) -> None:
    """`sql/<name>.sql` into the native table `table` on `con`, replacing one of that name (DuckDB's
    relation API creates it, so no SQL is composed in Python). `fragments`: see fill."""
    sql = _template(name, fragments)
    drop_table(con, table)
    con.sql(sql, params=_bound(sql, params)).create(table)


def to_parquet(con, name: str, path, params=None, fragments: dict[str, str] | None = None) -> None:
    """Stream `sql/<name>.sql` to a Parquet file at `path` (sql/warehouse/copy_to_parquet.sql): bounded memory.
    `fragments`: see fill."""
    sql = _template(name, fragments)
    text = fill("warehouse/copy_to_parquet", literals={"path": str(path)}, fragments={"query": sql})
    con.execute(text, _bound(sql, params))


def size_bytes(text: str) -> int | None:
    """Bytes of a size as DuckDB and AUTHEVAL_MEMORY_LIMIT take it (bytes, or 512MB, 2GB, 1.5GiB:
    KB/MB/GB/TB powers of 1000, KiB/MiB/GiB/TiB of 1024); None where it is not one."""
    # ASCII only: Python's \d and float() take other scripts' digits ('٥GB'), DuckDB does not
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)[ \t]*([kmgt]?i?b?)?", text.strip().lower(), re.ASCII)
    if not match:
        return None
    suffix = match.group(2) or ""
    unit = suffix.rstrip("b").rstrip("i")
    scale = 1024 if "i" in suffix else 1000
    return int(float(match.group(1)) * scale ** " kmgt".index(unit or " "))


def memory_share(parts: int) -> str:
    """DuckDB's cap for one of `parts` connections that run at once: duckdb_memory_limit() split
    between them so that together they stay within it, each at least MIN_MEMORY_MB (where the floor
    wins, together they may pass it)."""
    total = size_bytes(duckdb_memory_limit())
    if total is None:  # a size DuckDB reads but this does not: each gets the floor
        return f"{MIN_MEMORY_MB}MB"
    return f"{max(MIN_MEMORY_MB, (total // max(parts, 1)) >> 20)}MB"


THREADS_ENV, DUCKDB_MEMORY_ENV = "AUTHEVAL_THREADS", "AUTHEVAL_DUCKDB_MEMORY"
MAX_THREADS = 4096
MIN_DECLARED_MEMORY = 64_000_000  # 64MB: DuckDB refuses smaller caps only when a query runs
MAX_DECLARED_SIZE = 1 << 50  # 1 PiB: DuckDB's parser refuses sizes past about this


def declared_size(variable: str, minimum: int = MIN_DECLARED_MEMORY) -> str | None:
    """$`variable` as a DuckDB size ('4GB', '512MiB'; plain bytes are given a unit), None when unset or
    empty; anything else (abc, 0, -1, 80%, past a petabyte) is one line naming the variable (ValueError)."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    size = size_bytes(text)
    if size is None or not minimum <= size <= MAX_DECLARED_SIZE:
        raise ValueError(
            f"${variable}={text[:40]!r}: must be a size such as 512MB or 4GB, from {minimum // 1_000_000}MB to 1PiB"
        )
    return text if re.search(r"[a-zA-Z]", text) else f"{size // 1024}KiB"


def available_cores() -> int:
    """Cores this process may run on (AUTHEVAL_THREADS overrides: a whole number from 1 to MAX_THREADS,
    else one line naming it)."""
    override = os.environ.get(THREADS_ENV, "").strip()
    if override:
        if not re.fullmatch(r"[0-9]{1,5}", override, re.ASCII) or not 1 <= int(override) <= MAX_THREADS:
            raise ValueError(
                f"${THREADS_ENV}={override[:40]!r}: must be a whole number of threads from 1 to {MAX_THREADS}"
            )
        return int(override)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


MEMORY_SHARE = 0.4  # of the memory available when a connection opens
MIN_MEMORY_MB = 256
MAX_MEMORY_MB = 1024  # so a whole 10^8-record run stays within 1.5 GB with the Python side (docs/benchmarks.md)


def available_memory_bytes() -> int | None:
    """Memory this process could still use: MemAvailable, lowered to what a cgroup (v2 or v1) limit
    leaves; None where neither can be read."""
    available = None
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            with open(limit_file) as handle:
                limit = handle.read().strip()
            with open(usage_file) as handle:
                usage = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        if limit.isdigit() and int(limit) < 1 << 60:
            left = max(int(limit) - usage, 0)
            available = left if available is None else min(available, left)
        break
    return available


def duckdb_memory_limit() -> str:
    """The memory cap of compute connections: AUTHEVAL_DUCKDB_MEMORY when set (any DuckDB size, e.g.
    '4GB'), else MEMORY_SHARE of the available memory, between MIN_MEMORY_MB and MAX_MEMORY_MB (512MB
    where available memory cannot be read)."""
    override = declared_size(DUCKDB_MEMORY_ENV)
    if override:
        return override
    available = available_memory_bytes()
    if available is None:
        return "512MB"
    share = int(available * MEMORY_SHARE) >> 20
    return f"{max(MIN_MEMORY_MB, min(MAX_MEMORY_MB, share))}MB"


_DATABASES = itertools.count()
SPILL_PREFIX = "autheval-duckdb-spill-"
_SWEPT: set[int] = set()  # pids whose spill folders this process has swept at its first connection


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def sweep_dead_folders(root: Path, prefix: str) -> None:
    """Remove the folders `<prefix><pid>[-...]` under `root` of processes that have ended without
    their exit handler (kill -9): a large sort's spill, a large record's per-cluster sums (their size:
    docs/evaluating.md, "Large logs: records as a dataset") would otherwise stay."""
    import shutil

    for folder in root.glob(prefix + "*"):
        pid = folder.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def spill_folder() -> Path:
    """A spill folder of its own for one DuckDB database: the temporary files of two databases (two
    processes, or two connections of one process summing side by side) must never meet: two
    in-memory databases spilling into one folder crashed this process (segmentation fault, measured
    with two partitions of 10^8 records). DuckDB creates it when it first spills and removes it when
    the database closes; those of killed processes go at a process's first connection."""
    import tempfile

    root = Path(tempfile.gettempdir())
    if os.getpid() not in _SWEPT:
        _SWEPT.add(os.getpid())
        sweep_dead_folders(root, SPILL_PREFIX)
    return root / f"{SPILL_PREFIX}{os.getpid()}-{next(_DATABASES)}"


def connect(memory_limit: str | None = None, threads: int | None = None):
    """An in-memory DuckDB connection for compute, with bounded memory: past the limit DuckDB spills
    to a temporary folder instead of growing (`duckdb_memory_limit()`: AUTHEVAL_DUCKDB_MEMORY, else
    derived from the available memory). `threads=1` for sums whose last bits must not depend on how
    threads split the rows: DuckDB adds each thread's partial sums (fsum's compensated ones too) in
    the order the threads finish, so two runs could differ in the last bit (the per-cluster sums of 10M
    records on 2 threads differed between runs; on one thread never, at a small cost in time: docs/internals.md,
    "How the estimators run")."""

    import duckdb

    config: dict[str, str | bool | int | float | list[str]] = {  # duckdb.connect's type (dict is invariant)
        "memory_limit": memory_limit or duckdb_memory_limit(),
        "temp_directory": str(spill_folder()),
    }
    if threads:
        config["threads"] = int(threads)
    return duckdb.connect(config=config)
