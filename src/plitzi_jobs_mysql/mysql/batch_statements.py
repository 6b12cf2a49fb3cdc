"""The statements of the calls that run on the caller's own connection (`connection=`, `complete_in`) and of the
bulk operations (`cancel_all`, `retry_all`), beside statements.py and keeping its rules.

Every status change here is one named statement, guarded by the status it changes from, so running it again
(a retry after a conflict) changes nothing twice, and bookkeeping kept per transition has one place to go."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .schema.tables import table_names
from .statements import _attempt_json

#: Rows one bulk statement changes at most: small enough that a claimer meeting a locked row loses one race and
#: takes the next job, never waits behind thousands of locks (MariaDB's claims do not wait at all).
BULK_BATCH = 500


@dataclass(frozen=True)
class BatchStatements:
    # -- on the caller's connection ---------------------------------------------------------------------
    #: Which ids of a batch exist, read inside the caller's transaction: a locking read sees the newest
    #: committed rows (a plain read under REPEATABLE READ would miss a job committed after the transaction's
    #: snapshot, and the batch would retry for ever). The failed INSERT already holds these rows' shared locks.
    existing_job_ids_locked: str
    #: `settle(status='succeeded', attempt=AttemptOutcome('succeeded', worker, run_id))` exactly, under the
    #: holder guard only: the worker's own claim instant is not the handler's to know (a claim this worker took
    #: back while the handler ran is the run's own, worker.py `adopt`).
    complete_job: str
    # -- bulk: ids read first (a plain read, no locks), then changed a batch of primary keys at a time ----------
    bulk_seqs: str
    cancel_pending_jobs: str
    request_cancel_jobs: str
    requeue_jobs: str


@functools.cache
def batch_statements_for(prefix: str) -> BatchStatements:
    jobs = f"`{table_names(prefix).jobs}`"
    return BatchStatements(
        existing_job_ids_locked=f"SELECT id FROM {jobs} WHERE id IN %s LOCK IN SHARE MODE",
        complete_job=(
            f"UPDATE {jobs} SET "
            "history = JSON_ARRAY_APPEND(history, '$', "
            + _attempt_json("'succeeded'", "%(worker)s", "%(run_id)s", "NULL", "%(now)s")
            + "), "
            "status = 'succeeded', "
            "error = NULL, "
            "run_id = COALESCE(%(run_id)s, run_id), "
            "lease_until = NULL, "
            "run_at = %(now)s, "
            "updated_at = %(now)s "
            "WHERE id = %(id)s AND worker_id = %(worker)s AND status = 'running'"
        ),
        # `{action}`: "" or " AND action_id = %(action)s". Keyset pages by primary key, so a job changed by one
        # batch is never read again and the call ends however fast the queue moves.
        bulk_seqs=(
            f"SELECT seq FROM {jobs} WHERE space_id = %(space)s AND status IN %(statuses)s{{action}} "
            "AND seq > %(after)s ORDER BY seq LIMIT %(batch)s"
        ),
        # As `cancel_pending_job`, `request_cancel` and `requeue` (statements.py) do to one job.
        cancel_pending_jobs=(
            f"UPDATE {jobs} SET status = 'cancelled', worker_id = NULL, run_at = %(now)s, updated_at = %(now)s "
            "WHERE seq IN %(seqs)s AND status = 'pending'"
        ),
        request_cancel_jobs=(
            f"UPDATE {jobs} SET cancel_requested = 1, updated_at = %(now)s "
            "WHERE seq IN %(seqs)s AND status = 'running' AND cancel_requested = 0"
        ),
        requeue_jobs=(
            f"UPDATE {jobs} SET status = 'pending', run_at = %(now)s, attempts = 0, worker_id = NULL, "
            "lease_until = NULL, cancel_requested = 0, error = NULL, updated_at = %(now)s "
            "WHERE seq IN %(seqs)s AND status = %(status)s"
        ),
    )
