"""A child process for test_live_run.py: one live run of the word count, SIGKILLed mid-commit.

Run as ``python -m trident_assets_tests.live_child HOME DAGSTER_HOME``. The live run of
``word_count`` over HOME (its own local Spark) with ``crash_at="after_state_write"``: the
process kills itself between the first txid's state write and its commit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
from dagster._core.instance.ref import InstanceRef

from trident_assets.dagster.factory import trident_definitions
from trident_assets.dagster.live import LiveSettings
from trident_assets.dagster.resources import TridentResource
from trident_assets.examples.word_count import build_word_count


def main(home: str, dagster_home: str) -> None:
    """Execute the live job once; it never returns (SIGKILL at ``after_state_write``)."""
    trident = TridentResource(home=home, crash_at="after_state_write")
    settings = LiveSettings(poll_interval_s=0.05, idle_s=30, max_txids=1)
    defs = trident_definitions([build_word_count()], trident, live=True, live_settings=settings)
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(Path(dagster_home))))
    defs.resolve_job_def("word_count_live").execute_in_process(instance=instance)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
