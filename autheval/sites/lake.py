"""A hub lake: signed site exports land in the lake as logs do, and pool into its tables.

An export folder dropped into `<landing>/exports/` (or copied there by `autheval site land --export DIR`)
is read through a private copy, verified against the lake's registered keys (`<lake>/trusted_keys/
<site>.pub`, the lake's setting for `pool --trust`) and against every export the lake holds (no replay,
one export per site, the same software, scheme, seed, replicates and parts; a monitor part made under
the lake's protocol), then kept as `<landing>/exports/processed/<key>__<name>/` (the key: the start of the
manifest's SHA-256) and recorded as a row of `site_exports`. A refused folder is moved to
`<landing>/exports/rejected/<name>` with a `.reason.txt` beside it, as a bad log is, and the lake's
tables stay as they were.

The lake's `estimates`, `intervals`, `contrasts` and `heterogeneity` (and, where the exports hold
monitor parts, `monitor`, `monitor_case_mix` and `monitor_decisions`) are then `autheval pool` of every
landed export (autheval.sites.pool, autheval.sites.monitor), with the records lake's columns, a `site`
column ('all' for the pooled rows, else the site) and the provenance columns: `data_sha256` names each
pooled export and its manifest hash (`site=sha256;...`).

Core functions only (no Dagster): assets/site_exports.py calls these."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from autheval.columns import COLUMN_TYPES
from autheval.errors import RecordError
from autheval.estimation.provenance import PROVENANCE, Provenance, with_names
from autheval.sites.export import every_export_name
from autheval.sites.pool import SiteExport, check_exports, read_export
from autheval.sites.signing import trusted_keys
from warehouse.sql import sweep_dead_folders

TRUSTED_KEYS = "trusted_keys"  # <lake>/trusted_keys/<site>.pub: the sites the lake pools
EXPORTS = "exports"  # <landing>/exports/<name>/: export folders waiting to land
PROCESSED, REJECTED = "processed", "rejected"
INCOMING = ".incoming-"  # <landing>/exports/.incoming-<host>-<pid>-*/: a private copy being verified
SITE_EXPORTS = "site_exports"
HETEROGENEITY = "heterogeneity"
POOLED_SITE = "all"  # the `site` of a pooled row
STUDY = "sites"  # the `study` of a hub lake's rows
KEY_LENGTH = 20  # hex digits of the manifest's SHA-256 naming a landed export
NAME_MAX_BYTES = 200  # an export folder's name: `<key>__<name>` and `<name>.reason.txt` fit in one file name
SITE_EXPORT_COLUMNS = (
    "site",
    "export_key",
    "manifest_sha256",
    "signature",
    "signed_by",
    "signer",
    "files",
    "inputs",
    "analyses",
    "contrasts",
    "monitor_protocol_sha256",
    "rule_version",
    "rule_sha256",
    "scheme",
    "seed",
    "reps",
    "export_software",
    "landed_name",
    "stored",
    "landed_at",
)
HETEROGENEITY_COLUMNS = ("study", "analysis", "unit", "metric", "sites", "cochran_q", "df", "i_squared")
OWN_TYPES = {
    "study": pa.string(),
    "export_key": pa.string(),
    "manifest_sha256": pa.string(),
    "signature": pa.string(),
    "signed_by": pa.string(),
    "signer": pa.string(),
    "files": pa.string(),
    "inputs": pa.string(),
    "analyses": pa.string(),
    "contrasts": pa.string(),
    "monitor_protocol_sha256": pa.string(),
    "export_software": pa.string(),
    "landed_name": pa.string(),
    "stored": pa.string(),
    "landed_at": pa.timestamp("us", tz="UTC"),
    "sites": pa.int64(),
    "df": pa.int64(),
    "analysis_order": pa.int32(),
    "adjustment": pa.string(),
}


def lake_keys(root: Path) -> dict[str, str]:
    """The lake's registered keys ({public key hex: <site>.pub}); one line when it has none."""
    folder = Path(root) / TRUSTED_KEYS
    if folder.is_symlink() or not folder.is_dir() or not any(folder.glob("*.pub")):
        raise RecordError(
            str(folder), None, "the hub lake has no registered site keys: copy each site's site.pub here as <site>.pub"
        )
    return trusted_keys(folder, str(folder))


