"""`autheval ui`: the Dagster UI for this project on 127.0.0.1 (`dagster dev`), supervised so that
Ctrl-C, SIGINT, SIGTERM or SIGHUP stop it with every process it started.

autheval/cli/main.py calls register(subparsers); Dagster is imported only when it runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from autheval.cli.common import _progress
from autheval.cli.flags import add_lake_flag
from autheval.errors import RecordError


def _check_port(port: int) -> None:
    """A port the UI can serve on: in range and free on 127.0.0.1 now (one line, exit 2), so that a port
    in use is not a bind error printed by a server that keeps running."""
    import socket

    if not 1 <= port <= 65535:
        raise RecordError("--port", None, f"must be a port from 1 to 65535, got {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the web server binds
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            raise RecordError(
                "--port",
                None,
                f"127.0.0.1:{port} is not free ({err.strerror or err}); stop what serves there or choose another port",
            ) from err


def cmd_ui(args) -> int:
    """Serve the Dagster UI for this project on 127.0.0.1 until Ctrl-C, SIGINT or SIGTERM, which stop it
    with every process it started, also when it was started in the background (see _serve)."""
    import os

    from assets.resources import check_environment
    from autheval.reporting.outputs import check_output_dir
    from warehouse.lake import Lake

    _check_port(args.port)
    check_output_dir(args.lake, "--lake")  # its .dagster_home is made there
    check_environment()  # every AUTHEVAL_* setting the UI's runs read (the snapshots kept too), one line each
    lake = Lake(args.lake)
    lake.snapshot()  # a lost or corrupt pointer: the same one line as every other command, before the UI starts
    home = Path(os.environ.get("DAGSTER_HOME") or lake.root / ".dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        from dagster_project.definitions import instance_yaml

        config.write_text(instance_yaml())
    env = {**os.environ, "DAGSTER_HOME": str(home), "AUTHEVAL_LAKE": str(lake.root)}
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "dev", "-m", "dagster_project", "-h", "127.0.0.1", "-p", str(args.port)]
    _progress(f"Dagster UI on http://127.0.0.1:{args.port} (lake {lake.root}); Ctrl-C or SIGTERM stops it")
    return _serve(command, env)


UI_STOP_WAIT = 30.0  # seconds dagster dev gets to stop its services before what is left is killed


def _serve(command: list[str], env: dict) -> int:
    """Run `command` (dagster dev) in a process group of its own until it exits or this process gets
    SIGINT, SIGTERM or SIGHUP. A job started with `&` from a script inherits SIGINT ignored, and dagster
    dev maps SIGTERM to its SIGINT handler, so it would ignore both: here the command starts with both
    at their defaults (this process handles them), and a signal is passed on to it as SIGINT, its clean
    shutdown. Its group (the webserver, the daemon, the code servers) then gets UI_STOP_WAIT seconds,
    SIGTERM, and SIGKILL for what is left; a second signal kills at once. Killed itself (SIGKILL), this
    process cannot pass anything on: the kernel sends the command SIGINT (_interrupt_when_orphaned).
    Exit 0 after a requested stop, else the command's own status."""
    import contextlib
    import os
    import signal
    import subprocess
    import time

    received: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in stops}
    try:
        # a signal this process handles is at its default in the child after exec (an ignored one is not)
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, process_group=0, preexec_fn=_interrupt_when_orphaned
        )
        while process.poll() is None and not received:
            time.sleep(0.2)
        if received:
            process.send_signal(signal.SIGINT)
        for sig, wait in ((None, UI_STOP_WAIT), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if sig is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and len(received) < 2 and _group_runs(process):
                time.sleep(0.2)
            if not _group_runs(process):
                break
        process.wait()
        return 0 if received else process.returncode
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt_when_orphaned() -> None:
    """In the child before exec (Linux): SIGINT when this process dies, even by SIGKILL, so that dagster
    dev still stops its services. Elsewhere nothing."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGINT))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _group_runs(process) -> bool:
    """Does any process of `process`'s group still run (the leader is reaped on the way; a member that
    has exited but is not reaped yet, a zombie, does not count where /proc tells)?"""
    import os

    process.poll()
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    if not Path("/proc/self/stat").exists():
        return True
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (name) ": state, ppid, pgrp, ...
        if len(fields) > 2 and fields[2] == str(process.pid) and fields[0] != "Z":
            return True
    return False


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ui` to the `autheval` parser."""
    p = subparsers.add_parser("ui", help="the Dagster UI for this project on 127.0.0.1")
    p.add_argument("--port", type=int, default=3000, help="port (default 3000)")
    add_lake_flag(p)
    p.set_defaults(func=cmd_ui)
