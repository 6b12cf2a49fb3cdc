"""Cross-process wake-ups over Redis pub/sub (the `redis` extra: `pip install plitzi_jobs_mysql[redis]`).

MySQL has no notify, so a worker in another process learns of a new job at its next poll. With Redis, an
`enqueue` publishes one small message on the table's channel and every subscribed replica claims at once:

    wakeups = RedisWakeups("redis://127.0.0.1:6379/0")
    queue = create_mysql_job_queue(pool, wakeups=wakeups)   # in every replica
    ...
    await wakeups.close()                                   # at shutdown, after the worker stopped

Durability stays in MySQL: the job is committed before the message is sent, a message is only a hint, and
one that is lost (Redis down, a reconnect) costs the poll interval, never a job. Workers in the publishing
process are woken directly, not through Redis.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

from .contract.wakeups import LocalWakeups, Unsubscribe

logger = logging.getLogger(__name__)

#: After a lost connection the listener tries again after this, doubling up to the ceiling.
RECONNECT_FIRST_S = 0.5
RECONNECT_MAX_S = 30.0


class RedisWakeups:
    """A `WakeupChannel` that reaches every process subscribed through the same Redis."""

    def __init__(self, url_or_client: Any, *, channel_prefix: str = "plitzi-jobs:wake:") -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError as missing:  # pragma: no cover - the extra is not installed
            raise ImportError(
                "RedisWakeups needs the redis package: pip install 'plitzi_jobs_mysql[redis]'"
            ) from missing
        self._client: Any
        if isinstance(url_or_client, str):
            self._client = aioredis.Redis.from_url(url_or_client)
            self._owns_client = True
        else:
            self._client = url_or_client
            self._owns_client = False
        self._prefix = channel_prefix
        self._origin = secrets.token_hex(8).encode()  # our own messages come back: this tells them apart
        self._local = LocalWakeups()
        self._topics: dict[str, int] = {}  # topic -> local subscribers
        self._listener: asyncio.Task[None] | None = None
        self._pubsub: Any = None
        self._changed = asyncio.Event()
        self._sends: set[asyncio.Task[Any]] = set()
        self._warned = False
        self._listening = asyncio.Event()  # set while every wanted channel is subscribed

    def _channel(self, topic: str) -> str:
        return self._prefix + topic

    # -- WakeupChannel ------------------------------------------------------------------------------------------

    def notify(self, topic: str) -> None:
        self._local.notify(topic)  # this process's workers, without the round trip
        try:
            send = asyncio.ensure_future(self._client.publish(self._channel(topic), self._origin))
        except RuntimeError:  # no running loop: the other processes find the job at their next poll
            return
        self._sends.add(send)
        send.add_done_callback(self._sent)

    def subscribe(self, topic: str, callback: Callable[[], None]) -> Unsubscribe:
        unsubscribe_local = self._local.subscribe(topic, callback)
        self._topics[topic] = self._topics.get(topic, 0) + 1
        self._listening.clear()
        self._changed.set()
        if self._listener is None or self._listener.done():
            self._listener = asyncio.get_running_loop().create_task(self._listen(), name="redis wake-ups")

        def unsubscribe() -> None:
            unsubscribe_local()
            left = self._topics.get(topic, 0) - 1
            if left > 0:
                self._topics[topic] = left
            else:
                self._topics.pop(topic, None)
            self._changed.set()

        return unsubscribe

    async def listening(self) -> None:
        """Returns once every topic subscribed so far is subscribed in Redis too (for tests and start-up)."""
        await self._listening.wait()

    async def close(self) -> None:
        """Stops listening and, if it opened the connection itself, closes it."""
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            await asyncio.gather(listener, return_exceptions=True)
        await asyncio.gather(*self._sends, return_exceptions=True)
        if self._owns_client:
            await self._client.aclose()

    # -- the listener -------------------------------------------------------------------------------------------

    def _sent(self, task: asyncio.Task[Any]) -> None:
        self._sends.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._trouble("could not publish a wake-up", task.exception())

    def _trouble(self, what: str, error: BaseException | None) -> None:
        # Once per outage, at warning: workers still poll, so an operator can act on it but nothing is lost.
        if not self._warned:
            self._warned = True
            logger.warning("redis wake-ups: %s (%s); workers fall back to polling until Redis answers", what, error)

    async def _listen(self) -> None:
        pause = RECONNECT_FIRST_S
        while True:
            subscribed: set[str] = set()
            pubsub: Any = self._client.pubsub()
            try:
                while True:
                    wanted = {self._channel(t) for t in self._topics}
                    if wanted - subscribed:
                        await pubsub.subscribe(*(wanted - subscribed))
                    if subscribed - wanted:
                        await pubsub.unsubscribe(*(subscribed - wanted))
                    subscribed = wanted
                    self._changed.clear()
                    self._listening.set()
                    if self._warned:
                        logger.info("redis wake-ups: connected again")
                        self._warned = False
                    pause = RECONNECT_FIRST_S
                    while not self._changed.is_set():
                        if not subscribed:
                            await self._changed.wait()
                            break
                        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                        if message is None or message.get("type") != "message":
                            continue
                        if message.get("data") == self._origin:
                            continue  # ours: this process's workers were woken directly
                        channel = message.get("channel")
                        channel = channel.decode() if isinstance(channel, bytes) else str(channel)
                        self._local.notify(channel[len(self._prefix) :])
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._listening.clear()
                self._trouble("the subscription failed", error)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RECONNECT_MAX_S)
            finally:
                try:
                    await pubsub.aclose()
                except Exception:
                    logger.debug("closing the pub/sub connection failed", exc_info=True)
