"""The Dagster layer: topologies as partitioned assets (one partition = one txid), kept thin."""
