"""Run receipts: what went into a result and what came out, so anyone can re-derive it.

`evaluate`, `compare` and every lake run (`autheval demo`; `autheval monitor run`, as monitor/receipt.json)
write `receipt.json`: the command line, the
SHA-256 of every input file (logs, proposals, rules, frozen split, gate scores, the cohort's files), the
configuration (scheme, seed, replicates, engine), the versions of the software and its key
dependencies, and the SHA-256 of every output (a file's bytes; a lake table's rows, as Arrow IPC without
schema metadata, so a Parquet writer's own bytes do not matter). A receipt holds nothing that changes
from run to run, so the same inputs give the same receipt, byte for byte.

`autheval verify RECEIPT` re-hashes the inputs, re-runs the command into a temporary folder and compares
every output: identical or not (exit 0 / 1). AuthEval's package ships a verification script for its
published numbers; this is the same idea for any run.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pyarrow as pa

from autheval import __version__
from autheval.errors import RecordError
from autheval.io import file_sha256, table_sha256
from autheval.parse import load_json

RECEIPT = "receipt.json"
RECEIPT_VERSION = 1
# the packages whose versions can change a number (the core) or a model mechanism's proposals
KEY_PACKAGES = (
    "duckdb",
    "pyarrow",
    "numpy",
    "pydantic",
    "PyYAML",
    "scipy",
    "ImageHash",
    "pillow",
    "dagster",
    "torch",
    "transformers",
    "peft",
    "scikit-learn",
    "ibis-framework",
    "pyspark",
)


def software_versions() -> dict[str, str]:
    """autheval, Python and every installed key package (read from the installed metadata: nothing is
    imported)."""
    versions = {"autheval": __version__, "python": sys.version.split()[0]}
    for name in KEY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def input_entry(role: str, path: str | os.PathLike) -> dict:
    path = Path(path).resolve()
    return {"role": role, "path": str(path), "sha256": file_sha256(path)}


def file_outputs(files: dict[str, bytes]) -> list[dict]:
    return [{"name": name, "sha256": hashlib.sha256(data).hexdigest()} for name, data in sorted(files.items())]


def table_outputs(tables: dict[str, pa.Table], root: str | os.PathLike | None = None) -> list[dict]:
    """Each table's content hash: its rows in a canonical order (sorted on every sortable column; a
    table's row order is not part of its content), the lake's own folder written as `<lake>` (a
    cohort generated inside the lake is the same cohort wherever the lake lies), without the columns
    that only say when a run happened (RUN_FACT_COLUMNS)."""
    return [
        {"name": f"table:{name}", "sha256": table_sha256(canonical(table, root)), "rows": table.num_rows}
        for name, table in sorted(tables.items())
    ]


# Columns that record when or where a run happened, not what it computed: a file's modification time
# (the hashing cache's change check) and a score's time stamp. A receipt's table hash leaves them out.
RUN_FACT_COLUMNS = ("mtime_ns", "scored_at")


def canonical(table: pa.Table, root: str | os.PathLike | None = None) -> pa.Table:
    import pyarrow.compute as pc

    table = table.drop_columns([c for c in RUN_FACT_COLUMNS if c in table.column_names])
    for i, field in enumerate(table.schema):  # a dictionary column (landed_records.analysis) as its values
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    if root is not None:
        prefix = str(Path(root).resolve())
        for i, field in enumerate(table.schema):
            text = pa.types.is_string(field.type) or pa.types.is_large_string(field.type)
            if text and pc.any(pc.match_substring(table.column(i), prefix)).as_py():  # else no copy of it
                table = table.set_column(i, field, pc.replace_substring(table.column(i), prefix, "<lake>"))
    keys = [
        (f.name, "ascending")
        for f in table.schema
        if not (pa.types.is_nested(f.type) or pa.types.is_binary(f.type) or pa.types.is_null(f.type))
    ]
    return table.sort_by(keys).combine_chunks() if keys and table.num_rows else table


def build_receipt(command: str, argv: list[str], inputs: list[dict], outputs: list[dict], config: dict) -> dict:
    return {
        "receipt_version": RECEIPT_VERSION,
        "command": command,
        "argv": argv,
        "config": config,
        "software": software_versions(),
        "inputs": sorted(inputs, key=lambda e: (e["role"], e["path"])),
        "outputs": outputs,
    }


def receipt_text(receipt: dict) -> str:
    return json.dumps(receipt, indent=1, sort_keys=True, allow_nan=False) + "\n"


class ReceiptError(RecordError):
    """A RecordError naming a receipt's key (`key 'argv'`), not a column: a receipt is not a table."""

    def __init__(self, source: str, key: str | None, rule: str, example: str | None = None):
        super().__init__(source, None, f"key '{key}': {rule}" if key else rule, example)
        self.column = key


