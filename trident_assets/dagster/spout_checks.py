"""A spout's checks (:mod:`.checks`): contiguous txids and ranges, dead letters, lag."""

from collections.abc import Sequence

import dagster as dg

from trident_assets.dagster.check_specs import DEAD, LAG, RANGES, TXIDS
from trident_assets.dagster.partitions import txid_key
from trident_assets.runtime.outcomes import BatchOutcome
from trident_assets.spark.executor import TopologyRunner

__all__ = ["dead_letters_check", "lag_check", "ranges_check", "txids_check"]


def txids_check(
    key: dg.AssetKey, instance: dg.DagsterInstance, runner: TopologyRunner, run_txids: list[int]
) -> dg.AssetCheckResult:
    """The materialized txids are exactly 1..N (with this run's) and the store committed N."""
    done = {int(k) for k in instance.get_materialized_partitions(key)} | set(run_txids)
    last = max(done, default=0)
    missing = sorted(set(range(1, last + 1)) - done)
    committed = runner.last_committed() or 0
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=TXIDS,
        passed=not missing and committed == last,
        metadata={
            "last_txid": last,
            "store_last_committed": committed,
            "missing": dg.MetadataValue.json([txid_key(t) for t in missing[:20]]),
        },
    )


def ranges_check(
    key: dg.AssetKey,
    spout_id: str,
    previous: dict[str, int],
    outcomes: Sequence[BatchOutcome],
) -> dg.AssetCheckResult:
    """Each applied batch of this run starts where the previous committed batch ended.

    ``previous``: per partition, where the committed batches before this run ended
    (``_previous_ends`` in :mod:`.checks`); updated in place as this run's batches are checked.
    """
    problems: list[str] = []
    checked = 0
    for outcome in sorted(outcomes, key=lambda o: o.txid):
        plan = outcome.plans.get(spout_id)
        if not outcome.applied or plan is None:
            continue
        for r in plan.ranges:
            expected = previous.get(r.partition)
            checked += 1
            if expected is not None and r.first_offset < expected:
                problems.append(
                    f"txid {outcome.txid} {r.partition}: starts at {r.first_offset}, overlapping "
                    f"the previous batch (which ended before {expected})"
                )
            elif (
                expected is not None
                and r.first_offset > expected
                and plan.skipped_by_retention == 0
            ):
                problems.append(
                    f"txid {outcome.txid} {r.partition}: starts at {r.first_offset}, skipping "
                    f"offsets {expected}..{r.first_offset - 1}"
                )
            previous[r.partition] = r.next_offset
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=RANGES,
        passed=not problems,
        metadata={
            "ranges_checked": checked,
            "problems": dg.MetadataValue.json(problems[:20]),
        },
    )


def dead_letters_check(
    key: dg.AssetKey, spout_id: str, outcomes: Sequence[BatchOutcome], threshold: float
) -> dg.AssetCheckResult:
    """Dead letters per record read by this run's applied batches, at most ``threshold``."""
    applied = [o for o in outcomes if o.applied]
    records = sum(o.tuples_in.get(spout_id, 0) for o in applied)
    dead = sum(o.dead_letters_by_spout.get(spout_id, 0) for o in applied)
    rate = dead / records if records else 0.0
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=DEAD,
        passed=rate <= threshold,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "dead_letters": dead,
            "records": records,
            "rate": dg.MetadataValue.float(round(rate, 6)),
            "threshold": dg.MetadataValue.float(threshold),
        },
    )


def lag_check(
    key: dg.AssetKey, spout_id: str, outcomes: Sequence[BatchOutcome], max_lag: int
) -> dg.AssetCheckResult:
    """The lag after the run's last committed txid (nothing committed: not evaluated, passes)."""
    applied = [o for o in outcomes if o.applied and spout_id in o.lag]
    lag = max(applied, key=lambda o: o.txid).lag[spout_id] if applied else {}
    total = sum(lag.values())
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=LAG,
        passed=total <= max_lag,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "lag": total,
            "max_lag": max_lag,
            "by_partition": dg.MetadataValue.json(lag),
        },
    )
