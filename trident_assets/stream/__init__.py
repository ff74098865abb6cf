"""Trident's stream API: topologies, streams and the operations declared on them.

Declarations only: imports :mod:`trident_assets.core`, ``errors``, ``names`` and
``spouts.config``, never the planner, Spark, the state store or Dagster (enforced by
``trident_assets_tests/test_layering.py``).
"""
