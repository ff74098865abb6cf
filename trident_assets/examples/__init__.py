"""Example topologies from the Trident docs: word count with a DRPC-style query, and LocationDB."""
