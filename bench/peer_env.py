"""The optional benchmark peers' own virtualenvs: PyFlink and Pathway.

Both peers pin versions that conflict with this package's: ``apache-flink`` 2.3 needs
``pyarrow < 21`` and ``pandas < 2.3``, ``pathway`` 0.33 needs ``pyarrow < 26``, while
``trident_assets`` needs ``pyarrow 26`` and ``pandas 2.3``. So each peer lives in a venv of
its own under ``bench/`` (``bench/.venv-bench-flink``, ``bench/.venv-bench-pathway``) and runs
as a child process of the benchmark; the pins are the ``bench-flink`` and ``bench-pathway``
lists of ``[tool.trident-bench.peers]`` in ``pyproject.toml``.

Install (idempotent; only what you name): ``python -m bench.peer_env install flink pathway``.
``python -m bench.peer_env status`` says which are installed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

__all__ = [
    "PEERS",
    "install",
    "install_hint",
    "missing_message",
    "peer_python",
    "pins",
    "skip_message",
]

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PEERS = ("flink", "pathway")
MODULES = {"flink": "pyflink", "pathway": "pathway"}
"""The module that must import in a peer's venv for it to count as installed."""


def venv_dir(peer: str) -> Path:
    """Where ``peer``'s virtualenv lives."""
    _check(peer)
    return BENCH / f".venv-bench-{peer}"


def _check(peer: str) -> None:
    if peer not in PEERS:
        raise ValueError(f"unknown benchmark peer {peer!r}; the peers are {', '.join(PEERS)}")


def pins(peer: str, pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The requirement specifiers of ``peer`` from ``[tool.trident-bench.peers]``."""
    _check(peer)
    table = tomllib.loads(pyproject.read_text())["tool"]["trident-bench"]["peers"]
    return list(table[f"bench-{peer}"])


def peer_python(peer: str) -> Path | None:
    """The Python of ``peer``'s venv if the peer imports there, else None."""
    python = venv_dir(peer) / "bin" / "python"
    if not python.exists():
        return None
    proc = subprocess.run(
        [str(python), "-c", f"import {MODULES[peer]}"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    return python if proc.returncode == 0 else None


def install_hint(peer: str) -> str:
    """The command that installs ``peer``."""
    _check(peer)
    return f"python -m bench.peer_env install {peer}"


def skip_message(peer: str) -> str:
    """What the benchmark prints for a peer that is not installed."""
    return f"{peer}: skipped: not installed ({install_hint(peer)})"


def missing_message(peer: str, flag: str) -> str:
    """The error for ``flag`` (which requires ``peer``) when ``peer`` is not installed."""
    return f"{flag} given but {peer} is not installed: run {install_hint(peer)}"


def install(peer: str) -> Path:
    """Create ``peer``'s venv (if missing) and install its pins; its Python."""
    target = venv_dir(peer)
    if not (target / "bin" / "python").exists():
        venv.EnvBuilder(with_pip=True, clear=False).create(target)
    python = target / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", *pins(peer)], check=True)
    return python


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("install", help="create the peers' venvs and install their pins")
    i.add_argument("peers", nargs="+", choices=PEERS)
    sub.add_parser("status", help="which peers are installed")
    args = p.parse_args(argv)
    if args.command == "install":
        for peer in args.peers:
            print(f"{peer}: installing {' '.join(pins(peer))} into {venv_dir(peer)}", flush=True)
            print(f"{peer}: ready ({install(peer)})", flush=True)
    else:
        for peer in PEERS:
            python = peer_python(peer)
            print(f"{peer}: installed ({python})" if python else skip_message(peer))


if __name__ == "__main__":
    main(sys.argv[1:])