def exports_dir(landing: Path) -> Path:
    return Path(landing) / EXPORTS


def check_own_folders(landing: Path) -> None:
    """landing/exports/ and its processed/ and rejected/ are real folders: nothing is read or kept
    through a link out of the lake, nothing is copied onto a file (one line naming it)."""
    for folder in (exports_dir(landing), exports_dir(landing) / PROCESSED, exports_dir(landing) / REJECTED):
        if folder.is_symlink():
            raise RecordError(
                str(folder), None, "is a symbolic link; a hub lake keeps its exports in folders of its own"
            )
        if folder.exists() and not folder.is_dir():
            raise RecordError(str(folder), None, "is not a folder; a hub lake keeps its exports in folders of its own")


def export_name_problem(name: str) -> str | None:
    """Why an export folder's name cannot land (None: it can): the landing's own names, a hidden name, a
    name a table, a reason or one line of output cannot hold, or one too long to keep as `<key>__<name>`."""
    from autheval.monitoring.landing import shown

    if not name or name.startswith(".") or name in (PROCESSED, REJECTED):
        return f"may not be {name!r} (the landing's own)"
    if shown(name) != name:
        return "is not UTF-8"
    if not name.isprintable():
        return "holds a control character (a newline, a tab)"
    if len(name.encode()) > NAME_MAX_BYTES:
        return f"is longer than {NAME_MAX_BYTES} bytes"
    return None


def printable(text: str) -> str:
    """`text` as one line of a refusal: bytes that are not UTF-8 as \\xNN, a control character escaped."""
    from autheval.monitoring.landing import shown

    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown(text))


def _fitted(name: str) -> str:
    """`name` cut to NAME_MAX_BYTES: what a refused folder is set aside as, its reason beside it."""
    return os.fsdecode(os.fsencode(name)[:NAME_MAX_BYTES])


def waiting_exports(landing: Path) -> list[Path]:
    """What waits in <landing>/exports/, in name order (hidden names are writes in progress)."""
    folder = exports_dir(landing)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.name not in (PROCESSED, REJECTED))


def landed_exports(store, trusted: dict[str, str], landing: Path) -> list[SiteExport]:
    """Every export the lake holds (`site_exports`), read and verified again from its kept copy in
    <landing>/exports/processed/ (the lake moved or copied elsewhere still finds it; else the copy the
    row's `stored` names), and refused in one line unless it is the export its row names."""
    if not store.has_table(SITE_EXPORTS):
        return []
    exports = []
    for row in store.read(SITE_EXPORTS).to_pylist():
        kept = exports_dir(landing) / PROCESSED / f"{row['export_key']}__{row['landed_name']}"
        folder = kept if kept.is_dir() or not row["stored"] else Path(row["stored"])
        export = read_export(folder, trusted, SITE_EXPORTS)
        if export.manifest_sha256 != row["manifest_sha256"]:
            raise RecordError(
                SITE_EXPORTS,
                None,
                f"{folder} holds the export of manifest SHA-256 {export.manifest_sha256[:12]}..., not the "
                f"{row['manifest_sha256'][:12]}... its row names (a kept copy replaced)",
            )
        exports.append(export)
    return exports


def _copy_plain(src: Path, dst: Path) -> None:
    """Copy a plain file, never through a link, never a FIFO or device (one line naming it)."""
    why = "is not a plain file (a link, folder or device); an export holds files only"
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise RecordError(printable(str(src)), None, why) from err
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(printable(str(src)), None, why)
    with os.fdopen(fd, "rb") as reader:
        with open(dst, "xb") as writer:
            shutil.copyfileobj(reader, writer)


def _incoming_prefix() -> str:
    """The start of this host's private copies' names, `.incoming-<host>-` (then the pid): a lake on
    storage several machines share sweeps only the copies of its own host's ended processes."""
    return f"{INCOMING}{socket.gethostname()}-"


