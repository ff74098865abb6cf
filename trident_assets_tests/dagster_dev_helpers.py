"""Helpers of the tests that run `dagster dev` as a child process (itself, through `trident ui`
or `dg dev`), read it through GraphQL and open its pages in headless Chromium.

Every server is started in a session of its own (``start_new_session``) and stopped by its
process group, so nothing it started outlives the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from trident_assets.cli.ui import stop_process_group
from trident_assets.local_ports import free_port
from trident_assets_tests.children import TRIDENT, clean_env

__all__ = [
    "CHROMIUM",
    "VIEWPORT",
    "chromium",
    "free_port",
    "gone",
    "gql",
    "need_chromium",
    "screenshot",
    "server_up",
    "show_markdown",
    "start_server",
    "start_ui",
    "stop_ui",
    "table_rows",
    "wait_for",
]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
VIEWPORT = {"width": 1400, "height": 2000}
SCREENS = Path("/tmp/trident_screens")
"""Where copies of the screenshots go, to look at them after the run."""
OUTER_ROWS = """
rows => rows
  .filter(row => row.isConnected && row.parentElement && !row.parentElement.closest("td"))
  .map(row => Array.from(row.cells).map(cell => cell.innerText.trim()))
"""
"""Cell texts of the page's table rows, without rows of tables nested in a cell (a preview)."""


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float, log: Path) -> Any:
    """Poll ``probe`` until it returns something true and return that; fail the test with the
    tail of ``log`` after ``timeout_s``. A probe raising OSError, KeyError or TypeError (a
    server not answering yet, an answer without the field yet) counts as not ready."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            got = probe()
        except (OSError, KeyError, TypeError):
            got = None
        if got:
            return got
        time.sleep(0.5)  # each probe is one local request or a read of the instance
    tail = log.read_text(errors="replace")[-4000:]
    pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}; the server's log:\n{tail}")


def gone(pid: int, *, group: bool = False) -> bool:
    """True when no process ``pid`` (``group``: no process of group ``pid``) runs."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return True
    if group:
        return False
    try:  # exited, not reaped yet (its new parent reaps it when it gets to it)
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def gql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``data`` of a GraphQL query to the webserver at ``url`` (which must answer no error)."""
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body
    return body["data"]


def server_up(url: str) -> Callable[[], Any]:
    """A probe for :func:`wait_for`: the webserver at ``url`` answers."""
    return lambda: urllib.request.urlopen(f"{url}/server_info", timeout=5)


def start_server(
    argv: list[str], cwd: Path, env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in ``cwd`` with ``env``, in a session of its own, its output in ``log``;
    SIGINT reaches it as a terminal's Ctrl-C does."""
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # a background process inherits SIGINT ignored; dagster copies it onto SIGTERM
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


def start_ui(
    cwd: Path, *args: str, log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``trident ui args`` as a user starts it in ``cwd`` (environment ``clean_env(cwd)`` unless
    given): see :func:`start_server`."""
    return start_server(
        [str(TRIDENT), "ui", *args], cwd, clean_env(cwd) if env is None else env, log
    )


def stop_ui(proc: subprocess.Popen[bytes], sig: int = signal.SIGINT) -> None:
    """Stop a server started in its own session (``sig`` to its group) and wait until nothing
    of the group runs; fail the test if anything still runs 60 s later (then killed)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None and gone(proc.pid, group=True):
            return
        time.sleep(0.2)
    stop_process_group(proc, signal.SIGKILL, timeout_s=30)
    pytest.fail(f"processes of group {proc.pid} still ran 60 s after signal {sig}")


def need_chromium() -> None:
    """Skip without Chromium, unless the run asked for the browser (TRIDENT_WITH_BROWSER=1)."""
    if CHROMIUM is None:
        if os.environ.get("TRIDENT_WITH_BROWSER") == "1":
            pytest.fail("TRIDENT_WITH_BROWSER=1 but no chromium on PATH")
        pytest.skip("no chromium (install Debian's chromium or run with TRIDENT_WITH_BROWSER=1)")


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless Chromium (skipped as :func:`need_chromium` says), closed afterwards: one browser
    for several pages (``browser.new_page(viewport=VIEWPORT)``)."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
        )
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, directory: Path, name: str) -> Path:
    """Save a full-page screenshot in ``directory`` and copy it to ``SCREENS``."""
    path = directory / name
    page.screenshot(path=str(path), full_page=True)
    SCREENS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, SCREENS / name)
    return path


def show_markdown(page: Any) -> None:
    """Open Markdown metadata values the UI shows behind a button (if it does)."""
    buttons = page.get_by_text("Show Markdown")
    for i in range(buttons.count()):
        buttons.nth(i).click()


def table_rows(page: Any) -> dict[str, list[str]]:
    """The page's table rows by first cell (metadata keys), nested tables left out.

    The UI re-renders as it polls: a row detached while the rows are read is skipped, and a
    read that fails because the table was replaced is repeated (up to 3 times).
    """
    from playwright.sync_api import Error

    for attempt in range(3):
        try:
            rows = page.eval_on_selector_all("tr", OUTER_ROWS)
        except Error:
            if attempt == 2:
                raise
            time.sleep(1)
            continue
        return {cells[0]: cells[1:] for cells in rows if cells}
    raise AssertionError("unreachable")
