"""The batch coordinator: decides which offset ranges batch ``txid`` reads, per spout kind.

* Transactional: the ranges of a txid are recorded at its first emission; every replay reads
  exactly those. If any of them can no longer be read, the replay stops with
  :class:`~trident_assets.errors.BatchUnavailableError`; other data is never substituted.
* Opaque: every attempt of txid N reads from where committed txid N-1 ended; the ranges
  become final when the batch commits (recorded in the state's transaction). Once a txid
  is committed its ranges are final, so a later replay reads exactly them.
* Non-transactional: reads from where the last attempt ended; no replay guarantee.

Topic incarnations: a source that names the incarnation of a partition's topic (the log's
``topic_id``) has it recorded with every range. A replay whose topic was deleted and re-created
since is refused (:class:`~trident_assets.errors.BatchUnavailableError`), whatever the kind. A
new transactional batch after a re-creation is refused too; an opaque or non-transactional
one resets explicitly: it warns (:class:`TopicRecreatedWarning`), reads the partition from the
new topic's earliest offset and lists it in :attr:`BatchPlan.recreated`.

A new batch starts each partition where :func:`start_offset` says (Storm's seek table) and
takes its :func:`fair_split` share of the batch size.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

from trident_assets.errors import BatchUnavailableError, OutOfOrderCommitError
from trident_assets.spouts.config import SpoutConfig, SpoutKind, StartPosition
from trident_assets.spouts.ranges import BatchPlan, PartitionRange, partition_sort_key
from trident_assets.spouts.source import PartitionedSource, SpoutMetaStore

__all__ = ["BatchCoordinator", "TopicRecreatedWarning", "fair_split", "start_offset"]


class TopicRecreatedWarning(UserWarning):
    """An opaque spout's topic was deleted and re-created; it resumed at the new earliest offset."""


def _topic_id(source: PartitionedSource, partition: str) -> str | None:
    get = getattr(source, "topic_id", None)
    return None if get is None else get(partition)


