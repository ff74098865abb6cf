"""``trident outputs`` and ``trident dead-letters``: the per-txid rows a topology produced.

An output ``name`` of topology ``t`` is stored with a ``txid`` column per row; its recent
txids are kept (older ones are dropped as new batches commit). Dead letters are the records
a scheme could not decode, with where they came from. Both read the state file read-only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from trident_assets.cli.common import (
    DEFAULT_HOME,
    DatabaseOption,
    Format,
    FormatOption,
    HomeOption,
    WaitOption,
    cli_errors,
    emit,
    open_state,
)
from trident_assets.cli.replica import OUTPUT_INFIX, topologies
from trident_assets.names import DEAD_LETTERS_TABLE, check_topology, validate_identifier

if TYPE_CHECKING:
    from trident_assets.backends.state_store import StateStore

__all__ = ["dead_letters", "outputs"]


def _tables(store: StateStore) -> set[str]:
    rows = store.fetch_rows(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() "
        "AND table_catalog = current_database() AND table_type = 'BASE TABLE'"
    )
    return {r[0] for r in rows}


def _check_topology(store: StateStore, topology: str) -> None:
    validate_identifier(topology, "topology")
    check_topology(topology, topologies(store), f"state file {store.path}")


def _output_table(store: StateStore, topology: str, output: str) -> str:
    _check_topology(store, topology)
    validate_identifier(output, "output")
    prefix = f"{topology}{OUTPUT_INFIX}"
    tables = _tables(store)
    table = f"{prefix}{output}"
    if table not in tables:
        from trident_assets.cli.replica import no_output

        raise no_output(
            topology, output, sorted(t[len(prefix) :] for t in tables if t.startswith(prefix))
        )
    return table


def outputs(
    topology: Annotated[str, typer.Argument(help="Topology name, e.g. word_count.")],
    output: Annotated[str, typer.Argument(help="Output name, e.g. words.")],
    txid: Annotated[
        int | None, typer.Option("--txid", min=1, help="Only this txid's rows (default: all kept).")
    ] = None,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
) -> None:
    """Print the rows of TOPOLOGY's OUTPUT per txid (the recent txids are kept).

    Reads the home's replica when it has one (lock-free), else the state file read-only.
    """
    from trident_assets.cli.replica import check_kept, home_replica, output_rows

    with cli_errors():
        replica = home_replica(home, database)
        if replica is not None:
            result, low, high = output_rows(replica, topology, output, txid)
        else:
            with open_state(home, database, wait) as store:
                name = f'"{_output_table(store, topology, output)}"'  # validated identifiers
                low, high = store.fetch_rows(f"SELECT min(txid), max(txid) FROM {name}")[0]
                check_kept(topology, output, txid, store.last_committed(topology), low, high)
                where, params = ("WHERE txid = ?", [txid]) if txid is not None else ("", [])
                width = store.fetch_arrow(f"SELECT * FROM {name} LIMIT 0").num_columns
                order = ", ".join(str(i) for i in range(1, width + 1))
                sql = f"SELECT * FROM {name} {where} ORDER BY {order}"
                result = store.fetch_arrow(sql, params)
    at = f"txid {txid}" if txid is not None else f"txids {low}..{high}"
    title = f"{topology}.{output}: {result.num_rows} rows, {at}"
    emit(result.to_pylist(), result.column_names, fmt, title)


def dead_letters(
    topology: Annotated[
        str | None, typer.Argument(help="Only this topology's dead letters (default: all).")
    ] = None,
    n: Annotated[int, typer.Option("-n", "--lines", help="How many, latest first.", min=1)] = 20,
    records: Annotated[
        bool,
        typer.Option(
            "--records",
            help="Show each dead letter's record: its bytes as text (hex if not UTF-8); "
            "a window's dead letter: its tuple as JSON.",
        ),
    ] = False,
    home: HomeOption = DEFAULT_HOME,
    database: DatabaseOption = None,
    fmt: FormatOption = Format.table,
    wait: WaitOption = 0.0,
) -> None:
    """List the latest dead letters: records a scheme or a window refused, where from, and why.

    A spout's are records its scheme could not decode; an event-time window's (spout
    ``window:<state>``) are late records and records whose event time is unreadable.
    Reads the home's replica when it has one (lock-free), else the state file read-only.
    """
    from trident_assets.cli.replica import dead_letter_rows, home_replica

    with cli_errors():
        replica = home_replica(home, database)
        if replica is not None:
            rows, total = dead_letter_rows(replica, topology, n)
        else:
            with open_state(home, database, wait) as store:
                rows, total = _stored_dead_letters(store, topology, n)
    columns = ["topology", "txid", "spout", "topic", "partition", "offset", "reason"]
    if records:
        columns.append("record")
        rows = [{**r, "record": record_text(r["value"])} for r in rows]  # type: ignore[arg-type]
    title = f"{total} dead letters" + (f" of {topology}" if topology else "")
    if len(rows) < total:
        title += f" (latest {len(rows)} shown)"
    emit(rows, columns, fmt, title)


def _stored_dead_letters(
    store: StateStore, topology: str | None, n: int
) -> tuple[list[dict[str, object]], int]:
    """The latest ``n`` dead letters in ``store`` (of ``topology``, or all) and their count."""
    if topology is not None:
        validate_identifier(topology, "topology")
    rows: list[dict[str, object]] = []
    total = 0
    if DEAD_LETTERS_TABLE in _tables(store):
        where, params = ("WHERE topology = ?", [topology]) if topology else ("", [])
        total = store.fetch_rows(f"SELECT count(*) FROM {DEAD_LETTERS_TABLE} {where}", params)[0][0]
        rows = store.fetch_arrow(
            f'SELECT topology, txid, spout, topic, partition, "offset", reason, value '
            f"FROM {DEAD_LETTERS_TABLE} {where} "
            f'ORDER BY txid DESC, topic, partition, "offset" DESC LIMIT ?',
            [*params, n],
        ).to_pylist()
    if topology is not None and total == 0:
        _check_topology(store, topology)  # no dead letters: is it a topology at all?
    return rows, total


def record_text(value: bytes | None) -> str | None:
    """A dead letter's record as text: its bytes as UTF-8, else ``0x`` and their hex."""
    if value is None:
        return None
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + bytes(value).hex()
