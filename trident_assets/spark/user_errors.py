"""A user function's failure on a Spark worker, re-raised as the error it was."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from trident_assets.core.user_code import from_worker_message
from trident_assets.errors import TridentError

__all__ = ["user_code_errors"]


@contextlib.contextmanager
def user_code_errors() -> Iterator[None]:
    """Re-raise a user function's failure on a Spark worker as the UserCodeError it was.

    Spark wraps it in its own exception with the worker's traceback; the batch failed and
    nothing was committed either way. The user's error is raised alone (not chained to
    Spark's ~160 lines of Java and worker traces, which would bury it); that trace goes to
    the ``trident_assets.spark`` logger at DEBUG (the run's log, ``HOME/cli.log``, or
    ``HOME/demo.log``).
    """
    try:
        yield
    except TridentError:
        raise
    except Exception as exc:
        found = from_worker_message(str(exc))
        if found is None:
            raise
        logging.getLogger("trident_assets.spark").debug(
            "user code failed on a Spark worker: %s\n%s", found, exc
        )
        raise found from None