class BatchCoordinator:
    """Plans and records the batches of one spout of one topology."""

    def __init__(
        self,
        topology: str,
        spout: str,
        source: PartitionedSource,
        config: SpoutConfig,
        meta: SpoutMetaStore,
        joins_after: int = 0,
    ) -> None:
        """Coordinate spout ``spout`` of ``topology`` reading ``source``.

        ``joins_after``: for a spout added to a topology that had committed txids
        ``1..joins_after``, that txid (its first batch is ``joins_after + 1``, read from its
        start position); 0 for a spout that is part of the topology from its first txid.
        """
        self.topology = topology
        self.spout = spout
        self.source = source
        self.config = config
        self.meta = meta
        self.joins_after = joins_after

    def emit(self, txid: int) -> BatchPlan:
        """Return the plan of batch ``txid`` (recording it first if the kind requires).

        Raises:
            OutOfOrderCommitError: batch ``txid - 1`` has not committed (opaque) or been
                emitted (transactional) yet.
            BatchUnavailableError: a transactional replay's ranges can no longer be read.
        """
        stored = self.meta.ranges(self.topology, self.spout, txid)
        kind = self.config.kind
        if stored is not None and (stored[1] or kind is SpoutKind.TRANSACTIONAL):
            self.check_readable(txid, stored[0])
            return BatchPlan.of(self.topology, self.spout, txid, kind, stored[0], replay=True)
        self._check_order(txid)
        committed_only = kind is SpoutKind.OPAQUE
        previous = self.meta.latest_before(self.topology, self.spout, txid, committed_only)
        if kind is SpoutKind.NON_TRANSACTIONAL and stored is not None:
            previous = {**previous, **{r.partition: r for r in stored[0]}}
        return self._plan_new(txid, previous)

    def emit_after(self, previous: BatchPlan) -> BatchPlan:
        """Plan txid ``previous.txid + 1`` as if ``previous`` had committed (pipelining).

        Trident's emitters plan a batch from the last one's metadata kept in memory, so
        several batches can be in flight before any commits. A txid with recorded ranges
        (transactional, or committed) reads exactly those; a new plan starts where
        ``previous`` ends and is recorded as the kind requires, as :meth:`emit` does. The
        state commits stay strictly ordered, so an opaque plan made here becomes final only
        if ``previous`` commits first with exactly its ranges.
        """
        txid = previous.txid + 1
        stored = self.meta.ranges(self.topology, self.spout, txid)
        kind = self.config.kind
        if stored is not None and (stored[1] or kind is SpoutKind.TRANSACTIONAL):
            self.check_readable(txid, stored[0])
            return BatchPlan.of(self.topology, self.spout, txid, kind, stored[0], replay=True)
        return self._plan_new(txid, {r.partition: r for r in previous.ranges})

    def commit(self, plan: BatchPlan) -> None:
        """Make ``plan``'s ranges final; call inside the state's commit transaction."""
        self.meta.record(self.topology, self.spout, plan.txid, plan.ranges, committed=True)
        self.meta.cleanup_before(self.topology, self.spout, plan.txid)

    def last_committed_txid(self) -> int | None:
        """The greatest txid whose ranges are committed."""
        return self.meta.last_committed_txid(self.topology, self.spout)

    def _check_order(self, txid: int) -> None:
        last = self.meta.last_committed_txid(self.topology, self.spout)
        expected = self.joins_after + 1 if last is None else last + 1
        if txid > expected:
            msg = (
                f"spout {self.spout!r} of topology {self.topology!r} cannot emit txid {txid}: "
                f"the last committed txid is {last}, so txid {expected} must commit first"
            )
            raise OutOfOrderCommitError(msg)

    def _plan_new(self, txid: int, previous: dict[str, PartitionRange]) -> BatchPlan:
        """Plan a new batch from ``previous`` ranges; recorded unless the spout is opaque."""
        starts: dict[str, int] = {}
        available: dict[str, int] = {}
        ids: dict[str, str | None] = {}
        recreated: list[str] = []
        skipped = 0
        for partition in self.source.partitions():
            prev = previous.get(partition)
            ids[partition] = current = _topic_id(self.source, partition)
            if prev is not None and prev.topic_id is not None and prev.topic_id != current:
                start = self._recreated(txid, prev, current)
                recreated.append(partition)
            else:
                start = start_offset(self.source, partition, prev, self.config)
                if prev is not None and prev.deployment_id == self.config.deployment_id:
                    skipped += max(0, start - prev.next_offset)
            starts[partition] = start
            available[partition] = self.source.latest(partition) - start
        take = fair_split(available, self.config.max_batch_size)
        bound = getattr(self.source, "bounded_end", None)
        if bound is not None:  # a source bounding a batch further (a file source: by bytes)
            take = {
                p: bound(p, starts[p], starts[p] + n) - starts[p] if n else 0
                for p, n in take.items()
            }
        ranges = [
            PartitionRange(p, starts[p], starts[p] + take[p], self.config.deployment_id, ids[p])
            for p in starts
        ]
        plan = BatchPlan.of(
            self.topology,
            self.spout,
            txid,
            self.config.kind,
            ranges,
            replay=False,
            skipped_by_retention=skipped,
            recreated=recreated,
        )
        if self.config.kind is not SpoutKind.OPAQUE:
            self.meta.record(self.topology, self.spout, txid, plan.ranges, committed=False)
        return plan

    def _recreated(self, txid: int, prev: PartitionRange, current: str | None) -> int:
        """Refuse (transactional) or reset to the new earliest offset with a warning."""
        what = (
            f"topic {prev.topic!r} was deleted and re-created after spout {self.spout!r} "
            f"read {prev.partition} offsets up to {prev.next_offset - 1} "
            f"(topic ID then {prev.topic_id}, now {current})"
        )
        if self.config.kind is SpoutKind.TRANSACTIONAL:
            msg = (
                f"cannot plan txid {txid}: {what}. A transactional spout never continues on "
                "another topic's offsets; redeploy the topology with a fresh state to read the "
                "new topic."
            )
            raise BatchUnavailableError(msg)
        start = self.source.earliest(prev.partition)
        warnings.warn(
            f"txid {txid}: {what}; resuming {prev.partition} at the new topic's earliest "
            f"offset {start}",
            TopicRecreatedWarning,
            stacklevel=3,
        )
        return start

    def check_readable(self, txid: int, ranges: Sequence[PartitionRange]) -> None:
        """Raise :class:`BatchUnavailableError` unless the source still holds every range."""
        existing = set(self.source.partitions())
        for r in ranges:
            if r.count == 0:
                continue
            if r.topic_id is not None and r.partition in existing:
                current = _topic_id(self.source, r.partition)
                if current != r.topic_id:
                    msg = (
                        f"cannot replay txid {txid} of spout {self.spout!r}: it read "
                        f"{r.partition} offsets {r.first_offset}..{r.last_offset} of topic "
                        f"{r.topic!r} with ID {r.topic_id}, but the topic was deleted and "
                        f"re-created (ID now {current}). A batch is never replayed with another "
                        "topic's records; redeploy the topology with a fresh state."
                    )
                    raise BatchUnavailableError(msg)
            if r.partition not in existing:
                msg = (
                    f"cannot replay txid {txid} of spout {self.spout!r}: partition {r.partition} "
                    f"(offsets {r.first_offset}..{r.last_offset}) no longer exists. A "
                    "transactional batch is never replayed with other data; restore the partition "
                    "or redeploy the topology with a fresh state."
                )
                raise BatchUnavailableError(msg)
            earliest = self.source.earliest(r.partition)
            if r.first_offset < earliest or r.next_offset > self.source.latest(r.partition):
                msg = (
                    f"cannot replay txid {txid} of spout {self.spout!r}: it needs {r.partition} "
                    f"offsets {r.first_offset}..{r.last_offset}, but the log now holds "
                    f"{earliest}..{self.source.latest(r.partition) - 1} (retention deleted them). "
                    "A transactional batch is never replayed with other data; raise retention or "
                    "use an opaque spout."
                )
                raise BatchUnavailableError(msg)


