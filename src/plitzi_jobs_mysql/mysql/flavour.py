"""What kind of server the pool reaches, and what each kind accepts, decided once from `VERSION()` and `wsrep_on`.

- Galera (`wsrep_on`): a node applies the others' writes a moment after they commit, so every statement must
  wait until the node is causally up to date (`wsrep_sync_wait = 7`: reads, updates/deletes and inserts).
  MariaDB takes that per statement (`SET STATEMENT … FOR`), leaving the user's session alone; a MySQL-based
  Galera (Percona XtraDB Cluster) has no `SET STATEMENT`, so the session variable is set on each connection the
  adapter borrows (it only makes the user's own reads on those connections causal too).
- A claim must not wait on a row another transaction holds (a user's transaction may hold it for the whole
  `innodb_lock_wait_timeout`, 50 s by default): MariaDB bounds the compare-and-set's lock wait to nothing
  (`innodb_lock_wait_timeout = 0` fails at once with 1205, a lost race); MySQL has no per-statement bound, so a
  `FOR UPDATE SKIP LOCKED` read of the candidates drops the rows held right now, as a hint only: the claim
  itself stays a single-row compare-and-set.
"""

from __future__ import annotations

from dataclasses import dataclass

CAUSAL_WAIT = "wsrep_sync_wait = 7"
NO_LOCK_WAIT = "innodb_lock_wait_timeout = 0"


@dataclass(frozen=True)
class Flavour:
    mariadb: bool
    galera: bool

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
        return f"SET SESSION {CAUSAL_WAIT}" if self.galera and not self.mariadb else None

    @property
    def skip_locked_hint(self) -> bool:
        """Drop the candidates held by other transactions before the compare-and-sets (no per-statement bound)."""
        return not self.mariadb


def flavour_of(version: str, wsrep_on: bool) -> Flavour:
    """From `SELECT VERSION()` (`10.11.6-MariaDB-log`; MariaDB's handshake adds a `5.5.5-` in front) and whether
    `wsrep_on` is ON. Percona XtraDB Cluster reports e.g. `8.0.36-28.1` and `wsrep_on=ON`."""
    return Flavour(mariadb="mariadb" in version.lower(), galera=wsrep_on)