def private_copy(folder: Path, into: Path) -> Path:
    """A copy of an export folder's plain files in a new hidden folder of `into` (the lake's own): what
    is verified and kept is this copy, so nothing can rewrite the export once it is read. A folder
    holding a name no export holds is refused before anything is copied; the copies a killed process
    left (kill -9: no handler ran) are removed first."""
    if folder.is_symlink() or not folder.is_dir():
        raise RecordError(printable(str(folder)), None, "is not an export folder (a link, a file or missing)")
    entries = sorted(folder.iterdir())
    allowed = every_export_name()
    stray = next((entry.name for entry in entries if entry.name not in allowed), None)
    if stray is not None:
        raise RecordError(
            printable(str(folder)),
            None,
            f"holds '{printable(stray)}', which no site export holds (nothing of it was copied)",
        )
    into.mkdir(parents=True, exist_ok=True)
    sweep_dead_folders(into, _incoming_prefix())
    copy = Path(tempfile.mkdtemp(prefix=f"{_incoming_prefix()}{os.getpid()}-", dir=into))
    try:
        for entry in entries:
            _copy_plain(entry, copy / entry.name)
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    return copy


def _named(err: RecordError, copy: Path, folder: Path) -> RecordError:
    """`err` naming the export as it was given rather than its private copy, as one printable line (a
    file of the export named with a newline or bytes that are not UTF-8 shown escaped)."""
    label = f"export {folder.name}"
    if err.source in (label, SITE_EXPORTS):  # the flag the checks were given: the label says it
        rule = printable(err.rule.replace(str(copy), str(folder)))
        return RecordError(printable(label), err.column, rule, err.example)
    return RecordError(printable(label), None, printable(str(err).replace(str(copy), str(folder))))


def admit(new: SiteExport, landed: list[SiteExport], protocol=None, rules: dict | None = None) -> None:
    """The new export pools with every landed one: no replay, one per site, the same software, scheme,
    seed, replicates and parts (autheval.sites.pool.check_exports); a monitor part made under the lake's
    protocol (autheval.sites.monitor.check_monitors)."""
    exports = [*landed, new]
    check_exports(exports, flag=SITE_EXPORTS, rules=rules)
    if any(e.monitor is not None for e in exports):
        from autheval.monitoring.protocol import load_protocol
        from autheval.sites.monitor import check_monitors

        check_monitors(exports, protocol if protocol is not None else load_protocol(None), SITE_EXPORTS)


def verify_export(
    folder: Path, into: Path, trusted: dict[str, str], landed: list[SiteExport], protocol=None, rules=None
):
    """(the private copy, the verified export) of an export folder; RecordError naming the folder."""
    copy = private_copy(folder, into)
    try:
        export = replace(read_export(copy, trusted, f"export {folder.name}"), folder=folder)  # named as given
        admit(export, landed, protocol, rules)
    except RecordError as err:
        shutil.rmtree(copy, ignore_errors=True)
        raise _named(err, copy, folder) from None
    except BaseException:
        shutil.rmtree(copy, ignore_errors=True)
        raise
    return copy, export


