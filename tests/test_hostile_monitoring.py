"""Hostile input to monitoring (issue 27): the notifier against a real local HTTP server (redirects, 500,
a hanging endpoint) and real commands (a child left holding the pipes, a hang, bad quoting, metacharacters);
the lake's record of notified alerts (deep, linked); names that land as sites, model versions and batches
(whitespace, `all` in any case, control characters) and the simulator's flags that would write them; and
deeply nested JSON or YAML, alias bombs and repeated keys in every parser, each refused in one line."""

from __future__ import annotations

import http.server
import json
import os
import signal
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from autheval.cli.main import main
from autheval.errors import RecordError
from autheval.monitoring.landing import read_landed
from autheval.monitoring.notify import NOTIFIED, NotifyError, check_notifier, notified, notify_new, send
from autheval.monitoring.protocol import ProtocolError, parse_protocol

ALERTS = [{"alert_id": "a1", "site": "site-1"}, {"alert_id": "a2", "site": "site-2"}]

# --- the notifier over HTTP: only a 2xx answer to the POST itself is a delivery ----------------------


class Endpoint(http.server.BaseHTTPRequestHandler):
    """POST /alerts answers the server's `answer` (a 3xx with Location: /moved); GET /moved answers 200;
    POST /hang waits until the test releases it. Every request is recorded (method, path, body)."""

    def _record(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.server.requests.append((self.command, self.path, self.rfile.read(length)))

    def do_GET(self):
        self._record()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"welcome")

    def do_POST(self):
        self._record()
        if self.path == "/hang":
            self.server.release.wait(10)
            return
        self.send_response(self.server.answer)
        if 300 <= self.server.answer < 400:
            self.send_header("Location", "/moved")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    server.requests, server.answer, server.release = [], 200, threading.Event()
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def _url(server, path="/alerts") -> str:
    return f"http://127.0.0.1:{server.server_port}{path}"


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_a_delivery_and_nothing_is_recorded(tmp_path, endpoint, code):
    endpoint.answer = code
    result = notify_new(tmp_path, ALERTS, lambda p: send(p, url=_url(endpoint), timeout=5))
    assert result.sent == [] and [a for a, _ in result.failed] == ["a1", "a2"]
    assert all(f"answered {code}" in why and "not followed" in why for _, why in result.failed)
    assert [m for m, _, _ in endpoint.requests] == ["POST", "POST"]  # no GET of the redirect's target
    assert not (tmp_path / NOTIFIED).exists()
    endpoint.answer = 200  # the next run sends them
    assert notify_new(tmp_path, ALERTS, lambda p: send(p, url=_url(endpoint), timeout=5)).sent == ["a1", "a2"]
    assert set(notified(tmp_path)) == {"a1", "a2"}


@pytest.mark.parametrize("code, delivered", [(200, True), (202, True), (204, True), (500, False), (404, False)])
def test_only_a_2xx_answer_is_a_delivery(tmp_path, endpoint, code, delivered):
    endpoint.answer = code
    result = notify_new(tmp_path, ALERTS[:1], lambda p: send(p, url=_url(endpoint), timeout=5))
    assert (result.sent == ["a1"]) is delivered
    assert ((tmp_path / NOTIFIED).exists()) is delivered
    body = json.loads(endpoint.requests[0][2])
    assert body["alert_id"] == "a1" and body["kind"] == "autheval.monitor.alert"


def test_a_hanging_endpoint_times_out_and_is_not_recorded(tmp_path, endpoint):
    result = notify_new(tmp_path, ALERTS[:1], lambda p: send(p, url=_url(endpoint, "/hang"), timeout=0.3))
    assert result.sent == [] and "timed out" in result.failed[0][1]
    assert not (tmp_path / NOTIFIED).exists()


