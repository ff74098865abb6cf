"""Turn declared topologies into Dagster definitions (assets, checks, sensors, resources)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from trident_assets.dagster.assets import topology_assets
from trident_assets.dagster.checks import CheckSettings
from trident_assets.dagster.finals_asset import DEFAULT_START, check_partition_names, finals_assets
from trident_assets.dagster.finals_check import finals_check, finals_checks_sensor
from trident_assets.dagster.finals_reader import committed_watermarks
from trident_assets.dagster.graph import IO_MANAGER_KEY
from trident_assets.dagster.in_flight import batches_pool
from trident_assets.dagster.io_manager import TridentIOManager
from trident_assets.dagster.lakehouse_assets import table_specs
from trident_assets.dagster.live import LiveSettings, live_job, live_topologies
from trident_assets.dagster.overview import overview_spec
from trident_assets.dagster.resources import TridentResource
from trident_assets.dagster.sensors import coordinator_sensor
from trident_assets.spark.session import DEFAULT_SPARK_CONF, use_worker_python
from trident_assets.stream.event_windows import WindowedState
from trident_assets.stream.topology import TridentTopology

__all__ = ["pyspark_resource", "trident_definitions"]


def pyspark_resource(trident: TridentResource) -> LazyPySparkResource:
    """dagster-pyspark's lazy session resource, configured from ``trident``.

    Local Spark gets the defaults of :data:`DEFAULT_SPARK_CONF` overridden by
    ``trident.spark_conf``; with ``trident.connect_url`` the session is a Spark Connect client.
    The session is created on first use and reused by later runs in the same process.
    """
    url = trident.connect_url
    if url:
        return LazyPySparkResource(spark_config={"spark.remote": url, **trident.spark_conf})
    # the session starts later, in the run's process, which loads these definitions first
    python = use_worker_python(trident.spark_conf)
    return LazyPySparkResource(
        spark_config={
            **DEFAULT_SPARK_CONF,
            "spark.app.name": "trident_assets",
            "spark.log.level": "ERROR",
            "spark.pyspark.python": python,
            **trident.spark_conf,
        }
    )


def trident_definitions(
    topologies: Sequence[TridentTopology],
    trident: TridentResource,
    *,
    checks: CheckSettings | None = None,
    max_catch_up: int = 10,
    max_attempts: int = 5,
    on_poison: str = "stop",
    assets: Sequence[dg.AssetsDefinition] = (),
    window_partitions: Mapping[str, dg.TimeWindowPartitionsDefinition] | None = None,
    window_partitions_start: str = DEFAULT_START,
    live: bool | Collection[str] | None = None,
    live_settings: LiveSettings | None = None,
) -> dg.Definitions:
    """Definitions for ``topologies``: their assets, checks and sensors.

    Each topology's assets are its txid assets, the finals assets of its window states and
    ``<topology>/overview``, the page to open first (:mod:`.overview`).

    Sensors: a coordinator per topology, and ``trident_finals_checks``, which runs each
    finals asset's ``finals_unchanged`` check after a run materialized finals partitions.

    Runs use the in-process executor: one SparkSession (one JVM) per run process instead of
    one per step, and one process holding the DuckDB file's lock. Runs use
    ``trident.connect_url`` (a warm Spark Connect server) when set. Every coordinator sensor
    ticks every 5 s.

    Args:
        topologies: the declared topologies.
        trident: where logs and state live, and the Spark settings.
        checks: what the asset checks verify (default: everything).
        max_catch_up: the most txids one sensor-launched run processes (1: a run per txid).
        max_attempts: attempts of a failing txid before its sensor gives up.
        on_poison: then ``"stop"`` (the sensor's skip reason says what to run) or
            ``"quarantine"`` (set the txid's records aside and move on, where sound).
        assets: your own assets over the topologies' states (they get the same resources,
            e.g. ``trident_io_manager``).
        window_partitions: the time partitions of a window state's finals asset
            ``<topology>/<state>_finals``, by state name (or ``<topology>/<state>``); default
            hourly when the window's slide divides an hour, else daily when it divides a day,
            ending where the state's watermark was when the definitions loaded
            (:mod:`.window_assets`).
        window_partitions_start: the first day (``YYYY-MM-DD``) of default finals partitions.
        live: which topologies run live (:mod:`.live`: one bounded run polls the log and
            commits each txid seconds after its records arrive, instead of a sensor-launched
            run per txid): True (all), False (none), their names, or None: as
            ``TRIDENT_LIVE`` says (``trident ui --live`` sets it to ``all``; unset: none).
        live_settings: how live runs poll and when they end (default :class:`LiveSettings`).
    """
    windowed = [s for t in topologies for s in t.states.values() if isinstance(s, WindowedState)]
    watermarks = committed_watermarks(trident.state_location, windowed)
    finals = {
        t.name: finals_assets(t, window_partitions, window_partitions_start, watermarks)
        for t in topologies
    }
    check_partition_names(list(window_partitions or {}), [f for fs in finals.values() for f in fs])
    pools = {t.name: batches_pool(t.name, trident.state_dsn, trident.database) for t in topologies}
    finals_checks = [finals_check(f, pools[name]) for name, fs in finals.items() for f in fs]
    live_names = live_topologies(live, [t.name for t in topologies])
    resources = {
        "trident": trident,
        "pyspark": pyspark_resource(trident),
        IO_MANAGER_KEY: TridentIOManager(  # the same home and state store
            home=trident.home,
            state_database=trident.state_database,
            state_dsn=trident.state_dsn,
            keep_txids=trident.keep_txids,
        ),
    }
    live_jobs = {
        t.name: live_job(t, pools[t.name], checks, finals[t.name], live_settings, resources)
        for t in topologies
        if t.name in live_names
    }
    return dg.Definitions(
        assets=[
            *(
                topology_assets(
                    t,
                    checks,
                    finals[t.name],
                    pools[t.name],
                )
                for t in topologies
            ),
            *(overview_spec(t) for t in topologies),
            *(spec for t in topologies for spec in table_specs(t)),
            *(f.spec() for fs in finals.values() for f in fs),
            *assets,
        ],
        asset_checks=finals_checks,
        jobs=list(live_jobs.values()),
        sensors=[
            *(
                coordinator_sensor(
                    t,
                    max_attempts=max_attempts,
                    max_catch_up=max_catch_up,
                    on_poison=on_poison,
                    live=live_jobs.get(t.name),
                )
                for t in topologies
            ),
            *([finals_checks_sensor(finals_checks)] if finals_checks else []),
        ],
        resources=resources,
        executor=dg.in_process_executor,
    )