@dataclass
class Landing:
    """One landing pass: the exports verified (kept copy, export, name dropped as) and the refusals."""

    landed: list[tuple[Path, SiteExport, str]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    moved: list[Path] = field(default_factory=list)


def land_exports(
    landing: Path, trusted: dict[str, str], landed: list[SiteExport], protocol=None, rules: dict | None = None
) -> Landing:
    """Verify every export waiting in <landing>/exports/ (name order, each against the landed ones and
    those before it, and the hub's `rules` where declared); a refused one is moved to rejected/ with its
    reason. Nothing is kept yet: `keep` moves the copies into processed/ once the lake has committed
    their rows."""
    from autheval.monitoring.landing import _move_no_clobber
    from warehouse.atomic import atomic_write_text

    check_own_folders(landing)
    into = exports_dir(landing)
    result = Landing()
    for folder in waiting_exports(landing):
        try:
            problem = export_name_problem(folder.name)
            if problem:
                raise RecordError(f"export {printable(folder.name)}", None, f"the folder's name {problem}")
            before = landed + [e for _, e, _ in result.landed]
            copy, export = verify_export(folder, into, trusted, before, protocol, rules)
        except RecordError as err:
            line = printable(str(err))  # one line a reason file and the output can hold
            result.refused.append(line)
            moved = _move_no_clobber(folder, into / REJECTED / _fitted(folder.name))
            atomic_write_text(moved.with_name(moved.name + ".reason.txt"), line + "\n")
            result.moved.append(moved)
            continue
        result.landed.append((copy, export, folder.name))
    return result


def stored_path(landing: Path, export: SiteExport, name: str) -> Path:
    return exports_dir(landing) / PROCESSED / f"{export.manifest_sha256[:KEY_LENGTH]}__{name}"


def keep(landing: Path, landed: list[tuple[Path, SiteExport, str]]) -> None:
    """Move each verified copy to processed/<key>__<name> before the lake commits its row (a copy left
    there by a run that did not commit is replaced: no committed row names it), so a committed row never
    names a missing copy, whenever the process stops."""
    for copy, export, name in landed:
        target = stored_path(landing, export, name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.rename(copy, target)


def release(landing: Path, landed: list[tuple[Path, SiteExport, str]]) -> None:
    """Remove the folders the landed exports were dropped as, once their rows are committed (one left
    by a stopped process lands next time as a replay, set aside with its reason)."""
    for _, _, name in landed:
        dropped = exports_dir(landing) / name
        if dropped.is_dir() and not dropped.is_symlink():
            shutil.rmtree(dropped)


def discard(landed: list[tuple[Path, SiteExport, str]]) -> None:
    """Remove the verified copies of a pass that did not commit (the dropped folders stay)."""
    for copy, _, _ in landed:
        shutil.rmtree(copy, ignore_errors=True)


def site_exports_table(store, landing: Path, landed: list[tuple[Path, SiteExport, str]]) -> pa.Table:
    """`site_exports`: the lake's rows, then one per newly landed export (what it holds, never a case or
    a cluster id: the site, hashes, key, parts and scheme)."""
    now = datetime.now(UTC)
    rows = []
    for _, e, name in landed:
        monitor = e.manifest.get("monitor")
        rows.append(
            {
                "site": e.site,
                "export_key": e.manifest_sha256[:KEY_LENGTH],
                "manifest_sha256": e.manifest_sha256,
                "signature": e.signature,
                "signed_by": e.signer,
                "signer": e.manifest["signer"],
                "files": ";".join(f"{n}={h}" for n, h in sorted(e.manifest["files"].items())),
                "inputs": ";".join(f"{i['analysis']}={i['sha256']}" for i in e.manifest["inputs"]),
                "analyses": ";".join(sorted(e.analyses)),
                "contrasts": ";".join(sorted(e.contrasts)),
                "monitor_protocol_sha256": monitor["protocol_sha256"] if monitor else None,
                "rule_version": (e.manifest.get("rules") or {}).get("version"),
                "rule_sha256": (e.manifest.get("rules") or {}).get("sha256"),
                "scheme": e.manifest["scheme"],
                "seed": e.manifest["seed"],
                "reps": e.manifest["reps"],
                "export_software": e.manifest["software"]["autheval"],
                "landed_name": name,
                "stored": str(stored_path(landing, e, name)),
                "landed_at": now,
            }
        )
    table = typed_table(SITE_EXPORT_COLUMNS, rows)
    return pa.concat_tables([store.read(SITE_EXPORTS), table]) if store.has_table(SITE_EXPORTS) else table


def typed_table(columns, rows: list[dict]) -> pa.Table:
    """Rows as an Arrow table, each column of its lake type (a number named nowhere a double)."""
    types = {**COLUMN_TYPES, **OWN_TYPES}
    schema = pa.schema([(c, types.get(c, pa.float64())) for c in columns])
    return pa.Table.from_pylist([{c: r.get(c) for c in columns} for r in rows], schema=schema)


def _site(source: str) -> str:
    return POOLED_SITE if source == "pooled" else source.removeprefix("site:")


def _run_wide(provenance: Provenance) -> dict:
    """The provenance every row of a pool shares: the rule file the sites declare they scored under (none
    where they declare none), the engine, the software."""
    return {name: getattr(provenance, name) for name in ("rule_version", "rule_sha256", "engine", "software_version")}


def _stamped(columns, rows: list[dict], provenance: Provenance) -> pa.Table:
    """`rows` with `study` and `site` first and the PROVENANCE columns last: the run's rule, engine and
    software; each row's own scheme, seed, replicates and data hash (a delta-method row has no scheme)."""
    out = [{"study": STUDY, **_run_wide(provenance), **r, "site": _site(r["source"])} for r in rows]
    body = [c for c in columns if c not in PROVENANCE and c not in ("study", "site", "model")]
    return typed_table(("study", "site", *body, *PROVENANCE), out)


@dataclass
class HubTables:
    """The lake tables pooled from the landed exports, and the pool's summary."""

    tables: dict[str, pa.Table]
    summary: dict
    alerts: list = field(default_factory=list)


def hub_tables(exports: list[SiteExport], protocol=None, decisions=None, run_id=None, snapshot=None) -> HubTables:
    """`autheval pool` of `exports` as lake tables: estimates (the bootstrap rows), intervals (bootstrap and
    delta method, with the standard error), contrasts, heterogeneity; with monitor parts, monitor,
    monitor_case_mix and monitor_decisions (`decisions`: the lake's decision record so far, kept as made)."""
    from autheval.estimation.analytic import INTERVAL_COLUMNS
    from autheval.estimation.study import ESTIMATE_COLUMNS
    from autheval.sites.pool import POOLED_CONTRAST_COLUMNS, pool

    tables: dict[str, pa.Table] = {HETEROGENEITY: typed_table((*HETEROGENEITY_COLUMNS, *PROVENANCE), [])}
    summary: dict = {}
    alerts: list = []
    if exports[0].analyses:
        rows, contrasts, summary = pool(exports)
        declared = exports[0].manifest.get("rules") or {}  # the same at every site (check_exports)
        provenance = Provenance(
            scheme=summary["scheme"],
            seed=summary["seed"],
            reps=summary["reps"],
            rule_version=declared.get("version"),
            rule_sha256=declared.get("sha256"),
        )
        order = {a: i for i, a in enumerate(summary["analyses"])}
        boot = [{**r, "analysis_order": order[r["analysis"]]} for r in rows if r["interval_method"] != "delta_method"]
        estimates = _stamped((*ESTIMATE_COLUMNS, "analysis_order"), boot, provenance)
        tables["estimates"] = with_names(estimates, {})
        intervals = _stamped((*INTERVAL_COLUMNS, "source"), rows, provenance)
        tables["intervals"] = with_names(intervals, {})
        tables["contrasts"] = _stamped(POOLED_CONTRAST_COLUMNS, contrasts, provenance)
        het = [  # from each site's delta-method estimate: no bootstrap scheme
            {"study": STUDY, "analysis": a, **h, **_run_wide(provenance), "data_sha256": entry["exports"], "scheme": ""}
            for a, entry in summary["analyses"].items()
            for h in entry["heterogeneity"]
        ]
        tables[HETEROGENEITY] = typed_table((*HETEROGENEITY_COLUMNS, *PROVENANCE), het)
    if exports[0].monitor is not None:
        from autheval.monitoring.decisions import DECISIONS_TABLE
        from autheval.monitoring.protocol import load_protocol
        from autheval.sites.monitor import pooled_monitor

        monitoring, decided = pooled_monitor(
            exports, protocol or load_protocol(None), decisions=decisions, run_id=run_id, snapshot=snapshot
        )
        tables["monitor"] = decided.monitor
        tables["monitor_case_mix"] = monitoring.case_mix
        tables[DECISIONS_TABLE] = decided.record
        alerts = monitoring.alerts
    return HubTables(tables, summary, alerts)
