"""A failure on a Spark worker (a user function's, a store's), re-raised as the error it was."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator

from trident_assets.core.user_code import from_worker_message
from trident_assets.errors import KeyValueStoreError, StaleTxidError, StateLayoutError, TridentError

__all__ = ["worker_errors"]

_STORE_ERRORS: dict[str, type[TridentError]] = {
    e.__name__: e for e in (KeyValueStoreError, StateLayoutError, StaleTxidError)
}
_STORE_ERROR = re.compile(rf"trident_assets\.errors\.({'|'.join(_STORE_ERRORS)}): (.+)")


@contextlib.contextmanager
def worker_errors() -> Iterator[None]:
    """Re-raise a Spark worker's failure as the error it was: a store's, else the user's.

    Spark wraps it in its own exception with the worker's traceback; the batch failed and
    nothing was committed either way. A store's error (a server refusing, a stale txid, raised
    on a key-value partition) is raised as that error, a user function's as the
    :class:`UserCodeError` it was; either alone (not chained to Spark's ~160 lines of Java and
    worker traces, which would bury it). That trace goes to the ``trident_assets.spark``
    logger at DEBUG (the run's log, ``HOME/cli.log``, or ``HOME/demo.log``).
    """
    try:
        yield
    except TridentError:
        raise
    except Exception as exc:
        stored = _STORE_ERROR.findall(str(exc))
        found = _STORE_ERRORS[stored[-1][0]](stored[-1][1]) if stored else None
        found = found or from_worker_message(str(exc))
        if found is None:
            raise
        logging.getLogger("trident_assets.spark").debug("a Spark worker failed: %s\n%s", found, exc)
        raise found from None
