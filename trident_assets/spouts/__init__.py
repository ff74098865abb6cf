"""Spouts: where batches come from, and the coordinator that fixes each txid's offset ranges."""
