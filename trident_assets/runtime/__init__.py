"""The runtime: what a batch produced and what its commit writes, free of Spark and Dagster.

Modules here import no pyspark and nothing from :mod:`trident_assets.spark` or
:mod:`trident_assets.dagster` (checked by the layering test): an engine hands the runtime
per-txid inputs, and the runtime commits them.
"""
