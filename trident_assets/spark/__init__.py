"""The Spark layer: sessions, batch reads of the log, and Trident's stream operations."""
