"""`autheval serve`: a team's server (docs/deploy.md). The Dagster webserver on a declared address and the
Dagster daemon (the schedule, the landing and alert sensors, the run queue) as two long-lived processes on
the lake's instance (on PostgreSQL where $AUTHEVAL_DAGSTER_PG_URL is set), supervised as `autheval ui`
is (ui._serve): SIGTERM (systemd's stop) or Ctrl-C stops both cleanly, and one that exits stops the
other. `autheval serve --check` asks each whether it is alive: the webserver's /server_info, the daemon's
heartbeats in the instance (`dagster-daemon liveness-check`); exit 0 when both are.

autheval/cli/main.py calls register(subparsers); Dagster is imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.cli.common import _progress
from autheval.cli.flags import add_lake_flag
from autheval.cli.ui import _lake_instance_env, _serve

CHECK_TIMEOUT = 10.0  # seconds each health check waits for its answer


def cmd_serve(args) -> int:
    """Serve the webserver and run the daemon until SIGTERM, SIGINT or SIGHUP, or check both (--check)."""
    if args.check:
        return _check(args)
    lake, env = _lake_instance_env(args.lake, args.port, args.host)
    bin_dir = Path(sys.executable).parent
    webserver = [str(bin_dir / "dagster-webserver"), "-m", "dagster_project", "-h", args.host, "-p", str(args.port)]
    daemon = [str(bin_dir / "dagster-daemon"), "run", "-m", "dagster_project"]
    _progress(
        f"Dagster webserver on http://{_netloc(args.host, args.port)} and the daemon (lake {lake.root}, instance "
        f"{env['DAGSTER_HOME']}); SIGTERM or Ctrl-C stops both"
    )
    return _serve(webserver, env, daemon)


def _netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _check(args) -> int:
    """One line per service, `ok` or what is wrong; 0 when both are alive, else 1."""
    import json
    import os
    import subprocess
    import urllib.error
    import urllib.request

    from dagster_project.definitions import DAGSTER_HOME_ENV, instance_home, lake_instance

    url = f"http://{_netloc(args.host, args.port)}/server_info"
    try:
        with urllib.request.urlopen(url, timeout=CHECK_TIMEOUT) as answer:
            info = json.loads(answer.read())
        web = f"ok ({url}: dagster-webserver {info.get('dagster_webserver_version', '?')})"
    except (OSError, ValueError, urllib.error.URLError) as err:
        web = f"not answering ({url}: {getattr(err, 'reason', None) or err})"
    with lake_instance(args.lake):  # a bad $AUTHEVAL_DAGSTER_PG_URL or dagster.yaml: one line, exit 2
        home = instance_home(args.lake)
    env = {**os.environ, DAGSTER_HOME_ENV: str(home)}
    daemon_cli = Path(sys.executable).with_name("dagster-daemon")
    try:
        result = subprocess.run(
            [str(daemon_cli), "liveness-check"], env=env, capture_output=True, text=True, timeout=60
        )
        said = (result.stdout.strip().splitlines() or ["no answer"])[-1]
        daemon = f"ok ({said}; instance {home})" if result.returncode == 0 else f"not running ({said}; instance {home})"
    except subprocess.TimeoutExpired:
        daemon = f"not answering (the liveness check took over 60 s; instance {home})"
    print(f"webserver {web}")
    print(f"daemon    {daemon}")
    return 0 if web.startswith("ok") and daemon.startswith("ok") else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `serve` to the `autheval` parser."""
    p = subparsers.add_parser(
        "serve", help="a team's server: the Dagster webserver and daemon as services (docs/deploy.md)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address the webserver binds (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=3000, help="port (default 3000)")
    p.add_argument(
        "--check", action="store_true", help="check that the webserver answers and the daemon beats; exit 0 if both"
    )
    add_lake_flag(p)
    p.set_defaults(func=cmd_serve)
