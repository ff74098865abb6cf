"""State stores: in-memory and DuckDB."""
