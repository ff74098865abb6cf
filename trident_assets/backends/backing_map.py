"""The backing map of a SQL state store: set-based ``multi_get`` / ``multi_put`` over one map.

The same class serves DuckDB and PostgreSQL: it encodes keys and values into Arrow columns
(no per-key statements), stages them on the store, and runs one statement per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from trident_assets.backends.map_layout import (
    VALUE_COLUMNS,
    MapKind,
    MapLayout,
    decode_value,
    default_key_columns,
    encode_value,
    infer_scalar_type,
    log_table,
    normalize_key_type,
    normalize_kind,
    normalize_value_type,
    quote_ident,
    seq_name,
    sql_to_arrow,
    validate_table_name,
)
from trident_assets.core.closing import ClosesOnExit
from trident_assets.core.protocols import Key
from trident_assets.core.values import OpaqueValue, StateType, TransactionalValue
from trident_assets.errors import ConfigError, StateLayoutError
from trident_assets.names import SEQ_COLUMN, validate_identifier

if TYPE_CHECKING:
    from trident_assets.backends.sql_catalog import SqlCatalogStore

__all__ = ["SqlBackingMap"]


_ORD = "_trident_ord"


def _unwrap(value: Any) -> tuple[Any, Any, Any]:
    """``(txid, curr, prev)`` of an OpaqueValue, TransactionalValue or plain value."""
    if isinstance(value, OpaqueValue):
        return value.curr_txid, value.curr, value.prev
    if isinstance(value, TransactionalValue):
        return value.txid, value.val, None
    return None, value, None


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class SqlBackingMap(ClosesOnExit):
    """A backing map (``multi_get`` / ``multi_put``) over one map table of a SQL state store.

    Keys are tuples; each part goes in one key column. Values are ``OpaqueValue``,
    ``TransactionalValue`` or plain values, per the table's kind. A layout not declared is
    inferred from the first write: key types from the first keys (int->BIGINT, str->VARCHAR,
    float->DOUBLE, bool->BOOLEAN, bytes->BLOB, anything else->JSON text), the kind and value
    type from the first values (int->BIGINT, float->DOUBLE, str->VARCHAR, bool->BOOLEAN,
    Decimal->DECIMAL(38,s), anything else->JSON text).

    It shares the store's connection, so its writes join the store's open transaction.
    """

    def __init__(
        self,
        store: SqlCatalogStore,
        table: str,
        *,
        key_columns: Sequence[str] | None = None,
        key_types: Sequence[str] | None = None,
        value_type: str | None = None,
        kind: MapKind | StateType | None = None,
    ) -> None:
        """Attach to map ``table`` (created on the first write if it does not exist).

        Raises:
            ConfigError: a name or declared type is invalid.
            StateLayoutError: the table exists with a layout that contradicts the declaration.
        """
        validate_table_name(table)
        self.table = table
        self._key_columns = (
            None
            if key_columns is None
            else tuple(validate_identifier(c, "key column") for c in key_columns)
        )
        self._key_types = (
            None if key_types is None else tuple(normalize_key_type(t) for t in key_types)
        )
        if self._key_columns and self._key_types and len(self._key_columns) != len(self._key_types):
            msg = (
                f"map {table!r}: {len(self._key_columns)} key columns but "
                f"{len(self._key_types)} key types declared"
            )
            raise ConfigError(msg)
        self._value_type = None if value_type is None else normalize_value_type(value_type)
        self._kind = normalize_kind(kind)
        self.store = store
        self._owns_store = False
        existing = self.store.layout(table)
        if existing is not None:
            self._check_declared(existing)

    def close(self) -> None:
        """Close the store if this map opened it."""
        if self._owns_store:
            self.store.close()

    @property
    def layout(self) -> MapLayout | None:
        """The table's stored layout, or None before the first write."""
        return self.store.layout(self.table)

    def _check_declared(self, layout: MapLayout) -> None:
        declared = {
            "key_columns": self._key_columns,
            "key_types": self._key_types,
            "value_type": self._value_type,
            "kind": self._kind,
        }
        for field, want in declared.items():
            if want is not None and getattr(layout, field) != want:
                msg = (
                    f"map table {self.table!r} is a {layout.describe()}; declared {field}="
                    f"{want!r} does not match the stored {getattr(layout, field)!r}"
                )
                raise StateLayoutError(msg)

    # -- encoding -----------------------------------------------------------------------------

    def _encode_keys(self, layout: MapLayout, keys: Sequence[Key]) -> list[list[Any]]:
        columns: list[list[Any]] = [[] for _ in layout.key_columns]
        for key in keys:
            parts = tuple(key)
            if len(parts) != layout.arity:
                msg = (
                    f"map {self.table!r}: key {parts!r} has {len(parts)} part(s) but the table's "
                    f"key is ({', '.join(layout.key_columns)}), {layout.arity} part(s)"
                )
                raise StateLayoutError(msg)
            for i, (part, key_type) in enumerate(zip(parts, layout.key_types, strict=True)):
                if part is None and key_type != "JSON":
                    msg = (
                        f"map {self.table!r}: key {parts!r} has None in key column "
                        f"{layout.key_columns[i]!r} ({key_type}); key columns cannot be NULL "
                        "(declare that key type as JSON to store None)"
                    )
                    raise StateLayoutError(msg)
                ok, encoded = encode_value(part, key_type)
                if not ok:
                    msg = (
                        f"map {self.table!r}: key part {part!r} of {parts!r} cannot be stored in "
                        f"key column {layout.key_columns[i]!r} ({key_type})"
                    )
                    raise StateLayoutError(msg)
                columns[i].append(encoded)
        return columns

    def _key_table(self, layout: MapLayout, columns: list[list[Any]]) -> dict[str, pa.Array]:
        return {
            c: pa.array(col, type=sql_to_arrow(t))
            for c, t, col in zip(layout.key_columns, layout.key_types, columns, strict=True)
        }

    def _encode_value(self, layout: MapLayout, value: Any) -> Any:
        if value is None:
            return None
        ok, encoded = encode_value(value, layout.value_type)
        if not ok:
            msg = (
                f"map {self.table!r}: value {value!r} ({type(value).__name__}) cannot be stored "
                f"in its {layout.value_type} value column; convert it, or use a new table "
                "declared with value_type='JSON'"
            )
            raise StateLayoutError(msg)
        return encoded

    def _check_txid(self, txid: Any, value: Any) -> int | None:
        if txid is None:
            return None
        if (
            isinstance(txid, bool)
            or not isinstance(txid, int)
            or not (_INT64_MIN <= txid <= _INT64_MAX)
        ):
            msg = f"map {self.table!r}: value {value!r} has txid {txid!r}, not a BIGINT"
            raise StateLayoutError(msg)
        return txid

    def _split_values(
        self, layout: MapLayout, values: Sequence[Any]
    ) -> tuple[list[int | None], list[Any], list[Any]]:
        wanted: type | None = {"opaque": OpaqueValue, "transactional": TransactionalValue}.get(
            layout.kind
        )
        txids: list[int | None] = []
        currs: list[Any] = []
        prevs: list[Any] = []
        for value in values:
            is_wrapped = isinstance(value, OpaqueValue | TransactionalValue)
            if (wanted is None and is_wrapped) or (
                wanted is not None and type(value) is not wanted
            ):
                want = "plain values" if wanted is None else f"{wanted.__name__}s"
                msg = (
                    f"map {self.table!r} holds {layout.kind} values and stores {want}; got "
                    f"{type(value).__name__} {value!r}. Use one state type per table."
                )
                raise StateLayoutError(msg)
            txid, curr, prev = _unwrap(value)
            txids.append(self._check_txid(txid, value))
            currs.append(self._encode_value(layout, curr))
            prevs.append(self._encode_value(layout, prev))
        return txids, currs, prevs

    def _infer_layout(self, keys: Sequence[Key], values: Sequence[Any]) -> MapLayout:
        arity = len(self._key_columns) if self._key_columns else len(tuple(keys[0]))
        if self._key_types is not None:
            arity = len(self._key_types)
        key_columns = self._key_columns or default_key_columns(arity)
        tuples = [tuple(k) for k in keys]
        if any(len(t) != arity for t in tuples):
            bad = next(t for t in tuples if len(t) != arity)
            msg = (
                f"map {self.table!r}: key {bad!r} has {len(bad)} part(s) but the table's key "
                f"is ({', '.join(key_columns)}), {arity} part(s)"
            )
            raise StateLayoutError(msg)
        key_types = self._key_types or tuple(
            infer_scalar_type([t[i] for t in tuples], for_key=True) for i in range(arity)
        )
        first = next((v for v in values if v is not None), None)
        kind = self._kind or (
            "opaque"
            if isinstance(first, OpaqueValue)
            else "transactional"
            if isinstance(first, TransactionalValue)
            else "plain"
        )
        inner = [part for v in values for part in _unwrap(v)[1:]]
        value_type = self._value_type or infer_scalar_type(inner, for_key=False)
        return MapLayout(self.table, kind, tuple(key_columns), tuple(key_types), value_type)

    # -- the BackingMap protocol ----------------------------------------------------------------

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Return each key's stored value in key order (None where absent), in ONE query.

        Values come back as ``OpaqueValue`` / ``TransactionalValue`` / plain values per the
        table's kind. A table that does not exist yet reads as all None.

        Raises:
            StateLayoutError: a key does not fit the table's key columns.
        """
        if not keys:
            return []
        layout = self.store.layout(self.table)
        if layout is None:
            return [None] * len(keys)
        self._check_declared(layout)
        columns = self._encode_keys(layout, keys)
        arrays = {_ORD: pa.array(range(len(keys)), type=pa.int64())}
        arrays.update(self._key_table(layout, columns))
        on = " AND ".join(f"q.{quote_ident(c)} = s.{quote_ident(c)}" for c in layout.key_columns)
        found = f"s.{quote_ident(layout.key_columns[0])} IS NOT NULL"
        with self.store.staged(pa.table(arrays)) as view:
            latest = self.store.latest_sql(layout, quote_ident(view))
            result = self.store.fetch_arrow(
                f"SELECT {found} AS found, s.txid, s.curr, s.prev FROM {quote_ident(view)} q "
                f"LEFT JOIN ({latest}) s ON {on} ORDER BY q.{_ORD}"
            )
        vt = layout.value_type
        out: list[Any] = []
        rows = zip(
            result.column("found").to_pylist(),
            result.column("txid").to_pylist(),
            result.column("curr").to_pylist(),
            result.column("prev").to_pylist(),
            strict=True,
        )
        for hit, txid, curr, prev in rows:
            if not hit:
                out.append(None)
            elif layout.kind == "opaque":
                out.append(OpaqueValue(txid, decode_value(curr, vt), decode_value(prev, vt)))
            elif layout.kind == "transactional":
                out.append(TransactionalValue(txid, decode_value(curr, vt)))
            else:
                out.append(decode_value(curr, vt))
        return out

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store ``values[i]`` under ``keys[i]`` with ONE ``INSERT`` (a new version per key).

        If a key appears more than once, the last value wins. The first write to a table
        that does not exist creates it (in the same transaction as the write).

        Raises:
            ConfigError: ``keys`` and ``values`` differ in length.
            StateLayoutError: a key or value does not fit the table (kind, arity, type).
        """
        if len(keys) != len(values):
            msg = f"map {self.table!r}: multi_put got {len(keys)} keys but {len(values)} values"
            raise ConfigError(msg)
        if not keys:
            return
        layout = self.store.layout(self.table)
        if layout is None:
            with self.store.transaction():
                layout = self.store.ensure_map(self._infer_layout(keys, values))
                self._put(layout, keys, values)
        else:
            self._check_declared(layout)
            self._put(layout, keys, values)

    def _put(self, layout: MapLayout, keys: Sequence[Key], values: Sequence[Any]) -> None:
        columns = self._encode_keys(layout, keys)
        txids, currs, prevs = self._split_values(layout, values)
        last: dict[tuple[Any, ...], int] = {}
        for i, encoded in enumerate(zip(*columns, strict=True)):
            last[encoded] = i
        if len(last) < len(keys):
            keep = sorted(last.values())
            columns = [[col[i] for i in keep] for col in columns]
            txids = [txids[i] for i in keep]
            currs = [currs[i] for i in keep]
            prevs = [prevs[i] for i in keep]
        vtype = sql_to_arrow(layout.value_type)
        arrays = self._key_table(layout, columns)
        arrays["txid"] = pa.array(txids, type=pa.int64())
        arrays["curr"] = pa.array(currs, type=vtype)
        arrays["prev"] = pa.array(prevs, type=vtype)
        names = ", ".join(quote_ident(c) for c in (*layout.key_columns, *VALUE_COLUMNS))
        with self.store.staged(pa.table(arrays)) as view:
            self.store.execute(
                f"INSERT INTO {log_table(self.table)} ({names}, {SEQ_COLUMN}) SELECT {names}, "
                f"{self.store.dialect.nextval(seq_name(self.table))} FROM {quote_ident(view)}"
            )
