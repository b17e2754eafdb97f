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
import errno
import fcntl
import http.client
import json
import os
import shlex
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import NoReturn

from autheval import __version__
from autheval.errors import RecordError
from autheval.parse import load_json
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
    """A notifier is a command or a URL (http:// or https://, with a host), not both; raises ValueError
    (one line naming the variable)."""
    if command and url:
        raise ValueError(
            "declare one notifier: a command (AUTHEVAL_NOTIFY_COMMAND) or a URL (AUTHEVAL_NOTIFY_URL), not both"
        )
    if command:
        _argv(command)
    if url:
        _check_url(url)


def _argv(command: str) -> list[str]:
    """The command split like a shell would (it is not run by one); a command that cannot be split or run
    as given is one ValueError line."""
    if "\0" in command:
        raise ValueError(f"AUTHEVAL_NOTIFY_COMMAND {command!r}: must not contain a NUL character")
    try:
        argv = shlex.split(command)
    except ValueError as err:  # No closing quotation, No escaped character
        raise ValueError(f"AUTHEVAL_NOTIFY_COMMAND {command!r}: {err} (it is split as a shell would)") from None
    if not argv:
        raise ValueError(f"notifier command {command!r} is empty (AUTHEVAL_NOTIFY_COMMAND)")
    return argv


def _check_url(url: str) -> None:
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"notifier URL {url!r} must start with http:// or https:// (AUTHEVAL_NOTIFY_URL)")
    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise ValueError(f"notifier URL {url!r} must not contain spaces or control characters (AUTHEVAL_NOTIFY_URL)")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number from 0 to 65535
    except ValueError as err:
        raise ValueError(f"notifier URL {url!r}: {err} (AUTHEVAL_NOTIFY_URL)") from None
    if not parts.hostname:
        raise ValueError(f"notifier URL {url!r} names no host (AUTHEVAL_NOTIFY_URL)")


def send(payload: dict, command: str = "", url: str = "", timeout: float = 30.0) -> None:
    """Deliver one alert: run `command` (split like a shell would, not run by one) with the JSON on its
    stdin and AUTHEVAL_ALERT_ID in its environment, or POST the JSON to `url`. Raises NotifyError
    unless the command exits 0 (its exit decides, not its pipes: a child it leaves running does not
    hold the send up) or the server answers the POST itself 2xx (a redirect is not followed: it is
    not a delivery)."""
    check_notifier(command, url)
    body = json.dumps(payload, sort_keys=True).encode("utf-8")
    if command:
        _run_command(_argv(command), body, str(payload.get("alert_id", "")), timeout)
    elif url:
        _post(url, body, timeout)
    else:
        raise NotifyError("no notifier declared (AUTHEVAL_NOTIFY_COMMAND or AUTHEVAL_NOTIFY_URL)")


STDERR_SHOWN = 4096  # bytes of a failed command's stderr read back for its last line
LINE_SHOWN = 200  # characters of that line shown


def _last_line(raw: bytes) -> str:
    lines = [line.strip() for line in raw.decode("utf-8", "replace").splitlines() if line.strip()]
    if not lines:
        return ""
    line = "".join(c if c.isprintable() else "?" for c in lines[-1])
    return line if len(line) <= LINE_SHOWN else line[: LINE_SHOWN - 3] + "..."


def _run_command(argv: list[str], body: bytes, alert_id: str, timeout: float) -> None:
    """Run the notifier command with `body` on its stdin. Delivered when the command itself exits 0:
    its stdin and stderr are files, not pipes, and stdout goes nowhere, so a child it leaves behind
    holding them does not make a delivered alert look timed out (and sent again). A command still
    running after `timeout` is stopped with its process group, and not delivered; one killed by a
    signal is not delivered either."""
    env = {**os.environ, "AUTHEVAL_ALERT_ID": alert_id}
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
        stdin.write(body)
        stdin.seek(0)
        try:
            process = subprocess.Popen(
                argv, stdin=stdin, stdout=subprocess.DEVNULL, stderr=stderr, env=env, start_new_session=True
            )
        except OSError as err:
            raise NotifyError(f"notifier command {argv[0]}: {err.strerror or err}") from None
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise NotifyError(f"notifier command {argv[0]} did not exit within {timeout:g} s; stopped") from None
        except BaseException:  # Ctrl-C, SIGTERM: the command does not outlive the run
            _stop(process)
            raise
        if code == 0:
            return
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            raise NotifyError(f"notifier command {argv[0]} was killed by signal {name}: not delivered")
        stderr.seek(max(0, stderr.seek(0, os.SEEK_END) - STDERR_SHOWN))
        said = _last_line(stderr.read())
        raise NotifyError(f"notifier command {argv[0]} exited {code}" + (f": {said}" if said else ""))


