"""Trident's stream API: topologies, streams and the operations declared on them."""
