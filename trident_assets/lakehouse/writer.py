"""The format side of a lakehouse table: its last published txid and the commits that publish."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

    from trident_assets.stream.lakehouse_specs import Publication

__all__ = ["TableWriter"]


class TableWriter(ABC):
    """One table in one format: its last published txid and the commits that publish one."""

    publication: Publication

    @abstractmethod
    def last_txid(self) -> int | None:
        """The last txid published to the table (None: no table, or none of ours yet).

        Raises:
            PublishError: the table holds commits that are not this publication's.
        """

    @abstractmethod
    def append(self, txid: int, rows: pa.Table) -> None:
        """Append ``rows`` as one commit stamped ``txid`` (creating the table if missing)."""

    @abstractmethod
    def merge(
        self,
        txid: int,
        rows: pa.Table,
        keys: tuple[str, ...],
        whole: Callable[[], pa.Table | None] | None = None,
    ) -> None:
        """Replace the rows of ``rows``'s ``keys`` and insert new keys: one commit, ``txid``.

        ``whole``, when given, returns the table's entire content after ``txid`` (the state's
        current values): a format whose keyed merge costs more than a rewrite may write that
        instead, with the same result.
        """

    @abstractmethod
    def replace(self, txid: int, rows: pa.Table) -> None:
        """Replace the whole table by ``rows``: one commit stamped ``txid``."""

    @abstractmethod
    def versions(self) -> dict[int, Any]:
        """Per published txid: the table version (Delta) or snapshot id (Iceberg) it made."""

    @abstractmethod
    def empty(self) -> pa.Table | None:
        """No rows with the table's columns (None: no table yet)."""
