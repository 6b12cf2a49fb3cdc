"""The exceptions a user may want to catch, under one base class.

Where the API promises a builtin (``ValueError`` for bad input, ``TypeError`` for input that is not JSON), the
named error subclasses that builtin too, so ``except ValueError`` keeps working and ``except PlitziJobsError``
catches every named error. Other bad input (an id too long, an unknown status) is the plain builtin the API
promises, raised before anything is written.
"""

from __future__ import annotations


class PlitziJobsError(Exception):
    """Base class of every error this package raises on purpose."""


class SchemaMismatchError(PlitziJobsError, RuntimeError):
    """The tables found are not the schema this release runs on (older, newer, foreign, or missing columns).

    Raised on first use, before any write; the message names what was found and the command that fixes it.
    """


class PayloadTooLargeError(PlitziJobsError, ValueError):
    """A job input or kv value cannot reach the server in one packet (``max_allowed_packet``) or exceeds the
    package's own bound. Raised before anything is sent; the message names the limit and the server setting."""


class ConnectionCharsetError(PlitziJobsError, RuntimeError):
    """The pool's connections do not speak utf8mb4, so text could not be stored and read back whole."""


class KvRowLockedError(PlitziJobsError, TimeoutError):
    """A kv `swap` could not get its key's row in time: another transaction held it past the server's
    ``innodb_lock_wait_timeout``, and the expected value was still in place (so the swap was not lost to another
    value). Nothing was written; try again later."""


class StoreUnavailableError(PlitziJobsError, ConnectionError):
    """The store could not be reached (connection refused, lost, or the server read-only) for this call."""


class LeaseLostError(PlitziJobsError):
    """`complete_in` found the job no longer held by the worker named (its lease lapsed and another claim took it,
    or it was settled already): nothing was written, and raising lets the caller's own writes roll back with it."""


__all__ = [
    "ConnectionCharsetError",
    "KvRowLockedError",
    "LeaseLostError",
    "PayloadTooLargeError",
    "PlitziJobsError",
    "SchemaMismatchError",
    "StoreUnavailableError",
]
