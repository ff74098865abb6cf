"""The pure core: txid values, map-state wrappers, aggregators and the commit protocol.

Nothing here imports Dagster, Spark or DuckDB.
"""
