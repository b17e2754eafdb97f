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


def _check_port(port: int, host: str = "127.0.0.1") -> None:
    """A port the UI can serve on: in range and free on `host` now (one line, exit 2), so that a port
    in use (or an address this machine does not have) is not a bind error printed by a server that keeps
    running."""
    import errno
    import socket

    if not 1 <= port <= 65535:
        raise RecordError("--port", None, f"must be a port from 1 to 65535, got {port}")
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except (OSError, UnicodeError) as err:
        raise RecordError("--host", None, f"{host!r} is not an address of this machine ({err})") from None
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the web server binds
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRNOTAVAIL:
                raise RecordError("--host", None, f"{host} is not an address of this machine") from None
            raise RecordError(
                "--port",
                None,
                f"{host}:{port} is not free ({err.strerror or err}); stop what serves there or choose another port",
            ) from err


def _lake_instance_env(lake_dir, port: int, host: str = "127.0.0.1") -> tuple:
    """What `autheval ui` and `autheval serve` check before a server starts, each failure one line: the
    address, the lake folder, every AUTHEVAL_* setting (the instance's database too), the lake's pointer,
    the instance's dagster.yaml. (lake, the environment of the Dagster processes: the lake's instance,
    where `monitor run` from cron and the demo record their runs too.)"""
    import os

    from assets.resources import check_environment
    from autheval.reporting.outputs import check_output_dir
    from warehouse.lake import Lake

    _check_port(port, host)
    check_output_dir(lake_dir, "--lake")  # its .dagster_home is made there
    check_environment()  # every AUTHEVAL_* setting the runs read (the snapshots kept too), one line each
    lake = Lake(lake_dir)
    lake.snapshot()  # a lost or corrupt pointer: the same one line as every other command, before a server starts
    from dagster_project.definitions import DAGSTER_HOME_ENV, instance_home, lake_instance

    # opened once here so that a bad dagster.yaml is one line, not a traceback
    with lake_instance(lake):
        home = instance_home(lake)
    return lake, {**os.environ, DAGSTER_HOME_ENV: str(home), "AUTHEVAL_LAKE": str(lake.root)}


def cmd_ui(args) -> int:
    """Serve the Dagster UI for this project on 127.0.0.1 until Ctrl-C, SIGINT or SIGTERM, which stop it
    with every process it started, also when it was started in the background (see _serve)."""
    lake, env = _lake_instance_env(args.lake, args.port)
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "dev", "-m", "dagster_project", "-h", "127.0.0.1", "-p", str(args.port)]
    _progress(f"Dagster UI on http://127.0.0.1:{args.port} (lake {lake.root}); Ctrl-C or SIGTERM stops it")
    return _serve(command, env)


UI_STOP_WAIT = 30.0  # seconds dagster dev gets to stop its services before what is left is killed


def _serve(command: list[str], env: dict, *more: list[str]) -> int:
    """Run `command` (dagster dev; `autheval serve` adds `more`: the webserver and the daemon) in a
    process group of its own each until one exits or this process gets SIGINT, SIGTERM or SIGHUP. A job
    started with `&` from a script inherits SIGINT ignored, and dagster dev maps SIGTERM to its SIGINT
    handler, so it would ignore both: here the commands start with both at their defaults (this process
    handles them), and a signal (or one command's exit) is passed on to the others as SIGINT, their clean
    shutdown. Each group (the webserver, the daemon, the code servers) then gets UI_STOP_WAIT seconds,
    SIGTERM, and SIGKILL for what is left; a second signal kills at once. Killed itself (SIGKILL), this
    process cannot pass anything on: the kernel sends the commands SIGINT (_interrupt_when_orphaned).
    Exit 0 after a requested stop, else the status of the command that exited first (1 if that was 0)."""
    import contextlib
    import os
    import signal
    import subprocess
    import time

    received: list[int] = []
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in stops}
    processes: list[subprocess.Popen] = []
    try:
        for each in (command, *more):  # a signal this process handles is at its default in the child after exec
            processes.append(
                subprocess.Popen(
                    each, env=env, stdin=subprocess.DEVNULL, process_group=0, preexec_fn=_interrupt_when_orphaned
                )
            )
        while all(p.poll() is None for p in processes) and not received:
            time.sleep(0.2)
        first = next((p for p in processes if p.poll() is not None), None)
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for sig, wait in ((None, UI_STOP_WAIT), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if sig is not None:
                for process in processes:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and len(received) < 2 and any(_group_runs(p) for p in processes):
                time.sleep(0.2)
            if not any(_group_runs(p) for p in processes):
                break
        for process in processes:
            process.wait()
        if received:
            return 0
        assert first is not None
        return first.returncode if not more else (first.returncode or 1)  # a service that stops is a failure
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
