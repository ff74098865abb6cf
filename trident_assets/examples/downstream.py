"""Your own Dagster assets on top of the example topologies' states (shipped in the code location).

* ``top_words``: partitioned by word count's txids, it loads state ``word_counts`` **as of
  its txid** through the TridentIOManager and shows the top words as a Markdown table.
* ``word_lengths``: a user-written **state** asset: from the txid's grouped-aggregation partials
  (``word_counts_partials``), it returns partial counts per word length; the IO manager
  applies them to state ``word_lengths`` under the same txid, exactly once, in txid order.
* ``daily_page_views`` (:func:`daily_rollup`): daily partitions over the page-views example's
  hourly finals; a day's final 10-minute windows summed per page.
"""

import dagster as dg
import pandas as pd
import pyarrow as pa

from trident_assets.dagster.graph import IO_MANAGER_KEY
from trident_assets.dagster.io_manager import state_asset_metadata
from trident_assets.dagster.partitions import parse_txid, txid_partitions
from trident_assets.dagster.previews import markdown_table
from trident_assets.examples.page_views import STATE as PAGE_VIEWS_STATE

__all__ = ["TOP_N", "daily_rollup", "downstream_assets"]

TOP_N = 10
"""Rows in the ``top_words`` preview."""


def downstream_assets(topology: str = "word_count") -> list[dg.AssetsDefinition]:
    """The example assets over ``topology``'s ``word_counts`` state and its partials."""
    txids = txid_partitions(topology)
    counts_key = dg.AssetKey([topology, "word_counts"])
    partials_key = dg.AssetKey([topology, "word_counts_partials"])

    @dg.asset(
        key=[topology, "top_words"],
        group_name=topology,
        partitions_def=txids,
        ins={"word_counts": dg.AssetIn(key=counts_key)},
        kinds={"pandas"},
        description="The most frequent words in `word_counts` as of txid N.",
    )
    def top_words(
        context: dg.AssetExecutionContext, word_counts: pd.DataFrame
    ) -> dg.MaterializeResult:
        top = word_counts.sort_values(["count", "word"], ascending=[False, True]).head(TOP_N)
        return dg.MaterializeResult(
            metadata={
                "txid": parse_txid(context.partition_key),
                "distinct_words": len(word_counts),
                "total_words": int(word_counts["count"].sum()),
                "preview": dg.MetadataValue.md(
                    markdown_table(pa.Table.from_pandas(top, preserve_index=False))
                ),
            }
        )

    @dg.asset(
        key=[topology, "word_lengths"],
        group_name=topology,
        partitions_def=txids,
        ins={"partials": dg.AssetIn(key=partials_key)},
        io_manager_key=IO_MANAGER_KEY,
        metadata=state_asset_metadata(
            f"{topology}_word_lengths", key_fields=["length"], value_field="count", combiner="sum"
        ),
        kinds={"pandas", "duckdb"},
        description="A user state: words counted per word length, exactly once per txid.",
    )
    def word_lengths(partials: pd.DataFrame) -> pd.DataFrame:
        by_length = partials.assign(length=partials["word"].str.len().astype("int64"))
        return by_length.groupby("length", as_index=False)["count"].sum()

    return [top_words, word_lengths]


def daily_rollup(
    topology: str = "page_views", start: str = "2026-01-01"
) -> list[dg.AssetsDefinition]:
    """``<topology>/daily_page_views``: a day's final windows summed per page.

    Daily partitions; its input is the hourly finals asset through a
    ``TimeWindowPartitionMapping`` (one day -> its 24 hours), loaded by the TridentIOManager
    as the finals rows with window_start in the day.
    """

    @dg.asset(
        key=[topology, "daily_page_views"],
        group_name=topology,
        partitions_def=dg.DailyPartitionsDefinition(start_date=start),
        ins={
            "finals": dg.AssetIn(
                key=dg.AssetKey([topology, f"{PAGE_VIEWS_STATE}_finals"]),
                partition_mapping=dg.TimeWindowPartitionMapping(),
            )
        },
        kinds={"pandas"},
        description="Views per page per day: the sum of the day's final 10-minute windows.",
    )
    def daily_page_views(finals: pd.DataFrame) -> dg.MaterializeResult:
        if finals.empty:
            per_page: dict[str, int] = {}
        else:
            sums = finals.groupby("page")["views"].sum().sort_index()
            per_page = {str(k): int(v) for k, v in sums.items()}
        return dg.MaterializeResult(
            metadata={
                "views_per_page": dg.MetadataValue.json(per_page),
                "total_views": dg.MetadataValue.int(sum(per_page.values())),
                "windows": dg.MetadataValue.int(len(finals)),
            }
        )

    return [daily_page_views]
