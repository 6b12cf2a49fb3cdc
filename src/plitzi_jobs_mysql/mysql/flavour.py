"""What kind of server the pool reaches, and what each kind accepts, decided once from `VERSION()`, `wsrep_on` and
`group_replication_group_name`.

- Galera (`wsrep_on`): a node applies the others' writes a moment after they commit, so every statement must
  wait until the node is causally up to date (`wsrep_sync_wait = 7`: reads, updates/deletes and inserts).
  MariaDB takes that per statement (`SET STATEMENT … FOR`), leaving the user's session alone; a MySQL-based
  Galera (Percona XtraDB Cluster) has no `SET STATEMENT`, so the session variable is set on each connection the
  adapter borrows (it only makes the user's own reads on those connections causal too).
- MySQL Group Replication (the plugin running, a group named): a member too answers from a state behind the
  group's, so each borrowed session asks for `group_replication_consistency = 'BEFORE'` (a statement waits until
  the member has applied every transaction the group ordered before it). A certification failure (3101, 1180 at
  COMMIT) is a lost race or a retry, as Galera's 1213 is (session.py). That wait runs at a statement's start,
  and (measured on 9.7.4, performance_schema's "Executing hook on transaction begin" stage) again for each
  trigger's statement of an autocommit statement or of the first in an implicit transaction, holding the rows
  already changed: when the member's applier needs one of them, each waits for the other for good. Inside
  `BEGIN … COMMIT` it runs once, at BEGIN, and never for a statement or trigger after it; so the adapter sends
  each write there on a member (two round trips more).
- A claim's compare-and-set and a heartbeat's renewal must not wait on a row another transaction holds (a user's
  transaction may hold it for the whole `innodb_lock_wait_timeout`, 50 s by default). MariaDB bounds the
  statement's lock wait to nothing (`innodb_lock_wait_timeout = 0` fails at once with 1205, a lost race). MySQL
  has no `SET STATEMENT`, and its `innodb_lock_wait_timeout` (session or `SET_VAR` hint) is at least 1 s; so
  there the statement carries its own guard, a subquery that locks the same rows `FOR UPDATE NOWAIT` before the
  UPDATE reads them and fails at once with 3572 when one is held (statements.py, `*_nowait`; measured: 0.3 ms on
  a held row).
- MySQL 8.0.19+ takes a row alias in an upsert (`INSERT … AS new ON DUPLICATE KEY UPDATE c = new.c`) and
  deprecates `VALUES(c)` there with a warning per call; MariaDB has only `VALUES(c)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

CAUSAL_WAIT = "wsrep_sync_wait = 7"
NO_LOCK_WAIT = "innodb_lock_wait_timeout = 0"
GROUP_CONSISTENCY = "group_replication_consistency = 'BEFORE'"
ROW_ALIAS_SINCE = (8, 0, 19)


@dataclass(frozen=True)
class Flavour:
    mariadb: bool
    galera: bool
    group_replication: bool = False
    #: The upsert may name the incoming row (`AS new`) instead of `VALUES(col)`.
    row_alias: bool = False

    @property
    def statement_prefix(self) -> str:
        """Put before every statement."""
        return f"SET STATEMENT {CAUSAL_WAIT} FOR " if self.mariadb and self.galera else ""

    @property
    def claim_prefix(self) -> str:
        """Put before a claim's compare-and-set (instead of `statement_prefix`)."""
        if not self.mariadb:
            return ""
        return f"SET STATEMENT {NO_LOCK_WAIT}{', ' + CAUSAL_WAIT if self.galera else ''} FOR "

    @property
    def session_setup(self) -> str | None:
        """Run once on each borrowed connection, where the server has no per-statement form."""
        if self.galera and not self.mariadb:
            return f"SET SESSION {CAUSAL_WAIT}"
        if self.group_replication:
            return f"SET SESSION {GROUP_CONSISTENCY}"
        return None

    @property
    def nowait_guard(self) -> bool:
        """Claims and renewals use the statements that lock their rows NOWAIT (no per-statement lock-wait bound)."""
        return not self.mariadb


def _release(version: str) -> tuple[int, ...]:
    numbers = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return tuple(int(n) for n in numbers.groups()) if numbers else (0,)


def flavour_of(version: str, wsrep_on: bool, group_replication: bool = False) -> Flavour:
    """From `SELECT VERSION()` (`10.11.6-MariaDB-log`; MariaDB's handshake adds a `5.5.5-` in front), whether
    `wsrep_on` is ON, and whether the server is a Group Replication member. Percona XtraDB Cluster reports e.g.
    `8.0.36-28.1` and `wsrep_on=ON`; Oracle MySQL 9.7 on Debian `9.7.4-2`."""
    mariadb = "mariadb" in version.lower()
    return Flavour(
        mariadb=mariadb,
        galera=wsrep_on,
        group_replication=group_replication and not mariadb,
        row_alias=not mariadb and _release(version) >= ROW_ALIAS_SINCE,
    )