def read_receipt(path: str | os.PathLike) -> dict:
    import stat

    source = str(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise RecordError(source, None, "file not found") from None
    except OSError as err:
        raise RecordError(source, None, f"not a receipt (unreadable: {err.strerror or err})") from None
    if not stat.S_ISREG(mode):  # a FIFO or device would block the read: never opened
        raise RecordError(source, None, "not a regular file (a receipt is a JSON file)")
    try:
        receipt = load_json(Path(path).read_bytes(), source)  # depth, repeated keys: one line
    except RecordError as err:
        raise RecordError(source, None, f"not a receipt (unreadable JSON: {err.rule})") from None
    except FileNotFoundError:
        raise RecordError(source, None, "file not found") from None
    except (OSError, ValueError) as err:
        raise RecordError(source, None, f"not a receipt (unreadable JSON: {err})") from None
    for key in ("receipt_version", "command", "argv", "inputs", "outputs"):
        if not isinstance(receipt, dict) or key not in receipt:
            raise ReceiptError(source, key, "a receipt names this key")
    check_receipt_schema(receipt, source)
    if receipt["receipt_version"] != RECEIPT_VERSION:
        raise ReceiptError(source, "receipt_version", f"must be {RECEIPT_VERSION}, got {receipt['receipt_version']!r}")
    if receipt["command"] not in RERUN_TARGET:
        raise ReceiptError(source, "command", f"must be one of {', '.join(RERUN_TARGET)}, got {receipt['command']!r}")
    argv = receipt["argv"]
    if not (
        isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and argv[0] == receipt["command"]
    ):
        # verify re-runs argv: it must be the named command's own line, never another command
        rule = f"must be a list of strings starting with the command {receipt['command']!r}"
        raise ReceiptError(source, "argv", rule)
    return receipt


SHA256_HEX = frozenset("0123456789abcdef")
# every key a receipt may hold (build_receipt writes them all), and what each holds
RECEIPT_FIELDS = {
    "receipt_version": "a whole number",
    "command": "text",
    "argv": "a list of text",
    "config": "an object",
    "software": "an object of package -> version text",
    "inputs": "a list of {role, path, sha256}",
    "outputs": "a list of {name, sha256[, rows]}",
}


def check_receipt_schema(receipt: dict, source: str) -> None:
    """Every field of a receipt and its type (build_receipt's layout), or one RecordError line naming
    the key (`inputs[1].path`): an unknown key, text where a list is due, an input or output entry
    missing a key or holding another, a SHA-256 that is not 64 hex digits, a relative input path
    (verify runs from anywhere), an output named twice."""

    def need(ok: bool, key: str, rule: str) -> None:
        if not ok:
            raise ReceiptError(source, key, rule)

    for key in receipt:
        need(key in RECEIPT_FIELDS, key, f"unknown key (a receipt holds {', '.join(RECEIPT_FIELDS)})")
    need(_is_count(receipt["receipt_version"]), "receipt_version", "must be a whole number")
    need(isinstance(receipt["command"], str), "command", "must be text")
    need(isinstance(receipt["argv"], list), "argv", "must be a list of text")
    need(isinstance(receipt.get("config", {}), dict), "config", "must be an object")
    software = receipt.get("software", {})
    need(isinstance(software, dict), "software", f"must be {RECEIPT_FIELDS['software']}")
    for name, version in software.items():
        need(isinstance(version, str), f"software.{name}", "must be version text")
    for field, keys in (("inputs", ("role", "path", "sha256")), ("outputs", ("name", "sha256"))):
        need(isinstance(receipt[field], list), field, f"must be {RECEIPT_FIELDS[field]}")
        for i, entry in enumerate(receipt[field]):
            where = f"{field}[{i}]"
            need(isinstance(entry, dict), where, f"must be an object with {', '.join(keys)}")
            for key in keys:
                need(key in entry, f"{where}.{key}", "an entry names this key")
                need(isinstance(entry[key], str) and entry[key] != "", f"{where}.{key}", "must be non-empty text")
            for key in entry:
                known = key in keys or (field == "outputs" and key == "rows")
                need(known, f"{where}.{key}", f"unknown key (an entry holds {', '.join(keys)})")
            digest = entry["sha256"]
            need(len(digest) == 64 and set(digest) <= SHA256_HEX, f"{where}.sha256", "must be 64 lowercase hex digits")
            need(_is_count(entry.get("rows", 0)), f"{where}.rows", "must be a count (a whole number, 0 or more)")
            if field == "inputs":  # verify runs from anywhere: a relative path would name another file
                path = entry["path"]
                need("://" in path or Path(path).is_absolute(), f"{where}.path", "must be an absolute path or a URI")
    paths = [entry["path"] for entry in receipt["inputs"]]
    for i, path in enumerate(paths):
        need(paths.index(path) == i, f"inputs[{i}].path", f"{path!r} is named twice")
    names = [entry["name"] for entry in receipt["outputs"]]
    for i, name in enumerate(names):
        need(names.index(name) == i, f"outputs[{i}].name", f"{name!r} is named twice")
        need(_plain_output_name(name), f"outputs[{i}].name", "must be a relative name inside the output folder")
    _check_config(receipt.get("config", {}), "config", need)


def _plain_output_name(name: str) -> bool:
    """An output's name: `table:NAME`, or a relative path inside the output folder (no `..`, not absolute,
    no backslash or control character)."""
    from pathlib import PurePosixPath

    if name.startswith("table:"):
        name = name[len("table:") :]
    parts = PurePosixPath(name).parts
    return bool(
        parts
        and not name.startswith("/")
        and "\\" not in name
        and all(part not in ("..", ".") for part in parts)
        and name.isprintable()
        and name == name.strip()
    )


def _check_config(value, key: str, need) -> None:
    """A receipt's configuration: finite numbers only (JSON's 1e999 reads as infinity), and the replicates
    and seed whole numbers."""
    import math

    if isinstance(value, float):
        need(math.isfinite(value), key, f"must be a finite number, got {value!r}")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_config(v, f"{key}.{k}", need)
        for name in ("reps", "seed"):
            if key == "config" and name in value:
                need(_is_count(value[name]), f"config.{name}", "must be a whole number, 0 or more")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_config(v, f"{key}[{i}]", need)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# --- verification -----------------------------------------------------------------------------------

RERUN_TARGET = {"evaluate": "--output-dir", "compare": "--output-dir", "demo": "--lake", "monitor": "--lake"}
# where the re-run writes its receipt, under its target (default RECEIPT); and the exit codes of a re-run
# that did its work (a monitor run exits 3 when something alerts)
RERUN_RECEIPT = {"monitor": "monitor/receipt.json"}
RERUN_OK = {"monitor": (0, 3)}


@dataclass
class Verdict:
    name: str
    expected: str | None
    actual: str | None

    @property
    def identical(self) -> bool:
        return self.expected is not None and self.expected == self.actual


@dataclass
class Verification:
    inputs: list[Verdict]
    outputs: list[Verdict]
    software: dict[str, tuple[str | None, str | None]]  # package -> (recorded, installed) where they differ
    rerun_error: str | None = None

    @property
    def identical(self) -> bool:
        """Every input as recorded (a changed or missing input is not verified, exit 1), the re-run done and
        every output identical."""
        return (
            self.rerun_error is None
            and all(v.identical for v in self.inputs)
            and all(v.identical for v in self.outputs)
        )


def verify(path: str | os.PathLike, workdir: str | os.PathLike | None = None) -> Verification:
    """Re-hash the receipt's inputs, re-run its command into a temporary folder, compare every output."""
    receipt = read_receipt(path)
    inputs = [Verdict(e["path"], e["sha256"], _sha_or_none(e["path"])) for e in receipt["inputs"]]
    now = software_versions()
    recorded = receipt.get("software", {})
    software = {
        k: (recorded.get(k), now.get(k)) for k in sorted(set(recorded) | set(now)) if recorded.get(k) != now.get(k)
    }
    with tempfile.TemporaryDirectory(prefix="autheval-verify-", dir=workdir) as tmp:
        target = Path(tmp) / "out"
        argv = _retargeted(receipt["argv"], RERUN_TARGET[receipt["command"]], str(target))
        # the re-run's Dagster instance is its own lake's (never a DAGSTER_HOME the user's UI reads)
        env = {name: value for name, value in os.environ.items() if name != "DAGSTER_HOME"}
        run = subprocess.run([sys.executable, "-m", "autheval", *argv], capture_output=True, text=True, env=env)
        if run.returncode not in RERUN_OK.get(receipt["command"], (0,)) and receipt["command"] != "demo":
            lines = (run.stderr or run.stdout).strip().splitlines()
            return Verification(
                inputs,
                [Verdict(o["name"], o["sha256"], None) for o in receipt["outputs"]],
                software,
                rerun_error=lines[-1] if lines else f"exit {run.returncode}",
            )
        rerun_receipt = target / RERUN_RECEIPT.get(receipt["command"], RECEIPT)
        if not rerun_receipt.is_file():
            lines = (run.stderr or run.stdout).strip().splitlines()
            return Verification(
                inputs,
                [Verdict(o["name"], o["sha256"], None) for o in receipt["outputs"]],
                software,
                rerun_error=lines[-1] if lines else "the re-run wrote no receipt",
            )
        actual = {o["name"]: o["sha256"] for o in json.loads(rerun_receipt.read_text())["outputs"]}
    outputs = [Verdict(o["name"], o["sha256"], actual.pop(o["name"], None)) for o in receipt["outputs"]]
    outputs += [Verdict(name, None, sha) for name, sha in sorted(actual.items())]  # new outputs: not identical
    return Verification(inputs, outputs, software)


def _retargeted(argv: list[str], flag: str, target: str) -> list[str]:
    """The recorded command line with its output folder (or lake) replaced by `target`."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == flag:
            skip = True
            continue
        if arg.startswith(flag + "="):
            continue
        out.append(arg)
    return [*out, flag, target]


def _sha_or_none(path: str) -> str | None:
    """An input's hash now, or None where it is gone: a missing file, a glob or folder whose files are
    gone (a changed input, exit 1, not bad input), or what is not a file or folder (a FIFO, a device:
    never read, so a receipt cannot make verify hang)."""
    import stat

    if "://" not in path:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            mode = None
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return None
    try:
        return file_sha256(path)
    except (OSError, RecordError):
        return None


def verification_lines(result: Verification) -> list[str]:
    """What `autheval verify` prints: one line per changed input, per output and per changed package."""
    lines = []
    for v in result.inputs:
        if not v.identical:
            assert v.expected is not None  # an input's hash is always recorded (verify)
            lines.append(f"input changed: {v.name} (recorded {v.expected[:12]}, now {(v.actual or 'missing')[:12]})")
    for package, (was, now) in result.software.items():
        lines.append(f"software differs: {package} {was or 'absent'} -> {now or 'absent'}")
    if result.rerun_error:
        lines.append(f"re-run failed: {result.rerun_error}")
    for v in result.outputs:
        if v.identical:
            lines.append(f"identical  {v.name}")
        elif v.expected is None:
            lines.append(f"new        {v.name} (not in the receipt)")
        elif v.actual is None:
            lines.append(f"missing    {v.name} (the re-run did not write it)")
        else:
            lines.append(f"DIFFERENT  {v.name} (recorded {v.expected[:12]}, re-derived {v.actual[:12]})")
    same = sum(v.identical for v in result.outputs)
    lines.append(f"{same} of {len(result.outputs)} outputs identical" + ("" if result.identical else "; NOT VERIFIED"))
    return lines
