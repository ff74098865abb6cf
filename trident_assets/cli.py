"""The ``trident`` command: the demo, state inspection and the embedded log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from trident_assets.errors import TridentError
from trident_assets.log.cli import log_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="trident",
    help="Exactly-once Trident topologies on Dagster + PySpark.",
    no_args_is_help=True,
)
state_app = typer.Typer(name="state", help="Read persisted states.", no_args_is_help=True)
app.add_typer(log_app, name="log")
app.add_typer(state_app, name="state")

HomeOption = Annotated[
    Path, typer.Option("--home", envvar="TRIDENT_HOME", help="trident home (log and state).")
]
DEFAULT_HOME = Path(".trident")


@app.command()
def demo(
    home: HomeOption = DEFAULT_HOME,
    sentences: Annotated[int, typer.Option(help="Sentences to produce.")] = 20_000,
    batch_size: Annotated[int, typer.Option(help="Max sentences per batch.")] = 4_000,
    kill_txid: Annotated[int, typer.Option(help="The txid whose process is killed.")] = 3,
) -> None:
    """Run word count through Dagster, crash a batch mid-commit, replay it, check exactly-once."""
    from trident_assets.demo import run_demo

    if not run_demo(home, sentences, batch_size, kill_txid):
        raise typer.Exit(1)


def _open(home: Path, database: Path | None) -> object:
    from trident_assets.backends.duckdb_store import DuckDBStore

    path = database or home / "state.duckdb"
    if not path.exists():
        typer.echo(f"no state store at {path}; run a topology first or pass --database", err=True)
        raise typer.Exit(2)
    return DuckDBStore(path)


@state_app.command("get")
def state_get(
    topology: str,
    state: str,
    key: Annotated[list[str], typer.Argument(help="The key's values (one per group field).")],
    home: HomeOption = DEFAULT_HOME,
    database: Annotated[Path | None, typer.Option(help="DuckDB state file.")] = None,
) -> None:
    """Print the current value of KEY in TOPOLOGY's STATE."""
    from trident_assets.core.maps import OpaqueMap

    store = _open(home, database)
    try:
        table = f"{topology}__{state}"
        layout = store.layout(table)  # type: ignore[attr-defined]
        if layout is None:
            typer.echo(
                f"state {state!r} of {topology!r} does not exist (no table {table})", err=True
            )
            raise typer.Exit(2)
        typed = tuple(
            int(v) if t == "BIGINT" else v for v, t in zip(key, layout.key_types, strict=False)
        )
        value = (
            OpaqueMap(store.map(table)).multi_get([typed])[0]
            if layout.kind == "opaque"
            else (
                store.map(table).multi_get([typed])[0]  # type: ignore[attr-defined]
            )
        )
        typer.echo(json.dumps(getattr(value, "val", value), default=str))
    except TridentError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    finally:
        store.close()  # type: ignore[attr-defined]


@state_app.command("scan")
def state_scan(
    topology: str,
    state: str,
    home: HomeOption = DEFAULT_HOME,
    database: Annotated[Path | None, typer.Option(help="DuckDB state file.")] = None,
    limit: Annotated[int, typer.Option(help="Rows to show (largest values first).")] = 20,
) -> None:
    """Print TOPOLOGY's STATE, largest values first, and the last committed txid."""
    store = _open(home, database)
    try:
        data = store.scan(f"{topology}__{state}")  # type: ignore[attr-defined]
        rows = sorted(data.to_pylist(), key=lambda r: str(r["value"]), reverse=False)
        rows = sorted(
            rows,
            key=lambda r: (
                (r["value"] is None, -(r["value"] or 0))
                if isinstance(r["value"], int | float) or r["value"] is None
                else (False, 0)
            ),
        )
        table = Table(
            title=f"{topology}.{state}: {data.num_rows} keys, last committed txid "
            f"{store.last_committed(topology)}"
        )  # type: ignore[attr-defined]
        for name in data.column_names:
            table.add_column(name)
        for row in rows[:limit]:
            table.add_row(*[str(row[c]) for c in data.column_names])
        Console().print(table)
    except TridentError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from exc
    finally:
        store.close()  # type: ignore[attr-defined]


def _largest_first(row: dict[str, object]) -> tuple[int, float, str]:
    value = row["value"]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, -float(value), "")
    return (1, 0.0, str(value))


def main() -> None:
    """Entry point of the ``trident`` console script."""
    app()
