"""Errors a user can catch: each named error is a `PlitziJobsError` and the builtin the API promises."""

from __future__ import annotations

import pytest

from plitzi_jobs_mysql import (
    ConnectionCharsetError,
    KvRowLockedError,
    PayloadTooLargeError,
    PlitziJobsError,
    SchemaMismatchError,
    StoreUnavailableError,
)


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (SchemaMismatchError, RuntimeError),
        (PayloadTooLargeError, ValueError),
        (ConnectionCharsetError, RuntimeError),
        (StoreUnavailableError, ConnectionError),
        (KvRowLockedError, TimeoutError),
    ],
    ids=lambda value: value.__name__,
)
def test_each_named_error_is_a_plitzi_jobs_error_and_the_builtin_the_api_promises(
    error: type[Exception], builtin: type[Exception]
) -> None:
    assert issubclass(error, PlitziJobsError) and issubclass(error, builtin)