def test_a_refused_connection_is_one_line_not_recorded(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = notify_new(tmp_path, ALERTS[:1], lambda p: send(p, url=f"http://127.0.0.1:{port}/", timeout=2))
    assert result.sent == [] and len(result.failed[0][1].splitlines()) == 1


@pytest.mark.parametrize(
    "url, said",
    [
        ("http://127.0.0.1:99999/", "Port out of range"),
        ("http://127.0.0.1:port/", "Port could not be cast"),
        ("http:///alerts", "names no host"),
        ("http://127.0.0.1/a b", "spaces or control characters"),
        ("http://127.0.0.1/\nHost: evil", "spaces or control characters"),
        ("file:///etc/passwd", "must start with http"),
    ],
)
def test_a_bad_notifier_url_is_one_line_naming_the_variable(url, said):
    with pytest.raises(ValueError) as err:
        check_notifier("", url)
    assert said in str(err.value) and "AUTHEVAL_NOTIFY_URL" in str(err.value)
    assert len(str(err.value).splitlines()) == 1


# --- the notifier command: its exit decides, not its pipes --------------------------------------------


def _kill_recorded(pid_file: Path) -> None:
    """End the background child a test command started (by its recorded id), if it is still there."""
    if pid_file.exists():
        try:
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def test_a_command_that_leaves_a_child_holding_its_pipes_is_delivered_once(tmp_path):
    pid_file, sent = tmp_path / "child.pid", tmp_path / "sent"
    # reads the alert, starts a child that keeps stdout and stderr open for 30 s, exits 0 at once
    script = f"cat > {sent}; sleep 30 & echo $! > {pid_file}; exit 0"
    command = f"sh -c '{script}'"
    try:
        first = notify_new(tmp_path, ALERTS, lambda p: send(p, command=command, timeout=5))
        assert first.sent == ["a1", "a2"] and first.failed == []
        assert json.loads(sent.read_text())["alert_id"] == "a2"
        again = notify_new(tmp_path, ALERTS, lambda p: send(p, command=command, timeout=5))
        assert again.sent == [] and again.before == ["a1", "a2"]  # not sent again next run
    finally:
        _kill_recorded(pid_file)


def test_a_hanging_command_is_stopped_with_its_children_and_not_recorded(tmp_path):
    pid_file = tmp_path / "child.pid"
    command = f"sh -c 'sleep 30 & echo $! > {pid_file}; wait'"
    try:
        result = notify_new(tmp_path, ALERTS[:1], lambda p: send(p, command=command, timeout=0.5))
        assert result.sent == [] and "did not exit within 0.5 s" in result.failed[0][1]
        assert not (tmp_path / NOTIFIED).exists()
        child = int(pid_file.read_text())
        stat = Path(f"/proc/{child}/stat")
        for _ in range(200):  # the process group was killed: the child is gone (or a zombie not yet reaped)
            try:
                if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            except (FileNotFoundError, ProcessLookupError):
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("the hanging command's child outlived its timeout")
    finally:
        _kill_recorded(pid_file)


def test_a_command_that_exits_non_zero_says_its_last_stderr_line(tmp_path):
    command = (
        f"{sys.executable} -c \"import sys; sys.stderr.write('first\\nmail server down\\x1b[31m\\n'); sys.exit(4)\""
    )
    with pytest.raises(NotifyError) as err:
        send({"alert_id": "a1"}, command=command, timeout=10)
    assert "exited 4: mail server down?[31m" in str(err.value) and len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize(
    "command, said",
    [
        ("python -c 'print(1)", "No closing quotation"),
        ("notify \\", "No escaped character"),
        ("   ", "is empty"),
        ("notify\0x", "NUL"),
    ],
)
def test_a_command_that_cannot_be_split_is_one_line_naming_the_variable(command, said):
    with pytest.raises(ValueError) as err:
        check_notifier(command, "")
    assert said in str(err.value) and "AUTHEVAL_NOTIFY_COMMAND" in str(err.value)


def test_metacharacters_in_an_alert_reach_the_command_as_data(tmp_path):
    pwned, seen = tmp_path / "pwned", tmp_path / "seen"
    alert = {"alert_id": "a1", "site": f"x'; touch {pwned}; echo '$(touch {pwned})\n`touch {pwned}`"}
    script = tmp_path / "notify.py"
    script.write_text(f"import sys; open({str(seen)!r}, 'w').write(sys.stdin.read())\n")
    assert notify_new(tmp_path, [alert], lambda p: send(p, command=f"{sys.executable} {script}")).sent == ["a1"]
    assert json.loads(seen.read_text())["site"] == alert["site"] and not pwned.exists()


# --- the lake's record of notified alerts -------------------------------------------------------------


def test_a_deeply_nested_record_of_notified_alerts_is_one_line(tmp_path):
    (tmp_path / "monitor").mkdir()
    (tmp_path / NOTIFIED).write_text('{"notified": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(RecordError, match=r"notified alerts \(JSON nests deeper than 64 levels\); move it aside"):
        notified(tmp_path)
    (tmp_path / NOTIFIED).write_text('{"notified": {}, "notified": {"a1": {}}}')
    with pytest.raises(RecordError, match="'notified' is given twice"):
        notified(tmp_path)


def test_links_in_place_of_the_record_or_its_lock_are_refused(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    lake = tmp_path / "lake"
    (lake / "monitor").mkdir(parents=True)
    (lake / "monitor" / ".notified.lock").symlink_to(outside)
    with pytest.raises(RecordError, match="symbolic link"):
        notify_new(lake, ALERTS, lambda p: None)
    assert outside.read_text() == "precious\n"
    (lake / "monitor" / ".notified.lock").unlink()
    (lake / NOTIFIED).symlink_to(outside)
    with pytest.raises(RecordError, match="symbolic link"):
        notified(lake)


# --- names that land as sites, model versions, batches -----------------------------------------------


def _log(tmp_path: Path, **columns) -> Path:
    n = 4
    table = {
        "case_id": [f"c{i}" for i in range(n)],
        "cluster_id": [f"k{i}" for i in range(n)],
        "proposed_action": ["a1"] * n,
        "executed_action": ["a1", "a2", "a1", "a2"],
        "utility_executed_local": [0.0] * n,
        "utility_proposed_local": [0.0, -0.5, 0.0, -0.5],
        "timestamp": ["2026-01-15"] * n,
    }
    for name, value in columns.items():
        if value is None:
            table.pop(name)
        else:
            table[name] = [value] * n
    path = tmp_path / "log.csv"
    pacsv.write_csv(pa.table(table), path)
    return path


@pytest.mark.parametrize(
    "column, value, rule",
    [
        ("site", " ", "must not be empty or blank"),
        ("site", "site-1 ", "must not begin or end with whitespace"),
        ("site", "\tsite-1", "must not begin or end with whitespace"),
        ("site", "site\u00a0", "must not begin or end with whitespace"),
        ("site", "site\n1", "control characters"),
        ("site", "ALL", "names the rows pooled over every one"),
        ("model_version", "all ", "must not begin or end with whitespace"),
        ("model_version", "All", "names the rows pooled over every one"),
        ("risk_stratum", "high ", "must not begin or end with whitespace"),
    ],
)
def test_a_name_that_is_not_one_is_refused_where_it_lands(tmp_path, column, value, rule):
    with pytest.raises(RecordError) as err:
        read_landed(_log(tmp_path, **{"site": "site-1", column: value}))
    assert f"column '{column}'" in str(err.value) and rule in str(err.value)
    assert len(str(err.value).splitlines()) == 1


@pytest.mark.parametrize("batch", ["all", " b1", "b1 "])
def test_a_batch_label_is_a_name_too(tmp_path, batch):
    with pytest.raises(RecordError, match="column 'batch'"):
        read_landed(_log(tmp_path, timestamp=None, batch=batch))


def test_good_names_still_land(tmp_path):
    _, table = read_landed(_log(tmp_path, site="site 1", model_version="v1.2+b", risk_stratum="high", batch="b1"))
    assert set(table.column("site").to_pylist()) == {"site 1"}


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--model-version", "all"], "--model-version"),
        (["--model-version", "ALL"], "--model-version"),
        (["--drift", "site-1:proposer_quality:-0.5:from=1:version=ALL"], "version="),
        (["--drift", "site-1:proposer_quality:1e308:from=1"], "at most 100"),
        (["--drift", "site-1:proposer_quality:90:from=1", "--drift", "all:proposer_quality:90:from=1"], "+-100"),
    ],
)
def test_the_simulator_refuses_what_landing_would_refuse(tmp_path, capsys, flags, said):
    out = tmp_path / "logs"
    code = main(["synth", "deployment", "--sites", "1", "--months", "1", "--out", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1
    assert not out.exists() or not any(out.iterdir())


def test_a_compare_arm_named_with_whitespace_is_refused(tmp_path, capsys):
    log = _log(tmp_path)
    code = main(["compare", "--arm", f" a={log}", "--arm", f"b={log}", "--output-dir", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "--arm" in err and "whitespace" in err


# --- deeply nested JSON and YAML, alias bombs, repeated keys: one line in every parser ------------------

DEEP_JSON = "[" * 50_000 + "]" * 50_000
DEEP_YAML = "a: " + "[" * 50_000 + "]" * 50_000 + "\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, k in zip("abcdef", "bcdefg")
)


def test_the_shared_loaders_bound_depth_and_refuse_repeated_keys():
    from autheval.parse import MAX_DEPTH, load_json, load_yaml

    ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    inner = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)  # under the mapping: 64 levels in all
    assert load_json(ok, "x.json") is not None and load_yaml(f"a: {inner}\n", "x.yaml") is not None
    with pytest.raises(RecordError, match="nested too deeply"):
        load_yaml(f"a: {ok}\n", "x.yaml")
    with pytest.raises(RecordError, match="x.json: JSON nests deeper than 64 levels"):
        load_json("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "x.json")
    assert load_json('["[[[[", "}}}}"]', "x.json") == ["[[[[", "}}}}"]  # brackets in strings do not count
    with pytest.raises(RecordError, match="nested too deeply"):
        load_yaml(DEEP_YAML, "x.yaml")
    with pytest.raises(RecordError, match="key 'a' is given twice"):
        load_json('{"a": 1, "a": 2}', "x.json")
    with pytest.raises(RecordError, match="NaN is not a JSON number"):
        load_json('{"a": NaN}', "x.json")
    with pytest.raises(RecordError, match="key given twice"):
        load_yaml("a: 1\na: 2\n", "x.yaml")
    with pytest.raises(RecordError, match="alias bomb"):
        load_yaml(BOMB, "x.yaml")


def test_a_deep_protocol_file_is_one_line_naming_it(tmp_path, capsys):
    for text, said in (
        (DEEP_YAML.replace("a: ", "version: "), "nested too deeply for a protocol file"),
        ("version: &v [*v]\n", "recursive alias"),
        (BOMB + "version: x\n", "alias bomb"),
        ("version: a\nversion: b\n", "key given twice"),
    ):
        path = tmp_path / "protocol.yaml"
        path.write_text(text)
        assert main(["protocol", "check", str(path)]) == 2
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1
        with pytest.raises(ProtocolError):
            parse_protocol(text)


def test_deep_mavic_configs_schemas_completions_and_labels_are_one_line(tmp_path):
    from autheval.cli.mavic import _json_objects
    from models.mavic import default_schemas, load_config, parse_completion, parse_schemas

    config = tmp_path / "config.yaml"
    config.write_text(DEEP_YAML)
    with pytest.raises(RecordError, match="nested too deeply for a MAVIC config"):
        load_config(config)
    config.write_text("pmi_eps: 0.1\npmi_eps: 0.2\n")
    with pytest.raises(RecordError, match="key given twice"):
        load_config(config)
    with pytest.raises(RecordError, match="nested too deeply"):
        parse_schemas(DEEP_YAML)
    parsed = parse_completion(
        f"<morph>{DEEP_JSON}</morph>\n<final_diagnosis>MEL</final_diagnosis>",
        "dermoscopic",
        load_config(None),
        default_schemas(),
    )
    assert parsed.rule is not None and "<morph>" in parsed.rule
    with pytest.raises(RecordError) as err:
        _json_objects(['{"a": "b"}', DEEP_JSON], "labels.csv", "reference_attributes")
    assert "column 'reference_attributes'" in str(err.value) and "nests deeper than 64" in str(err.value)
    assert "row 2" in str(err.value)


def test_a_deep_ontology_and_a_deep_receipt_are_one_line(tmp_path):
    from autheval.reporting.receipt import read_receipt
    from models.ontology import parse_ontology

    with pytest.raises(RecordError, match="nested too deeply for an ontology file"):
        parse_ontology(DEEP_YAML)
    receipt = tmp_path / "receipt.json"
    receipt.write_text('{"outputs": ' + DEEP_JSON + "}")
    with pytest.raises(RecordError, match=r"not a receipt \(unreadable JSON: JSON nests deeper than 64 levels"):
        read_receipt(receipt)
    receipt.write_text('{"outputs": [], "outputs": []}')
    with pytest.raises(RecordError, match="'outputs' is given twice"):
        read_receipt(receipt)
