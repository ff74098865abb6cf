"""Where DuckDB's and PostgreSQL's SQL differ, in one place: every other statement is shared.

A :class:`Dialect` turns the few constructs the two spell differently into SQL text: the
latest version of each key (DuckDB ``QUALIFY row_number()``, PostgreSQL ``DISTINCT ON``),
column types, sequences, raising an error from inside a statement, compaction, timestamps
from and to epoch microseconds, and bound parameter markers (``?`` everywhere in the shared
SQL; ``$n`` for PostgreSQL).
"""

from __future__ import annotations

from dataclasses import dataclass

from trident_assets.backends.map_layout import decimal_scale

__all__ = ["DUCKDB", "POSTGRES", "Dialect"]

PG_ERROR_FUNCTION = "_trident_error"
"""The PL/pgSQL function a PostgreSQL store creates to raise an error from an expression."""

_DAY_US = 86_400_000_000
"""Microseconds in a day."""
_PG_TYPES = {
    "BIGINT": "BIGINT",
    "DOUBLE": "DOUBLE PRECISION",
    "VARCHAR": "TEXT",
    "BOOLEAN": "BOOLEAN",
    "BLOB": "BYTEA",
    "JSON": "TEXT",
}


@dataclass(frozen=True, slots=True)
class Dialect:
    """The SQL spellings of one database (``duckdb`` or ``postgres``)."""

    name: str

    @property
    def is_postgres(self) -> bool:
        """True for PostgreSQL."""
        return self.name == "postgres"

    def column_type(self, sql_type: str) -> str:
        """The column type storing a layout type (``BIGINT``, ``DECIMAL(38,2)``, ``JSON``...)."""
        if decimal_scale(sql_type) is not None:
            return sql_type
        if self.is_postgres:
            return _PG_TYPES[sql_type]
        return "VARCHAR" if sql_type == "JSON" else sql_type

    def latest(self, columns: str, source: str, keys: str, seq: str) -> str:
        """The newest row (greatest ``seq``) per ``keys`` of ``source``.

        ``source`` is the text after ``FROM`` (a relation, an alias, a ``WHERE``); ``keys`` a
        comma-separated list of key expressions.
        """
        if self.is_postgres:
            return (
                f"SELECT DISTINCT ON ({keys}) {columns} FROM {source} ORDER BY {keys}, {seq} DESC"
            )
        return (
            f"SELECT {columns} FROM {source} QUALIFY row_number() OVER "
            f"(PARTITION BY {keys} ORDER BY {seq} DESC) = 1"
        )

    def latest_by_index(
        self, log: str, key_q: list[str], cols_in: list[str], keys_from: str, seq: str
    ) -> str:
        """PostgreSQL: the newest row of ``log`` per distinct key of ``keys_from``, by index.

        One ``(keys, seq)`` index probe per key (``LATERAL ... ORDER BY seq DESC LIMIT 1``).
        ``key_q`` are the log's quoted key columns, ``cols_in`` the quoted columns of
        ``keys_from`` holding them; the result has the log's key column names.
        """
        distinct = ", ".join(f"{c} AS {k}" for c, k in zip(cols_in, key_q, strict=True))
        on = " AND ".join(f"l.{k} = q.{k}" for k in key_q)
        keys = ", ".join(f"q.{k}" for k in key_q)
        return (
            f"SELECT {keys}, s.txid, s.curr, s.prev FROM (SELECT DISTINCT {distinct} FROM "
            f"{keys_from}) q CROSS JOIN LATERAL (SELECT l.txid, l.curr, l.prev FROM {log} l "
            f"WHERE {on} ORDER BY l.{seq} DESC LIMIT 1) s"
        )

    def latest_join(self, log: str, key_q: list[str], outer: str, seq: str) -> str:
        """PostgreSQL: ``LEFT JOIN LATERAL`` the newest row of ``log`` for each row of ``outer``.

        One ``(keys, seq)`` index probe per row of ``outer`` (an alias whose columns ``key_q``
        hold distinct keys); the joined relation is ``s`` with ``txid``, ``curr`` and ``prev``
        (all NULL for a key not stored yet).
        """
        on = " AND ".join(f"l.{k} = {outer}.{k}" for k in key_q)
        return (
            f"LEFT JOIN LATERAL (SELECT l.txid, l.curr, l.prev FROM {log} l WHERE {on} "
            f"ORDER BY l.{seq} DESC LIMIT 1) s ON TRUE"
        )

    def log_indexes(self, log: str, keys: str, seq: str) -> list[str]:
        """The indexes of a map's log table: PostgreSQL finds a key's versions by index."""
        if self.is_postgres:
            return [f"CREATE INDEX ON {log} ({keys}, {seq})"]
        return []

    def any_value(self, expr: str, where: str | None = None) -> str:
        """An aggregate picking one non-NULL value of ``expr`` in a group (any type).

        ``where``: only from the group's rows where this condition holds.
        """
        if self.is_postgres:  # any_value() is PostgreSQL 16+
            cond = f"{expr} IS NOT NULL" + (f" AND ({where})" if where else "")
            return f"(array_agg({expr}) FILTER (WHERE {cond}))[1]"
        return f"any_value({expr})" + (f" FILTER (WHERE {where})" if where else "")

    def timestamp_of_micros(self, expr: str) -> str:
        """A naive UTC ``TIMESTAMP`` from ``expr``, a BIGINT of epoch microseconds (exact).

        ``expr`` must be a column or a constant: PostgreSQL's spelling reads it twice (whole
        days plus the microseconds of the day; a ``make_interval`` of days and seconds is
        exact to the microsecond over the whole ``timestamp`` range). Bound parameters go
        through :meth:`timestamp_param`.
        """
        if self.is_postgres:
            return (
                f"(TIMESTAMP '1970-01-01' + make_interval(days => CAST(({expr}) / {_DAY_US} "
                f"AS INTEGER), secs => (({expr}) % {_DAY_US}) / 1000000.0))"
            )
        return f"make_timestamp({expr})"

    def timestamp_param(self) -> str:
        """A naive UTC ``TIMESTAMP`` from one bound BIGINT parameter of epoch microseconds."""
        if self.is_postgres:
            inner = self.timestamp_of_micros("p.v")
            return f"(SELECT {inner} FROM (SELECT CAST(? AS BIGINT) AS v) AS p)"
        return "make_timestamp(CAST(? AS BIGINT))"

    def micros_of(self, expr: str) -> str:
        """The epoch microseconds (BIGINT) of ``expr``, a naive UTC ``TIMESTAMP`` (exact).

        PostgreSQL's ``EXTRACT`` returns an exact NUMERIC of seconds (version 14 and later).
        """
        if self.is_postgres:
            return f"CAST(EXTRACT(EPOCH FROM {expr}) * 1000000 AS BIGINT)"
        return f"epoch_us({expr})"

    def nextval(self, quoted_seq: str) -> str:
        """One number of sequence ``quoted_seq`` for a whole statement."""
        name = quoted_seq if self.is_postgres else quoted_seq[1:-1]
        return f"(SELECT nextval('{name}'))"

    def raise_error(self, message_sql: str, sql_type: str) -> str:
        """An expression of type ``sql_type`` failing the statement with text ``message_sql``."""
        fn = PG_ERROR_FUNCTION if self.is_postgres else "error"
        return f"CAST({fn}({message_sql}) AS {sql_type})"

    def compact(self, log: str, keys: str, seq: str) -> str:
        """The statement dropping every row of ``log`` but the newest per key."""
        if self.is_postgres:
            on = " AND ".join(f"n.{k.strip()} = o.{k.strip()}" for k in keys.split(","))
            return (
                f"DELETE FROM {log} o WHERE EXISTS (SELECT 1 FROM {log} n WHERE {on} "
                f"AND n.{seq} > o.{seq})"
            )
        return f"CREATE OR REPLACE TABLE {log} AS {self.latest('*', log, keys, seq)}"

    def placeholders(self, sql: str) -> str:
        """``sql`` with its ``?`` parameter markers as this database's (outside quotes)."""
        if not self.is_postgres or "?" not in sql:
            return sql
        out: list[str] = []
        n = 0
        quote: str | None = None
        for ch in sql:
            if quote is not None:
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
            elif ch == "?":
                n += 1
                out.append(f"${n}")
                continue
            out.append(ch)
        return "".join(out)


DUCKDB = Dialect("duckdb")
"""DuckDB's SQL."""

POSTGRES = Dialect("postgres")
"""PostgreSQL's SQL."""
