"""A user's Dagster assets downstream of a topology, through the TridentIOManager.

Word count runs through Dagster (one catch-up run, pipelined txids, published to the replica);
then downstream assets load ``word_counts`` as of each txid (partitioned) and the latest
(unpartitioned), its new values and partials per txid, and a user state asset built from the
partials commits exactly once. Expected values are counted from the produced sentences.
"""

from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame as SparkDataFrame

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.partitions import txid_key, txid_partitions
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.runs import materialize_batches
from trident_assets.examples.downstream import downstream_assets
from trident_assets.examples.word_count import build_word_count

SENTENCES = [
    "the cow jumped over the moon",
    "the man went to the store and bought some candy",
    "four score and seven years ago",
    "how many apples can you eat",
    "to be or not to be the person",
]
BATCH = 4
TXIDS = (1, 2, 3)
SEEN: dict[str, Any] = {}
WC = txid_partitions("word_count")


def truth(txid: int) -> Counter[str]:
    """The word counts after ``txid``: batches are the log's sentences, ``BATCH`` at a time."""
    corpus = (SENTENCES * 3)[: BATCH * txid]
    return Counter(word for sentence in corpus for word in sentence.split())


@dg.asset(partitions_def=WC, ins={"counts": dg.AssetIn(key=["word_count", "word_counts"])})
def counts_as_of(counts: pd.DataFrame) -> None:
    SEEN.setdefault("as_of", []).append(dict(zip(counts["word"], counts["count"], strict=True)))


@dg.asset(ins={"counts": dg.AssetIn(key=["word_count", "word_counts"])})
def counts_latest(counts: pa.Table) -> None:
    SEEN["latest"] = dict(
        zip(counts.column("word").to_pylist(), counts.column("count").to_pylist(), strict=True)
    )


@dg.asset(partitions_def=WC, ins={"counts": dg.AssetIn(key=["word_count", "word_counts"])})
def counts_on_spark(counts: SparkDataFrame) -> None:
    """A PySpark DataFrame annotation gets a Spark DataFrame of the state as of the txid."""
    SEEN.setdefault("spark", []).append({r["word"]: r["count"] for r in counts.collect()})


@dg.asset(
    partitions_def=WC,
    ins={
        "new": dg.AssetIn(key=["word_count", "word_counts_new_values"]),
        "partials": dg.AssetIn(key=["word_count", "word_counts_partials"]),
    },
)
def per_txid_rows(new: pd.DataFrame, partials: pd.DataFrame) -> None:
    SEEN.setdefault("new", []).append(dict(zip(new["word"], new["count"], strict=True)))
    SEEN.setdefault("partials", []).append(
        dict(zip(partials["word"], partials["count"], strict=True))
    )


def test_downstream_assets_read_the_state_as_of_each_txid(spark: Any, tmp_path: Path) -> None:
    trident = TridentResource(home=str(tmp_path), max_spout_pending=3)
    log = trident.log()
    log.create_topic("sentences", 1)
    log.create_topic("word_queries", 1)
    producer = log.producer("sentences")
    for sentence in SENTENCES * 3:
        producer.send(sentence.encode())
    producer.flush()
    topo = build_word_count(max_batch_size=BATCH)
    mine = [
        counts_as_of,
        counts_latest,
        per_txid_rows,
        counts_on_spark,
        *downstream_assets(topo.name),
    ]
    defs = trident_definitions([topo], trident, assets=mine)
    job = defs.resolve_implicit_global_asset_job_def()
    resources = dict(defs.resources or {})
    everything = [*defs.assets]  # type: ignore[misc]
    with dg.DagsterInstance.ephemeral() as instance:
        (run,) = materialize_batches(topo, trident, instance, TXIDS, catch_up=True, job=job)
        assert run.success
        for txid in TXIDS:
            result = dg.materialize(
                everything,
                selection=[counts_as_of, per_txid_rows, *mine[3:]],  # with counts_on_spark
                partition_key=txid_key(txid),
                instance=instance,
                resources=resources,
            )
            assert result.success
        result = dg.materialize(
            everything, selection=[counts_latest], instance=instance, resources=resources
        )
        assert result.success
        # the user state asset again for txid 2: committed, final
        again = dg.materialize(
            everything,
            selection=[mine[5]],
            partition_key=txid_key(2),
            instance=instance,
            resources=resources,
        )
        (lengths_again,) = again.asset_materializations_for_node("word_count__word_lengths")
        totals = {
            int(r.partition_key): r.asset_materialization.metadata["total"].value  # type: ignore[union-attr]
            for r in instance.fetch_materializations(
                dg.AssetKey(["word_count", "word_counts"]), limit=10
            ).records
        }
        top = instance.fetch_materializations(
            dg.AssetKey(["word_count", "top_words"]), limit=1
        ).records[0]
    assert SEEN["as_of"] == [dict(truth(t)) for t in TXIDS]
    assert SEEN["latest"] == dict(truth(3))
    assert totals == {t: sum(truth(t).values()) for t in TXIDS}, "the state's total per txid"
    assert SEEN["spark"] == SEEN["as_of"], "a Spark DataFrame input holds the same rows"
    for i, txid in enumerate(TXIDS):
        batch = truth(txid) - truth(txid - 1) if txid > 1 else truth(1)
        assert SEEN["partials"][i] == dict(batch), f"partials of txid {txid}"
        assert SEEN["new"][i] == {w: truth(txid)[w] for w in batch}, f"new values of {txid}"
    preview = top.asset_materialization.metadata["preview"].value  # type: ignore[union-attr]
    assert preview.splitlines()[0] == "| word | count |"
    assert preview.splitlines()[2] == f"| the | {truth(3)['the']} |"
    assert lengths_again.metadata["already_committed"].value is True
    by_length: Counter[int] = Counter()
    for word, n in truth(3).items():
        by_length[len(word)] += n
    lengths = trident.replica().read_map(
        "word_count_word_lengths", scope="word_count_word_lengths", value_name="count"
    )
    columns = (lengths.column("length").to_pylist(), lengths.column("count").to_pylist())
    got = dict(zip(*columns, strict=True))
    assert got == dict(by_length), "the user state counted every txid exactly once"
