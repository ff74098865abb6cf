"""Calling user code with errors that name the operation, the function and the input.

Bytewax's style: *step*, what was expected, what was received. User functions run on Spark's
Python workers or on the driver; either way a failure becomes a :class:`UserCodeError` whose
message reads ``<operation>: <function> failed on input tuple (...): <cause>``. On the driver
:func:`from_worker_message` recovers that message from Spark's worker traceback.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trident_assets.errors import UserCodeError

__all__ = [
    "Guarded",
    "call",
    "call_batch",
    "call_many",
    "retrieve_batch",
    "describe",
    "short_repr",
    "failure",
    "from_worker_message",
    "guard",
    "with_step",
]

MAX_REPR = 300
"""How many characters of an offending input the message keeps."""

_WORKER_LINE = re.compile(r"UserCodeError: (.+)")


def describe(fn: Any) -> str:
    """``module.qualname`` of a function, method or callable object (its class)."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    module = getattr(target, "__module__", None) or "?"
    return f"{module}.{getattr(target, '__qualname__', repr(target))}"


def short_repr(value: Any) -> str:
    """``repr(value)``, cut to :data:`MAX_REPR` characters (an error message's excerpt)."""
    text = repr(value)
    return text if len(text) <= MAX_REPR else f"{text[:MAX_REPR]}... ({len(text)} chars)"


def failure(step: str, fn: Any, what: str, value: Any, cause: BaseException | str) -> UserCodeError:
    """The error for user code ``fn`` of operation ``step`` failing on ``what`` = ``value``.

    ``cause`` is the exception it raised, or a sentence saying which contract it broke.
    """
    reason = cause if isinstance(cause, str) else f"{type(cause).__name__}: {cause}"
    reason = " ".join(reason.split())  # one line: the driver reads it back from a traceback
    msg = f"{step}: {describe(fn)} failed on {what} {short_repr(value)}: {reason}"
    return UserCodeError(msg)


def call(
    step: str,
    fn: Callable[..., Any],
    values: tuple[Any, ...],
    what: str = "input tuple",
    named: Any = None,
) -> Any:
    """``fn(*values)``; an exception becomes a :class:`UserCodeError` naming ``values``.

    ``named``: the user function to name, when ``fn`` wraps it.
    """
    try:
        return fn(*values)
    except UserCodeError:
        raise
    except Exception as exc:
        raise failure(step, named or fn, what, values, exc) from exc


_NOT_TUPLES = (str, bytes, bytearray, memoryview, Mapping)
"""Iterables that are never a sequence of output tuples (iterating them gives characters,
byte values or keys)."""


def call_many(step: str, fn: Callable[..., Any], values: tuple[Any, ...]) -> list[Any]:
    """``list(fn(*values))``: a function that yields fails while it is iterated, named too.

    Raises:
        UserCodeError: ``fn`` raised, or returned what is not an iterable of output tuples:
            a ``str``, ``bytes``, ``bytearray``, ``memoryview`` or mapping (whose iteration
            would emit one tuple per character, byte or key), or a non-iterable value.
    """
    result = call(step, fn, values, named=fn)
    if isinstance(result, _NOT_TUPLES) or not isinstance(result, Iterable):
        shown = f"{type(result).__name__} {short_repr(result)}"
        why = (
            f"returned a {shown} where an iterable of output "
            if isinstance(result, _NOT_TUPLES)
            else f"returned a {shown}, which is not iterable, where an iterable of output "
        ) + "tuples is expected; return a list of tuples, e.g. [(value,)]"
        raise failure(step, fn, "input tuple", values, why)
    if isinstance(result, list):
        return result
    try:  # a generator runs user code while it is iterated
        return list(result)
    except UserCodeError:
        raise
    except Exception as exc:
        raise failure(step, fn, "input tuple", values, exc) from exc


def call_batch(step: str, fn: Callable[..., Any], rows: Any, *args: Any) -> Any:
    """``fn(*args)`` for a call that gets a whole batch; a failure names the batch's first rows.

    ``rows`` is the batch's input (a sequence of tuples or a pyarrow Table).
    """
    if _is_builtin(fn):  # trident_assets' own updaters/queries raise their own errors
        return fn(*args)
    try:
        return fn(*args)
    except UserCodeError:
        raise
    except Exception as exc:
        count = rows.num_rows if hasattr(rows, "num_rows") else len(rows)
        first = rows.slice(0, 3).to_pylist() if hasattr(rows, "slice") else list(rows[:3])
        what = f"a batch of {count} input tuples starting with"
        raise failure(step, fn, what, first, exc) from exc


def retrieve_batch(step: str, query: Any, state: Any, args: list[tuple[Any, ...]]) -> list[Any]:
    """``query.batch_retrieve(state, args)``, checked to return one result per input.

    Raises:
        UserCodeError: the query raised, or returned another number of results.
    """
    results = call_batch(step, query.batch_retrieve, args, state, args)
    if len(results) != len(args):
        why = f"expected one result per input ({len(args)}), got {len(results)}"
        raise failure(step, query.batch_retrieve, "a batch starting with", args[:3], why)
    return list(results)


class Guarded:
    """A user object whose method calls go through :func:`call` under one operation name.

    It passes ``isinstance`` checks as the object it wraps, and pickles to Spark's workers.
    """

    def __init__(self, target: Any, step: str) -> None:
        """Wrap ``target``; ``step`` names the operation in errors."""
        self._target = target
        self._step = step

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() sees the wrapped class
        return type(self._target)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Guarded, (self._target, self._step))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        step = self._step

        def guarded(*args: Any) -> Any:
            return call(step, attr, args, what="arguments")

        return guarded


def _is_builtin(obj: Any) -> bool:
    """True for trident_assets' own code (a class, an instance or a bound method of ours)."""
    owner = getattr(obj, "__self__", obj)
    module = getattr(owner if isinstance(owner, type) else type(owner), "__module__", "") or ""
    return module == "trident_assets" or module.startswith("trident_assets.")


def guard(obj: Any, step: str) -> Any:
    """``obj`` wrapped in :class:`Guarded`, unless it is one of trident_assets' built-ins."""
    return obj if _is_builtin(obj) else Guarded(obj, step)


def with_step(method: Callable[..., Any], *args: Any, step: str) -> Any:
    """``method(*args, step=step)``, or without ``step`` for code written before it existed.

    User subclasses of Function / Filter / MapFunction may implement ``apply`` without the
    ``step`` keyword; they still run, their errors just name no step.
    """
    try:
        accepts = "step" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        accepts = False
    return method(*args, step=step) if accepts else method(*args)


def from_worker_message(text: str) -> UserCodeError | None:
    """The :class:`UserCodeError` inside a Spark worker traceback, or None if there is none."""
    found = _WORKER_LINE.findall(text)
    return UserCodeError(found[-1].strip()) if found else None
