"""Opening the publisher of one publication: its format's writer, bound to the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trident_assets.lakehouse.publisher import TablePublisher

if TYPE_CHECKING:
    from trident_assets.lakehouse.writer import TableWriter
    from trident_assets.stream.lakehouse_specs import Publication

__all__ = ["open_publisher"]


def open_publisher(publication: Publication, store: Any, kept: int) -> TablePublisher:
    """The publisher of ``publication`` for ``store`` (its table opened lazily).

    Raises:
        ConfigError: an Iceberg table with a PostgreSQL store and no ``warehouse``.
    """
    writer: TableWriter
    if publication.table.format == "delta":
        from trident_assets.lakehouse.delta import DeltaWriter

        writer = DeltaWriter(publication)
    else:
        from trident_assets.lakehouse.iceberg import IcebergWriter

        writer = IcebergWriter(publication, store)
    return TablePublisher(publication, writer, kept)
