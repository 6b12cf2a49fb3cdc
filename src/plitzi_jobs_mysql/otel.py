"""OpenTelemetry for the worker and the scheduler, built on their `on_event` hook. Needs the `otel` extra
(`pip install 'plitzi_jobs_mysql[otel]'`, which brings `opentelemetry-api`; the SDK and exporters are the
application's choice).

```python
telemetry = JobsTelemetry()                    # the global tracer and meter providers, or pass your own
jobs = create_action_jobs(..., handler=telemetry.wrap(handle), on_event=telemetry)
telemetry.watch_queue(queue, space_ids=[1, 2])  # queue depth by status, sampled every 30 s
```

What it records:
- a span `plitzi_jobs.run` per job run (from its handler's start to its outcome) with the job's id, space,
  action, attempt and outcome (`succeeded`, `failed` — it will be retried —, `dead`, `retried` — a
  `RetryLater` —, `cancelled`); a failure's exception is recorded on it and its status is ERROR. Under
  `wrap(handler)` the span is the current one inside the handler, so the handler's own spans are its children.
- `plitzi_jobs.runs` (counter, by action and outcome; `lost` counts the runs whose worker stopped reporting),
  `plitzi_jobs.run.duration` (histogram, seconds, by action and outcome), `plitzi_jobs.claim.latency`
  (histogram, seconds a job waited past its due time before a claim took it, by action),
  `plitzi_jobs.schedule.fired` and `plitzi_jobs.schedule.missed` (counters, by action), and
  `plitzi_jobs.queue.depth` (gauge, jobs by status, as last sampled by `sample_queue_depth`/`watch_queue`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

try:
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
except ImportError as missing:  # said plainly: the extra is what a user forgot
    raise ImportError("plitzi_jobs_mysql.otel needs OpenTelemetry: pip install 'plitzi_jobs_mysql[otel]'") from missing

from .contract.events import EventKind, JobEvent
from .contract.protocols import JobQueue
from .records import JOB_STATUSES, Job

logger = logging.getLogger(__name__)

SCOPE: Final = "plitzi_jobs_mysql"
SPAN_NAME: Final = "plitzi_jobs.run"
#: Attribute names, one prefix for everything this package records.
JOB_ID: Final = "plitzi_jobs.job.id"
SPACE_ID: Final = "plitzi_jobs.job.space_id"
ACTION: Final = "plitzi_jobs.job.action"
ATTEMPT: Final = "plitzi_jobs.job.attempt"
WORKER: Final = "plitzi_jobs.worker.id"
OUTCOME: Final = "plitzi_jobs.outcome"
STATUS: Final = "plitzi_jobs.job.status"
DEPTH_EVERY_S: Final = 30.0

JobHandler = Callable[[Job], Awaitable[str | None]]


@dataclass
class _Run:
    span: Span
    failed: bool = False


class JobsTelemetry:
    """An `on_event` hook that turns the worker's and the scheduler's events into spans and metrics."""

    def __init__(
        self, *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
    ) -> None:
        self._tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._runs = meter.create_counter("plitzi_jobs.runs", unit="{run}", description="Job runs by outcome")
        self._duration = meter.create_histogram(
            "plitzi_jobs.run.duration", unit="s", description="How long a job's handler ran, by outcome"
        )
        self._claim_latency = meter.create_histogram(
            "plitzi_jobs.claim.latency", unit="s", description="How long a job waited past its due time to be claimed"
        )
        self._fired = meter.create_counter(
            "plitzi_jobs.schedule.fired", unit="{fire}", description="Schedule fires enqueued as jobs"
        )
        self._missed = meter.create_counter(
            "plitzi_jobs.schedule.missed", unit="{fire}", description="Schedule fires that went by unrun"
        )
        meter.create_observable_gauge(
            "plitzi_jobs.queue.depth", [self._observe_depth], unit="{job}", description="Jobs by status"
        )
        self._open: dict[tuple[str, int], _Run] = {}
        self._depth: dict[str, int] = {}

    # -- the hook ----------------------------------------------------------------------------------------------

    def __call__(self, event: JobEvent) -> None:
        action = {ACTION: event.action_id}
        kind = event.kind
        if kind is EventKind.CLAIMED:
            if event.wait_ms is not None:
                self._claim_latency.record(event.wait_ms / 1000, action)
        elif kind is EventKind.STARTED:
            self._start(event)
        elif kind is EventKind.FAILED:
            run = self._open.get(self._key(event))
            if run is not None:
                run.failed = True
                if event.error is not None:
                    run.span.record_exception(event.error)
                run.span.set_status(Status(StatusCode.ERROR, event.message))
        elif kind in (EventKind.SUCCEEDED, EventKind.RETRIED, EventKind.DEAD, EventKind.CANCELLED):
            self._end(event)
        elif kind is EventKind.LOST:
            self._runs.add(1, {**action, OUTCOME: "lost"})
        elif kind is EventKind.FIRED:
            self._fired.add(1, action)
        elif kind is EventKind.MISSED and event.count:
            self._missed.add(event.count, action)

    @staticmethod
    def _key(event: JobEvent) -> tuple[str, int]:
        return event.job_id, event.attempt or 0

    def _start(self, event: JobEvent) -> None:
        span = self._tracer.start_span(
            SPAN_NAME,
            kind=SpanKind.CONSUMER,
            attributes={
                JOB_ID: event.job_id,
                SPACE_ID: event.space_id,
                ACTION: event.action_id,
                ATTEMPT: event.attempt or 0,
                WORKER: event.worker_id or "",
            },
        )
        self._open[self._key(event)] = _Run(span=span)

    def _end(self, event: JobEvent) -> None:
        run = self._open.pop(self._key(event), None)
        if run is None:
            return  # cancelled before it started: no run
        outcome = event.kind.value
        if event.kind is EventKind.RETRIED and run.failed:
            outcome = "failed"  # failed, and will be tried again
        run.span.set_attribute(OUTCOME, outcome)
        run.span.end()
        attributes = {ACTION: event.action_id, OUTCOME: outcome}
        self._runs.add(1, attributes)
        if event.duration_s is not None:
            self._duration.record(event.duration_s, attributes)

    # -- the handler's context -----------------------------------------------------------------------------

    def wrap(self, handler: JobHandler) -> JobHandler:
        """The handler, run with its job's span as the current span, so its own spans nest under the run's."""

        async def traced(job: Job) -> str | None:
            run = self._open.get((job.id, job.attempts))
            if run is None:
                return await handler(job)
            with trace.use_span(run.span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
                return await handler(job)

        return traced

    # -- queue depth ---------------------------------------------------------------------------------------

    async def sample_queue_depth(self, queue: JobQueue, space_ids: Sequence[int]) -> dict[str, int]:
        """Counts the jobs of `space_ids` by status now; the `plitzi_jobs.queue.depth` gauge reports the last
        sample."""
        depth = {}
        for status in sorted(JOB_STATUSES):
            depth[status] = (await queue.list_jobs(space_ids=space_ids, status=status, limit=0)).total
        self._depth = depth
        return depth

    def watch_queue(
        self, queue: JobQueue, *, space_ids: Sequence[int], every_s: float = DEPTH_EVERY_S
    ) -> asyncio.Task[None]:
        """Samples the queue depth every `every_s` seconds until the task it answers is cancelled. Call it
        inside a running event loop."""

        async def sample_forever() -> None:
            while True:
                try:
                    await self.sample_queue_depth(queue, space_ids)
                except Exception:
                    logger.warning("could not sample the queue depth; trying again in %s s", every_s, exc_info=True)
                await asyncio.sleep(every_s)

        return asyncio.create_task(sample_forever(), name="plitzi_jobs queue depth")

    def _observe_depth(self, options: CallbackOptions) -> list[Observation]:
        return [Observation(count, {STATUS: status}) for status, count in self._depth.items()]