def start_offset(
    source: PartitionedSource,
    partition: str,
    previous: PartitionRange | None,
    config: SpoutConfig,
) -> int:
    """Where the next batch of ``partition`` starts, following Storm's seek table.

    * a new deployment (no stored range, or one from another ``deployment_id``) with a
      deploy-only start (EARLIEST, LATEST, TIMESTAMP) seeks to that position;
    * otherwise stored offsets win: the next batch starts where the previous one ended,
      unless ``ignore_stored_offsets`` is set and the stored range is from another deployment;
    * with nothing stored, the UNCOMMITTED_* start position applies.

    The result is never below the log's earliest offset (records deleted by retention
    cannot be read) and never above its latest.
    """
    redeployed = previous is None or previous.deployment_id != config.deployment_id
    if previous is not None and redeployed and config.ignore_stored_offsets:
        previous = None
    position = config.start
    if previous is not None and not (redeployed and position.deploy_only):
        offset = previous.next_offset
    elif position in (StartPosition.EARLIEST, StartPosition.UNCOMMITTED_EARLIEST):
        offset = source.earliest(partition)
    elif position in (StartPosition.LATEST, StartPosition.UNCOMMITTED_LATEST):
        offset = source.latest(partition)
    else:
        assert config.start_timestamp_ms is not None  # validated by SpoutConfig
        found = source.offset_for_timestamp(partition, config.start_timestamp_ms)
        offset = source.latest(partition) if found is None else found
    return min(max(offset, source.earliest(partition)), source.latest(partition))


def fair_split(available: Mapping[str, int], limit: int | None) -> dict[str, int]:
    """Split at most ``limit`` records across partitions as evenly as their backlogs allow.

    Water-filling: every partition gets ``min(backlog, share)``; what a short partition leaves
    is shared by the others. Leftover single records go to partitions in sorted order, so
    the split is deterministic.
    """
    take = dict.fromkeys(available, 0)
    if limit is None:
        return {p: max(n, 0) for p, n in available.items()}
    remaining = limit
    open_parts = sorted((p for p, n in available.items() if n > 0), key=partition_sort_key)
    while remaining > 0 and open_parts:
        share = remaining // len(open_parts)
        if share == 0:
            for p in open_parts[:remaining]:
                take[p] += 1
            break
        still_open = []
        for p in open_parts:
            grant = min(share, available[p] - take[p])
            take[p] += grant
            remaining -= grant
            if take[p] < available[p]:
                still_open.append(p)
        open_parts = still_open
    return take
