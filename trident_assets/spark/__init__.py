"""The Spark layer: how a batch runs (sessions, log reads, stream operations, the executor).

Depends on :mod:`trident_assets.stream` (declarations), :mod:`trident_assets.planner` (graph
analysis) and :mod:`trident_assets.backends` (the state store); nothing below imports it.
"""
