"""A key-value state's backing map over memcached servers (pymemcache's ``HashClient``).

Keys spread over the servers by consistent hashing; ``multi_get``/``multi_put`` are one
``get_many``/``set_many`` (one round trip per server). memcached keeps nothing over a restart,
may evict keys when full and cannot list its keys, so:

* each state keeps a sentinel key on every server, written with the state's first batch and
  checked before every batch (:func:`check_sentinels`): a server without it lost the state's
  keys there, and the batch is refused naming the server (counts would silently restart);
* a scan of the state is refused (:func:`refuse_scan`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from trident_assets.errors import KeyValueStoreError

if TYPE_CHECKING:
    from trident_assets.backends.kv_target import KeyValueTarget
    from trident_assets.core.protocols import Key

__all__ = ["SENTINEL", "MemcachedBackingMap", "check_sentinels", "refuse_scan"]

SENTINEL = "~sentinel"
"""Suffix of a state's sentinel key (``~`` never appears in an encoded data key)."""


def _server(host: str, port: int) -> str:
    return f"{host}:{port}"


class MemcachedBackingMap:
    """Bulk reads and writes of one state's values over memcached servers."""

    def __init__(self, target: KeyValueTarget) -> None:
        """A hashing client over ``target``'s servers (a failing server raises, never remaps)."""
        from pymemcache.client.hash import HashClient

        self.target = target
        self.client = HashClient(
            list(target.servers), connect_timeout=2, timeout=10, ignore_exc=False
        )

    def close(self) -> None:
        """Close the connections."""
        self.client.close()

    def multi_get(self, keys: Sequence[Key]) -> list[Any]:
        """Each key's stored value (None where absent): one ``get_many``."""
        encoded = [self.target.encode(k) for k in keys]
        found = self._call("read", lambda: self.client.get_many(encoded))
        return [self.target.decode_value(found.get(k)) for k in encoded]

    def multi_put(self, keys: Sequence[Key], values: Sequence[Any]) -> None:
        """Store the values: one ``set_many`` (acknowledged by each server).

        Raises:
            KeyValueStoreError: a server did not store some keys.
        """
        data = {
            self.target.encode(k): self.target.encode_value(v)
            for k, v in zip(keys, values, strict=True)
        }
        failed = self._call("write", lambda: self.client.set_many(data, noreply=False))
        if failed:
            msg = (
                f"{self.target.label}: memcached did not store {len(failed)} key(s) "
                f"(e.g. {sorted(failed)[0]!r}); the txid is not committed. Check the servers' "
                "memory (-m) and item size limit (-I), then run the txid again"
            )
            raise KeyValueStoreError(msg)

    def multi_delete(self, keys: Sequence[Key]) -> None:
        """Delete the keys: one ``delete_many`` (acknowledged by each server)."""
        encoded = [self.target.encode(k) for k in keys]
        if encoded:
            self._call("delete", lambda: self.client.delete_many(encoded, noreply=False))

    def scan(self) -> NoReturn:
        """Refused: memcached cannot list keys (:func:`refuse_scan`)."""
        refuse_scan(self.target)

    def _call(self, what: str, call: Any) -> Any:
        try:
            return call()
        except OSError as exc:
            servers = ", ".join(_server(h, p) for h, p in self.target.servers)
            msg = (
                f"{self.target.label}: a memcached server failed to {what} ({exc}); servers: "
                f"{servers}. The txid is not committed: start the server, then run it again"
            )
            raise KeyValueStoreError(msg) from exc


def check_sentinels(target: KeyValueTarget, first: bool) -> None:
    """Check that no server lost the state's keys; write the sentinels at its first batch.

    ``first``: the state has not committed a txid yet. Each server is asked for the state's
    sentinel; missing on every server before the first batch, it is written on each.

    Raises:
        KeyValueStoreError: a server is unreachable, or lacks the sentinel once the state has
            committed (it restarted or evicted the state's keys: their values are gone).
    """
    from pymemcache.client.base import Client

    key = target.prefix + SENTINEL
    missing: list[str] = []
    clients = [Client((h, p), connect_timeout=2, timeout=10) for h, p in target.servers]
    try:
        for (host, port), client in zip(target.servers, clients, strict=True):
            try:
                if client.get(key) is None:
                    missing.append(_server(host, port))
            except OSError as exc:
                msg = (
                    f"{target.label}: memcached server {_server(host, port)} does not answer "
                    f"({exc}); start it, then run the txid again"
                )
                raise KeyValueStoreError(msg) from exc
        if not missing:
            return
        if first and len(missing) == len(clients):
            for client in clients:
                client.set(key, b"1", noreply=False)
            return
        lost = ", ".join(missing)
        msg = (
            f"{target.label}: memcached server(s) {lost} lost the state's keys (their state "
            "sentinel is gone: the server restarted or evicted them), so its counts there "
            "are gone and nothing was written. memcached cannot recover them: declare the "
            "state under a new name (or flush every server) and run the topology from its "
            "first txid again, or keep the state in a Redis Cluster"
        )
        raise KeyValueStoreError(msg)
    finally:
        for client in clients:
            client.close()


def refuse_scan(target: KeyValueTarget) -> NoReturn:
    """Refuse listing the state's keys: memcached cannot enumerate its keys.

    Raises:
        KeyValueStoreError: always, naming what can be read instead.
    """
    msg = (
        f"{target.label}: memcached cannot list its keys, so the state cannot be read whole; "
        "read given keys (state_query with MapGet), or keep the state in a Redis Cluster"
    )
    raise KeyValueStoreError(msg)
