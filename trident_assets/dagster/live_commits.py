"""The live run's committer: the topology's txids on a thread of their own.

The live op's thread logs each committed txid's Dagster events (its materializations and
checks, SQLite writes of about 0.1 s a txid) while the committer already runs the next
txid, so those writes no longer delay the records waiting for it.

The committer is the run's only writer of the topology's state: it polls the log, tags the
run with the txid in hand and commits through the runner (the one txid loop). What it finds
goes to the op's thread through one queue, in order: each
:class:`~trident_assets.runtime.outcomes.BatchOutcome` as soon as it committed, a failure,
and at last ``None``. It holds :attr:`LiveCommitter.lock` while it uses the runner (and so
the store); the op's thread takes the lock to evaluate the asset checks while the log is
idle (:attr:`LiveCommitter.idle`: under a steady load, only when the run ends), after
logging every outcome queued until then.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trident_assets.dagster.in_flight import TXID_TAG
from trident_assets.dagster.partitions import txid_key
from trident_assets.runtime.outcomes import BatchOutcome

if TYPE_CHECKING:
    import dagster as dg

    from trident_assets.dagster.live_settings import LiveSettings
    from trident_assets.spark.executor import TopologyRunner

__all__ = ["Failed", "LiveCommitter"]


@dataclass(frozen=True)
class Failed:
    """The runner failed on ``txid`` (nothing of it committed)."""

    txid: int
    error: BaseException


Item = BatchOutcome | Failed | None


class LiveCommitter(threading.Thread):
    """Polls the log and commits txid after txid until :attr:`stopping` is set (see module)."""

    def __init__(
        self,
        runner: TopologyRunner,
        instance: dg.DagsterInstance,
        run_id: str,
        settings: LiveSettings,
        next_txid: int,
        *,
        pending: Callable[[], int],
        quarantine: Callable[[list[int]], Iterator[BatchOutcome]] | None,
    ) -> None:
        """Commit ``runner``'s txids from ``next_txid`` (or the txid after the last committed).

        ``pending``: how many batches wait in the log. ``quarantine``: set the first txid
        aside instead of processing it (a quarantine run), then go on.
        """
        super().__init__(name="trident-live-commits", daemon=True)
        self.runner = runner
        self.instance = instance
        self.run_id = run_id
        self.settings = settings
        self.cursor = next_txid
        """The next txid this run reports (committed txids Dagster did not see come first)."""
        self.pending = pending
        self.quarantine = quarantine
        self.items: queue.Queue[Item] = queue.Queue()
        self.stopping = threading.Event()
        """Set by the op's thread: end after the txids in hand."""
        self.lock = threading.RLock()
        """Held while the committer uses the runner (one poll of the log and its txids); the
        op's thread takes it to read the store (checks, finals), again while it holds it."""
        self.idle = threading.Event()
        """Set while the committer's last poll found no records waiting."""
        self.committed = 0
        self.planned = 0
        """The last txid of the runner's call in hand."""

    def run(self) -> None:
        """Commit until stopped, the limit of txids, or a failure; then put ``None``."""
        try:
            self._run_until_stopped()
        finally:
            self.items.put(None)

    def _run_until_stopped(self) -> None:
        live = self.settings
        while not self.stopping.is_set():
            if live.max_txids and self.committed >= live.max_txids:
                return
            with self.lock:
                txids = self._waiting()
                if not txids:
                    self.idle.set()
                else:
                    self.idle.clear()
                    if not self._run_txids(txids):
                        return
            if not txids:
                self.stopping.wait(live.poll_interval_s)

    def _waiting(self) -> list[int]:
        """The txids to commit now (at most ``max_catch_up``); empty: no records wait."""
        live = self.settings
        count = 1 if self.quarantine is not None else self.pending()
        first = (self.runner.last_committed() or 0) + 1
        if self.quarantine is None and self.cursor < first:  # committed, Dagster did not see
            first, count = self.cursor, first - self.cursor + count
        limit = live.max_catch_up
        if live.max_txids:
            limit = min(limit, live.max_txids - self.committed)
        return list(range(first, first + min(count, limit)))

    def _run_txids(self, txids: list[int]) -> bool:
        """Run ``txids``, queueing each outcome as it committed; False after a failure."""
        # the txid this run works on: if it dies, the coordinator counts an attempt of it
        self.instance.add_run_tags(self.run_id, {TXID_TAG: txid_key(txids[0])})
        self.planned = txids[-1]
        txid = txids[0]
        try:
            if self.quarantine is not None:  # set the first txid aside, then go on
                batches, self.quarantine = self.quarantine(txids), None
            else:
                batches = self.runner.run_batches(txids)
            for outcome in batches:
                txid = self.cursor = outcome.txid + 1
                self.committed += 1
                self.items.put(outcome)
                if txid <= self.planned:  # the next txid, in flight, is the one in hand
                    self.instance.add_run_tags(self.run_id, {TXID_TAG: txid_key(txid)})
        except BaseException as exc:
            self.items.put(Failed(txid, exc))
            return False
        return True

    def queued(self) -> Iterator[BatchOutcome | Failed]:
        """The items queued now, without waiting (the final ``None`` stays queued)."""
        while True:
            try:
                item = self.items.get_nowait()
            except queue.Empty:
                return
            if item is None:
                self.items.put(None)
                return
            yield item

    def items_until_done(self, wait_s: float) -> Iterator[Item | Any]:
        """The committer's items as they come; ``...`` when none came for ``wait_s`` seconds.

        Ends after the final ``None`` (the committer has stopped).
        """
        while True:
            try:
                item = self.items.get(timeout=wait_s)
            except queue.Empty:
                yield ...
                continue
            if item is None:
                return
            yield item
