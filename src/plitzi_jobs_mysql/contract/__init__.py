"""The contract every store keeps: the `JobQueue` and `KvStore` protocols, the validation they share, and the
store clock, cron rules, events and wake-ups the stores and the runtime are built on."""

from .protocols import JobQueue, KvStore

__all__ = ["JobQueue", "KvStore"]
