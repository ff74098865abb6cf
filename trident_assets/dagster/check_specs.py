"""The names, settings and specs of a topology's asset checks (see :mod:`.checks`)."""

from dataclasses import dataclass

import dagster as dg

from trident_assets.errors import ConfigError
from trident_assets.planner import recomputable
from trident_assets.stream.topology import TridentTopology

__all__ = [
    "DEAD",
    "EXACTLY_ONCE",
    "FULL_CHECK_TAG",
    "LAG",
    "RANGES",
    "TXIDS",
    "CheckSettings",
    "check_specs",
]

TXIDS = "txids_contiguous"
RANGES = "ranges_contiguous"
DEAD = "dead_letters_below_threshold"
LAG = "lag_below_threshold"
EXACTLY_ONCE = "exactly_once"
FULL_CHECK_TAG = "trident/exactly_once"
"""Run tag: ``full`` makes the run's ``exactly_once`` evaluations full recomputes."""


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """What the checks verify."""

    exactly_once: bool = True
    """Check count/sum states against their source records every run (see the module)."""
    full_every: int = 50
    """Every how many ``exactly_once`` evaluations of a state one is a full recompute (its
    cost grows with history); the others are incremental. 1: every evaluation is full."""
    dead_letter_threshold: float = 0.01
    """Highest tolerated fraction of dead letters among the records of a run's batches."""
    max_lag: int = 100_000
    """Highest tolerated number of records waiting in a spout's source after a run."""

    def __post_init__(self) -> None:
        """Validate the settings.

        Raises:
            ConfigError: a setting has the wrong type or is out of range.
        """
        if not isinstance(self.exactly_once, bool):
            msg = f"CheckSettings.exactly_once must be True or False, got {self.exactly_once!r}"
            raise ConfigError(msg)
        every = self.full_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            msg = (
                "CheckSettings.full_every must be an integer >= 1 (1: every exactly_once "
                f"evaluation recomputes from scratch), got {every!r}"
            )
            raise ConfigError(msg)
        threshold = self.dead_letter_threshold
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0 <= threshold <= 1
        ):
            msg = (
                "CheckSettings.dead_letter_threshold must be a fraction between 0 and 1 "
                f"(0.01 = 1%), got {threshold!r}"
            )
            raise ConfigError(msg)
        if isinstance(self.max_lag, bool) or not isinstance(self.max_lag, int) or self.max_lag < 0:
            msg = f"CheckSettings.max_lag must be an integer >= 0 (records), got {self.max_lag!r}"
            raise ConfigError(msg)


def check_specs(
    topology: TridentTopology, keys: dict[str, dg.AssetKey], settings: CheckSettings
) -> list[dg.AssetCheckSpec]:
    """The check specs of ``topology`` (see the module docstring)."""
    specs: list[dg.AssetCheckSpec] = []
    for sid in topology.spouts:
        key = keys[f"spout:{sid}"]
        specs += [
            dg.AssetCheckSpec(TXIDS, asset=key, description="Materialized txids are 1..N."),
            dg.AssetCheckSpec(
                RANGES, asset=key, description="Batches neither overlap nor skip offsets."
            ),
            dg.AssetCheckSpec(
                DEAD,
                asset=key,
                description=f"Dead letters at most {settings.dead_letter_threshold:.2%} of "
                "the records read.",
            ),
            dg.AssetCheckSpec(
                LAG,
                asset=key,
                description=f"At most {settings.max_lag:,} records wait in the source after a run.",
            ),
        ]
    if settings.exactly_once:
        for name, state in topology.states.items():
            if recomputable(state):
                specs.append(
                    dg.AssetCheckSpec(
                        EXACTLY_ONCE,
                        asset=keys[f"state:{name}"],
                        description="State == aggregate recomputed from the committed "
                        "batches' source records.",
                    )
                )
    return specs
