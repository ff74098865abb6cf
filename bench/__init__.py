"""Benchmarks of trident_assets (run each as ``python -m bench.<name>``)."""
