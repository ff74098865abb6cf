"""Ctrl-C during ``trident demo``: seen even while Dagster runs a batch in the process.

:func:`sigint_check` watches for SIGINT through a wakeup file descriptor; :func:`was_interrupted`
tells a run Dagster ended because of one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["GRACE_S", "sigint_check", "was_interrupted"]


GRACE_S = 30.0
"""How long the demo waits for an interrupted run to wind down before it exits anyway."""


@contextlib.contextmanager
def sigint_check(on_force_exit: Callable[[], str]) -> Iterator[Callable[[], None]]:
    """Yield a function that raises KeyboardInterrupt if a SIGINT arrived since the last call.

    Dagster holds a SIGINT back while a run executes in this process and ends the run as
    failed instead (``raise_on_error=False`` returns its result, it raises nothing): the
    signal still reaches the wakeup file descriptor set here, which a watcher thread reads.
    Ctrl-C always ends the demo: a second SIGINT, or :data:`GRACE_S` seconds after the
    first while the demo has not ended, prints ``on_force_exit()`` to stderr and exits the
    process with status 130 at once (a commit is one transaction: nothing committed is lost,
    and the home's lock goes with the process). Off the main thread (no wakeup file
    descriptor can be set there) the function never raises.
    """
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    seen = threading.Event()

    sys.stderr.flush()
    stderr = os.dup(2)  # the user's stderr: the story sends file descriptor 2 to its log

    def force_exit() -> None:
        for stream in (sys.stdout, sys.__stdout__):
            with contextlib.suppress(Exception):
                stream.flush()  # the story told so far
        os.write(stderr, (on_force_exit() + "\n").encode())
        os._exit(130)

    def watch() -> None:
        timer: threading.Timer | None = None
        while chunk := reader.recv(512):
            for _ in range(chunk.count(signal.SIGINT)):
                if seen.is_set():
                    force_exit()
                seen.set()
                timer = threading.Timer(GRACE_S, force_exit)
                timer.daemon = True
                timer.start()
        if timer is not None:
            timer.cancel()

    watcher = threading.Thread(target=watch, name="trident-demo-sigint", daemon=True)
    watcher.start()
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)

    def check() -> None:
        if seen.is_set():
            raise KeyboardInterrupt

    try:
        yield check
    finally:
        if seen.is_set():  # the demo ends with its message: a second Ctrl-C changes nothing
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.set_wakeup_fd(previous)
        writer.close()  # the watcher reads the end of the stream and stops
        watcher.join()
        reader.close()
        os.close(stderr)


def was_interrupted(result: Any) -> bool:
    """True when Dagster ended the run because a SIGINT interrupted it."""
    if result.success:
        return False
    for event in result.all_events:
        data = event.step_failure_data if event.is_step_failure else None
        error = getattr(data, "error", None) if data is not None else None
        if error is None and event.is_run_failure:
            error = getattr(event.event_specific_data, "error", None)
        if error is not None and error.cls_name == "DagsterExecutionInterruptedError":
            return True
    return False
