"""``trident launch``: run a txid of a topology in a dg project from a terminal.

``dg launch --assets KEYS --partition KEY`` runs a partition only if the Dagster instance
already holds the partition key; a topology's txid partitions are added by its coordinator
sensor (under ``dg dev``), so a terminal has no way to add the next one. This command adds it
(in txid order, as the sensor does: keys are never added out of order) to the instance at
``DAGSTER_HOME`` and then runs ``dg launch`` for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from trident_assets.cli.common import DEFAULT_HOME, HomeOption, cli_errors
from trident_assets.errors import ConfigError

__all__ = ["launch", "next_partition"]


def next_partition(keys: list[str], topology: str, txid: int) -> bool:
    """Whether txid's key must be added to ``keys`` (the topology's txid partitions).

    Raises:
        ConfigError: ``txid`` is neither known nor the next one: keys are added in order.
    """
    from trident_assets.dagster.partitions import parse_txid, txid_key

    if txid_key(txid) in keys:
        return False
    last = max((parse_txid(k) for k in keys), default=0)
    if txid != last + 1:
        msg = (
            f"txid {txid} of {topology}: its last txid partition is {last}; launch txid "
            f"{last + 1} first (txids are added and committed in order)"
        )
        raise ConfigError(msg)
    return True


def launch(
    topology: Annotated[str, typer.Argument(help="The topology's name (e.g. shop).")],
    txid: Annotated[int, typer.Argument(help="The txid to run: 1, 2, ...", min=1)],
    assets: Annotated[
        str,
        typer.Option(
            "--assets",
            help="Comma-separated asset keys to launch (as dg launch --assets), e.g. "
            "shop/spent; any of the topology's assets commits the whole txid.",
        ),
    ],
    home: HomeOption = DEFAULT_HOME,
) -> None:
    """Add txid's partition to the Dagster instance, then `dg launch` it (in a dg project).

    The instance is DAGSTER_HOME's, else HOME/dagster (created with the shipped
    dagster.yaml); `dg launch` and `dg dev` use the same when DAGSTER_HOME is exported. A txid
    already added runs again (a committed one changes nothing); a new one must be the next.
    """
    import dagster as dg

    from trident_assets.cli.ui import instance_dir
    from trident_assets.dagster.partitions import txid_key, txid_partitions

    with cli_errors():
        if not topology.isidentifier():
            msg = f"topology {topology!r} is not a topology name (e.g. shop)"
            raise ConfigError(msg)
        where = instance_dir(
            Path(os.environ.get("DAGSTER_HOME") or Path(home) / "dagster").resolve()
        )
        name = txid_partitions(topology).name
        key = txid_key(txid)
        with dg.DagsterInstance.from_config(str(where)) as instance:
            if next_partition(instance.get_dynamic_partitions(name), topology, txid):
                instance.add_dynamic_partitions(name, [key])
                typer.echo(f"added partition {key} to {name} (DAGSTER_HOME={where})", err=True)
    command = [str(Path(sys.executable).parent / "dg"), "launch", "--assets", assets]
    command += ["--partition", key]
    typer.echo(f"dg launch --assets {assets} --partition {key}", err=True)
    done = subprocess.run(command, env={**os.environ, "DAGSTER_HOME": str(where)}, check=False)
    raise typer.Exit(done.returncode)
