"""Alert notifications: each new alert of the monitor (autheval.monitoring.monitor: one per site x model version
x mechanism x rule whose latest look alerts, named by an `alert_id` that stays the same from run to run
for the same alert) is sent once to the declared notifier, a command (the alert as JSON on its stdin) or
an HTTP POST of the JSON to a URL.

The ids sent are kept in the lake, <lake>/monitor/notified.json, replaced atomically after each alert
sent and read under a lock, so an alert is sent once: not again on the next look, after a restart, or
from a second process notifying the same lake (the UI's sensor and `autheval monitor run` from cron). An
alert that could not be sent is not recorded and is tried again the next time. (Only a crash between a
send and its record, a few microseconds, could send one twice: losing an alert would be worse.)
No Dagster here (the sensor and the resource are in dagster_project/ and assets/monitor.py)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from autheval import __version__
from warehouse.atomic import atomic_write_text

NOTIFIED = Path("monitor") / "notified.json"
NOTIFIED_LOCK = Path("monitor") / ".notified.lock"
PAYLOAD_KIND = "autheval.monitor.alert"
# what a notification says of an alert (the alert's own keys; bounds and the confidence sequence at the
# latest look, the period it first alerted in and the latest one, the protocol that decided)
PAYLOAD_FIELDS = (
    "alert_id",
    "site",
    "model_version",
    "mechanism",
    "metric",
    "unit",
    "lower",
    "upper",
    "estimate",
    "cs_lower",
    "cs_upper",
    "n_clusters",
    "period",
    "first_period",
    "look",
    "alpha_adjusted",
    "protocol_version",
    "protocol_sha256",
)


class NotifyError(RuntimeError):
    """A notification that was not delivered: one line saying by which notifier and why."""


def alert_payload(alert: dict, lake_root: Path | str) -> dict:
    """The JSON a notifier receives for one alert: its PAYLOAD_FIELDS (those the alert has), the lake
    and the software that found it."""
    payload = {"kind": PAYLOAD_KIND, **{name: alert[name] for name in PAYLOAD_FIELDS if name in alert}}
    return {**payload, "lake": str(Path(lake_root).resolve()), "software": f"autheval {__version__}"}


def check_notifier(command: str, url: str) -> None:
    """A notifier is a command or a URL (http:// or https://), not both; raises ValueError (one line)."""
    if command and url:
        raise ValueError(
            "declare one notifier: a command (AUTHEVAL_NOTIFY_COMMAND) or a URL (AUTHEVAL_NOTIFY_URL), not both"
        )
    if command and not shlex.split(command):
        raise ValueError(f"notifier command {command!r} is empty")
    if url and not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"notifier URL {url!r} must start with http:// or https://")


def send(payload: dict, command: str = "", url: str = "", timeout: float = 30.0) -> None:
    """Deliver one alert: run `command` (split like a shell would, not run by one) with the JSON on its
    stdin and AUTHEVAL_ALERT_ID in its environment, or POST the JSON to `url`. Raises NotifyError
    unless the command exits 0 or the server answers 2xx."""
    check_notifier(command, url)
    body = json.dumps(payload, sort_keys=True).encode("utf-8")
    if command:
        argv = shlex.split(command)
        env = {**os.environ, "AUTHEVAL_ALERT_ID": str(payload.get("alert_id", ""))}
        try:
            done = subprocess.run(argv, input=body, capture_output=True, timeout=timeout, env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise NotifyError(f"notifier command {argv[0]}: {getattr(err, 'strerror', None) or err}") from None
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise NotifyError(
                f"notifier command {argv[0]} exited {done.returncode}" + (f": {said[-1]}" if said else "")
            )
    elif url:
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "User-Agent": f"autheval/{__version__}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read()
        except urllib.error.HTTPError as err:
            raise NotifyError(f"notifier URL {url} answered {err.code} {err.reason}") from None
        except (urllib.error.URLError, OSError) as err:
            raise NotifyError(f"notifier URL {url}: {getattr(err, 'reason', None) or err}") from None
    else:
        raise NotifyError("no notifier declared (AUTHEVAL_NOTIFY_COMMAND or AUTHEVAL_NOTIFY_URL)")


@contextlib.contextmanager
def _locked(lake_root: Path) -> Iterator[None]:
    lock = lake_root / NOTIFIED_LOCK
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released with the file, or by the kernel with the process
        yield


def notified(lake_root: Path | str) -> dict[str, dict]:
    """{alert_id: what was sent and when} of every alert sent from this lake."""
    path = Path(lake_root) / NOTIFIED
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))["notified"])
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a record of notified alerts ({err}); move it aside to start a new one") from None


@dataclass
class Notified:
    """What one pass did: the ids sent now, those sent before (left alone), those that failed (id, why)."""

    sent: list[str] = field(default_factory=list)
    before: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def notify_new(lake_root: Path | str, alerts: Iterable[dict], deliver: Callable[[dict], None]) -> Notified:
    """Send every alert whose alert_id this lake has not sent before, through `deliver(payload)` (raises
    NotifyError when it could not), recording each id as soon as it is sent."""
    root = Path(lake_root)
    result = Notified()
    with _locked(root):
        done = notified(root)
        for alert in alerts:
            alert_id = str(alert["alert_id"])
            if alert_id in done or alert_id in result.sent:
                result.before.append(alert_id)
                continue
            payload = alert_payload(alert, root)
            try:
                deliver(payload)
            except NotifyError as err:
                result.failed.append((alert_id, str(err)))
                continue
            done[alert_id] = {"sent_at": datetime.now(UTC).isoformat(timespec="seconds"), "alert": payload}
            atomic_write_text(root / NOTIFIED, json.dumps({"notified": done}, indent=1, sort_keys=True) + "\n")
            result.sent.append(alert_id)
    return result
