"""What was done about each alert, recorded in the lake: `autheval monitor ack` appends one row to the
append-only table `monitor_acknowledgements` (the alert's id, series, rule and the look it alerted from;
the action, who, a note, when in UTC, the lake run that committed it and the snapshot it read), committed
as a snapshot of its own under the lake's writer lock. A row once written is never rewritten or removed;
a `monitor run` carries the table forward untouched (it writes other tables).

An alert exists in the lake when its id is one of the monitor table's alerts (each run of consecutive
alerting looks of a site x model version x mechanism x rule, in force or ended: sql/recurring/
monitor_alert_episodes.sql, named as autheval.monitoring.monitor.alert_id names it) or one of the
decision record's (the looks as first decided, autheval.monitoring.decisions), so an alert that later
data recomputed away can still be acknowledged as it was sent. Refused in one line (RecordError, exit 2),
nothing written: an unknown id, an action not in ACK_ACTIONS, an empty --by or --note, control characters
or an over-long text, and the same action by the same person with the same note a second time (a
repeated command, not a new fact). Core functions only (no Dagster)."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime

import pyarrow as pa

from autheval.columns import schema
from autheval.errors import RecordError
from autheval.monitoring.decisions import DECISIONS_TABLE, _conform
from autheval.monitoring.monitor import ALERT_ID_LENGTH, alert_id
from warehouse.lake import Lake
from warehouse.snapshots import new_run_id
from warehouse.sql import connect, rows

ACKS_TABLE = "monitor_acknowledgements"
MONITOR_TABLE = "monitor"
ACK_ACTIONS = ("acknowledged", "reviewed")
MAX_BY_CHARS = 200  # a name or a role
MAX_NOTE_CHARS = 2000  # a paragraph: what was looked at and what was done; documents belong elsewhere
ACKS_SCHEMA = schema(
    ("alert_id", pa.string()),
    "site model_version mechanism metric unit lower upper",
    ("first_look", pa.int64()),
    ("first_period", pa.string()),
    "protocol_version protocol_sha256 action",
    ("recorded_by", pa.string()),
    ("note", pa.string()),
    ("recorded_at", pa.string()),
    ("recorded_run", pa.string()),
    ("read_snapshot", pa.int64()),
)
_ALERT_ID = re.compile(rf"[0-9a-f]{{{ALERT_ID_LENGTH}}}")
# besides the control characters (Cc), surrogates (an undecodable argument) and line or paragraph
# separators: the bidirectional overrides and isolates, which make a printed line read otherwise than it is
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def named_alerts(episodes: list[dict]) -> list[dict]:
    """The rows of sql/recurring/monitor_alert_episodes.sql, each with its `alert_id` (the id the
    notifier and `monitor status` give the alert)."""
    return [{"alert_id": alert_id(row, row["first_period"]), **row} for row in episodes]


def alert_episodes(looks: pa.Table) -> list[dict]:
    """Every alert of a table of looks (the monitor table, or the decision record as decided): each run of
    consecutive alerting looks of one series, with its id, first and last look, and whether it is in force."""
    con = connect()
    con.register("monitor", looks)
    return named_alerts(rows(con, "recurring/monitor_alert_episodes"))


def known_alerts(store: Lake) -> dict[str, dict]:
    """{alert_id: the alert} of every alert the lake shows: its monitor table's (in force or ended), then
    its decision record's as first decided. A lake without a monitor table is one line."""
    if not store.has_table(MONITOR_TABLE):
        raise RecordError(
            str(store.root), None, f"the lake has no {MONITOR_TABLE!r} table: nothing is monitored, so no alert exists"
        )
    found = {a["alert_id"]: a for a in alert_episodes(store.read(MONITOR_TABLE))}
    if store.has_table(DECISIONS_TABLE):
        for alert in alert_episodes(store.read(DECISIONS_TABLE)):
            found.setdefault(alert["alert_id"], alert)
    return found


def read_acknowledgements(store: Lake) -> pa.Table:
    """The lake's acknowledgement record (no rows when there is none), in ACKS_SCHEMA."""
    if not store.has_table(ACKS_TABLE):
        return ACKS_SCHEMA.empty_table()
    return _conform(store.read(ACKS_TABLE), ACKS_SCHEMA)


def check_text(flag: str, value: str, limit: int) -> str:
    """A free text flag (--by, --note) as recorded: NFC-normalised (so a name typed two ways is one name)
    and stripped, with a visible character (a letter, digit, punctuation or symbol: not only zero-width
    or format characters), one line of printable text, at most `limit` characters; else one line naming
    the flag."""
    text = unicodedata.normalize("NFC", value).strip()
    if not text:
        raise RecordError(flag, None, "must not be empty")
    if not any(unicodedata.category(char)[0] in "LNPS" for char in text):
        raise RecordError(flag, None, "must hold visible text (a letter, digit or sign), not only invisible characters")
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp") or char in _BIDI:
            raise RecordError(
                flag, None, f"must be one line of text without control characters (found U+{ord(char):04X})"
            )
    if len(text) > limit:
        raise RecordError(flag, None, f"at most {limit} characters (got {len(text)})")
    return text