def _descendants(pid: int) -> list[int]:
    """The processes under `pid` (children, theirs, ...) as /proc shows them now (Linux; [] elsewhere)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def _stop(process: subprocess.Popen) -> None:
    """Kill the command, its process group and every process still under it (a child that left the group
    with setsid is found through its parent). A process whose parent already ended (a daemon's double
    fork) hangs under init and is beyond reach: a notifier must not leave one."""
    tree = _descendants(process.pid)
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in tree:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    process.wait()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as an error: urllib would follow a 301/302/303 with a GET without the
    alert, take the 200 of that page for a delivery, and the alert would be lost."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


RESPONSE_READ = 65536  # bytes of a 2xx answer read (the answer is not used; the status decides)


def _post(url: str, body: bytes, timeout: float) -> None:
    """POST `body`; delivered only when the POST itself is answered 2xx."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": f"autheval/{__version__}"},
    )
    connections: list[http.client.HTTPConnection] = []

    def tracked(cls):
        def make(host, **kwargs):
            connections.append(cls(host, **kwargs))
            return connections[-1]

        return make

    class _Http(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(tracked(http.client.HTTPConnection), req)

    class _Https(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(tracked(http.client.HTTPSConnection), req, context=self._context)  # type: ignore[attr-defined]

    expired = threading.Event()

    def cut() -> None:  # the deadline: a server that answers a byte at a time is not waited on past it
        expired.set()
        for connection in connections:
            with contextlib.suppress(OSError, AttributeError):
                connection.sock.shutdown(socket.SHUT_RDWR)

    opener = urllib.request.build_opener(_NoRedirects, _Http, _Https)
    watchdog = threading.Timer(timeout, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        with opener.open(request, timeout=timeout) as response:
            status = response.status
            response.read(RESPONSE_READ)
            if expired.is_set():
                raise OSError("cut at the deadline")
    except Exception as err:
        if expired.is_set():
            raise NotifyError(
                f"notifier URL {url}: timed out: no whole answer within {timeout:g} s (connect, send and every read "
                "together); not delivered"
            ) from None
        _post_error(url, err)
    finally:
        watchdog.cancel()
    if not 200 <= status < 300:
        raise NotifyError(f"notifier URL {url} answered {status}: not delivered")


def _post_error(url: str, err: Exception) -> NoReturn:
    """NotifyError (one line) for what a POST raised."""
    try:
        raise err
    except urllib.error.HTTPError as err:
        headers = getattr(err, "headers", None)  # None where urllib made the error itself
        where = headers.get("Location") if headers and 300 <= err.code < 400 else None
        moved = f" (a redirect to {where!r}, not followed: declare the URL that accepts the POST)" if where else ""
        raise NotifyError(f"notifier URL {url} answered {err.code} {err.reason}{moved}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        said = getattr(err, "reason", None) or str(err) or type(err).__name__
        raise NotifyError(f"notifier URL {url}: {said}") from None


MAX_NOTIFIED_BYTES = 64 << 20  # far past any lake's record of sent alerts (about 1 KB an alert)


def _monitor_folder(lake_root: Path) -> Path:
    """<lake>/monitor, made if missing; a link or anything but a folder there is refused (RecordError):
    the notifier writes only inside the lake."""
    folder = lake_root / NOTIFIED.parent
    if folder.is_symlink():
        raise RecordError(str(folder), None, "is a symbolic link; a lake writes only into folders of its own") from None
    with contextlib.suppress(FileExistsError):
        folder.mkdir(parents=True)
    if folder.is_symlink() or not folder.is_dir():
        raise RecordError(str(folder), None, "is not a folder; the lake's monitor folder must be one") from None
    return folder


def _open_plain(path: Path, flags: int, what: str) -> int:
    """A descriptor of the regular file `path`: never through a link (O_NOFOLLOW), never blocking on a
    FIFO (O_NONBLOCK, then fstat); a link, a folder, a FIFO or a device is one RecordError naming it."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if path.is_symlink():
            raise RecordError(str(path), None, f"is a symbolic link; {what} must be a plain file: remove it") from None
        odd = os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode)
        if odd or err.errno in (errno.ENXIO, errno.EISDIR):
            rule = f"is not a regular file; {what} must be a plain file: remove it"
            raise RecordError(str(path), None, rule) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(str(path), None, f"is not a regular file; {what} must be a plain file: remove it")
    os.set_blocking(fd, True)
    return fd


@contextlib.contextmanager
def _locked(lake_root: Path) -> Iterator[None]:
    _monitor_folder(lake_root)
    fd = _open_plain(lake_root / NOTIFIED_LOCK, os.O_WRONLY | os.O_CREAT | os.O_APPEND, "a lock")
    with os.fdopen(fd, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released with the file, or by the kernel with the process
        yield


def _read_plain(path: Path) -> bytes:
    """The bytes of a state file, never through a link (a link to a file elsewhere is refused), at most
    MAX_NOTIFIED_BYTES (a larger one is refused before it is read)."""
    fd = _open_plain(path, os.O_RDONLY, "the record of notified alerts")
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(handle.fileno()).st_size > MAX_NOTIFIED_BYTES:
            raise RecordError(
                str(path), None, f"larger than {MAX_NOTIFIED_BYTES:,} bytes; not a record of notified alerts"
            )
        data = handle.read(MAX_NOTIFIED_BYTES + 1)
    if len(data) > MAX_NOTIFIED_BYTES:
        raise RecordError(str(path), None, f"larger than {MAX_NOTIFIED_BYTES:,} bytes; not a record of notified alerts")
    return data


def notified(lake_root: Path | str) -> dict[str, dict]:
    """{alert_id: what was sent and when} of every alert sent from this lake. The record is
    {"notified": {id: {...}}} and nothing else: any other shape is refused, never taken for empty."""
    path = Path(lake_root) / NOTIFIED
    if not path.exists() and not path.is_symlink():
        return {}
    aside = "move it aside to start a new one"
    try:
        record = load_json(_read_plain(path), str(path))
        if not isinstance(record, dict) or set(record) != {"notified"}:
            raise ValueError('a JSON object {"notified": {...}} is expected')
        sent = record["notified"]
        if not isinstance(sent, dict) or not all(isinstance(v, dict) for v in sent.values()):
            raise ValueError('"notified" must map each alert id to what was sent')
        return dict(sent)
    except RecordError as err:
        raise RecordError(err.source, None, f"not a record of notified alerts ({err.rule}); {aside}") from None
    except (ValueError, KeyError, TypeError) as err:
        raise RecordError(str(path), None, f"not a record of notified alerts ({err}); {aside}") from None


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