def check_request(alert: str, action: str, by: str, note: str) -> tuple[str, str, str, str]:
    """The flags of one acknowledgement, checked before the lake is touched: (alert id, action, by, note)."""
    if not _ALERT_ID.fullmatch(alert):
        raise RecordError(
            "--alert",
            None,
            f"{alert!r} is not an alert id ({ALERT_ID_LENGTH} hex digits, as `autheval monitor status` prints it)",
        )
    if action not in ACK_ACTIONS:
        raise RecordError("--action", None, f"{action!r} is not an action: use {' or '.join(ACK_ACTIONS)}")
    return alert, action, check_text("--by", by, MAX_BY_CHARS), check_text("--note", note, MAX_NOTE_CHARS)


def _the_alert(store: Lake, alert: str) -> dict:
    found = known_alerts(store).get(alert)
    if found is None:
        raise RecordError(
            "--alert",
            None,
            f"no alert {alert} in lake {store.root} (neither in its monitor table nor in its decision record): "
            f"`autheval monitor status --lake {store.root}` prints the alerts in force with their ids",
        )
    return found


def _checked(store: Lake, alert: str, action: str, by: str, note: str) -> tuple[dict, pa.Table]:
    """(the alert, the record so far) when `alert` exists in the lake and this action by `by` with this
    note is not recorded already; else one line."""
    found = _the_alert(store, alert)
    before = read_acknowledgements(store)
    for same in before.to_pylist():
        if (same["alert_id"], same["action"], same["recorded_by"], same["note"]) == (alert, action, by, note):
            raise RecordError(
                "--alert",
                None,
                f"{alert}: {action} by {by!r} with this note is recorded already ({same['recorded_at']}, run "
                f"{same['recorded_run']}); nothing written (a new note or action adds a row)",
            )
    return found, before


def record_acknowledgement(
    store: Lake,
    alert: str,
    action: str,
    by: str,
    note: str,
    software: str = "",
    staged: Callable[[Lake], object] = lambda store: None,
) -> dict:
    """Append one acknowledgement of `alert` to the lake's record as a snapshot of its own, under the
    writer lock; `staged(store)` then stages what commits with it (the CLI: the report, so that it shows
    the acknowledgement at once). Returns the row written, with `snapshot` (the snapshot that committed
    it). Everything is checked before the lock is taken, and again under it; a refusal writes nothing."""
    alert, action, by, note = check_request(alert, action, by, note)
    _checked(store, alert, action, by, note)
    with store.open_run(new_run_id("ack"), software=software) as run:
        found, before = _checked(store, alert, action, by, note)  # what a run committed meanwhile counts
        row = {
            **{name: found.get(name) for name in ACKS_SCHEMA.names},
            "action": action,
            "recorded_by": by,
            "note": note,
            "recorded_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "recorded_run": run.run_id,
            "read_snapshot": store.snapshot().snapshot,
        }
        store.write(ACKS_TABLE, pa.concat_tables([before, pa.Table.from_pylist([row], schema=ACKS_SCHEMA)]))
        staged(store)
    return {**row, "snapshot": run.committed[-1] if run.committed else None}


def acknowledgement_words(acks: list[dict]) -> str:
    """What was done about one alert, in one line: each row as 'action by who (when): note', in order;
    'not acknowledged' when nothing is recorded."""
    if not acks:
        return "not acknowledged"
    return "; ".join(f"{a['action']} by {a['recorded_by']} ({a['recorded_at']}): {a['note']}" for a in acks)


def alert_lines(monitor: pa.Table, acks: pa.Table, lake: str) -> list[str]:
    """One line per alert in force (its id, series, rule, since which look) with what was done about it,
    for `autheval monitor status`."""
    by_alert: dict[str, list[dict]] = {}
    for ack in acks.to_pylist():
        by_alert.setdefault(ack["alert_id"], []).append(ack)
    lines = []
    for alert in alert_episodes(monitor):
        if not alert["in_force"]:
            continue
        done = by_alert.get(alert["alert_id"], [])
        how = "" if done else f" (`autheval monitor ack --lake {lake} --alert {alert['alert_id']} ...`)"
        lines.append(
            f"alert {alert['alert_id']} {alert['site']} / {alert['model_version']} / {alert['mechanism']}: "
            f"{alert['metric']} ({alert['unit']}) since {alert['first_period']} (look {alert['first_look']}): "
            f"{acknowledgement_words(done)}{how}"
        )
    return lines
