"""The OpenTelemetry instrumentation, read back through the SDK's in-memory exporters."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from plitzi_jobs_mysql import PermanentFailure, ScheduleInput, create_job_worker, create_scheduler
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.otel import JobsTelemetry
from plitzi_jobs_mysql.records import Job

from ..support import Clock, job, wait_for

T = int(datetime(2024, 1, 15, 10, 0, tzinfo=UTC).timestamp() * 1000)


def instrumented() -> tuple[JobsTelemetry, InMemorySpanExporter, InMemoryMetricReader, TracerProvider]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry = JobsTelemetry(tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader]))
    return telemetry, spans, reader, tracer_provider


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Every metric's data points as (attributes, value or histogram count/sum)."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    value = getattr(point, "value", None)
                    if value is None:
                        value = (point.count, point.sum)  # a histogram
                    found.setdefault(metric.name, []).append((dict(point.attributes or {}), value))
    return found


async def test_a_span_per_run_with_its_job_and_outcome_and_metrics_by_outcome() -> None:
    telemetry, spans, reader, tracer_provider = instrumented()
    clock = Clock(T)
    queue = create_memory_job_queue(clock=clock)
    await queue.enqueue_many(
        [
            job("ok", action_id="send", due_at=T - 2_000),
            job("flaky", action_id="sync", due_at=T - 2_000),
            job("bad", action_id="sync", due_at=T - 2_000, max_attempts=1),
        ]
    )
    tracer = tracer_provider.get_tracer("the handler")

    async def handler(job: Job) -> str:
        with tracer.start_as_current_span("inside the handler"):
            if job.id == "flaky":
                raise ValueError("try again")
            if job.id == "bad":
                raise PermanentFailure("never")
        return "r1"

    worker = create_job_worker(queue=queue, handler=telemetry.wrap(handler), worker_id="w1", on_event=telemetry)
    assert await worker.poll() == 3
    await worker.idle()
    await worker.stop()

    runs = {s.attributes["plitzi_jobs.job.id"]: s for s in spans.get_finished_spans() if s.name == "plitzi_jobs.run"}
    assert sorted(runs) == ["bad", "flaky", "ok"]
    ok = runs["ok"]
    assert dict(ok.attributes or {}) == {
        "plitzi_jobs.job.id": "ok",
        "plitzi_jobs.job.space_id": 1,
        "plitzi_jobs.job.action": "send",
        "plitzi_jobs.job.attempt": 1,
        "plitzi_jobs.worker.id": "w1",
        "plitzi_jobs.outcome": "succeeded",
    }
    assert ok.status.status_code != StatusCode.ERROR
    flaky = runs["flaky"]
    assert flaky.attributes is not None and flaky.attributes["plitzi_jobs.outcome"] == "failed"
    assert flaky.status.status_code == StatusCode.ERROR
    assert [e.name for e in flaky.events] == ["exception"]
    assert runs["bad"].attributes is not None and runs["bad"].attributes["plitzi_jobs.outcome"] == "dead"
    # The handler's own spans are children of its run's span.
    inner = [s for s in spans.get_finished_spans() if s.name == "inside the handler"]
    assert len(inner) == 3
    assert {s.parent.span_id for s in inner if s.parent} == {s.context.span_id for s in runs.values()}

    found = points(reader)
    by_outcome = {(a["plitzi_jobs.job.action"], a["plitzi_jobs.outcome"]): v for a, v in found["plitzi_jobs.runs"]}
    assert by_outcome == {("send", "succeeded"): 1, ("sync", "failed"): 1, ("sync", "dead"): 1}
    durations = {a["plitzi_jobs.outcome"]: v for a, v in found["plitzi_jobs.run.duration"]}
    assert {outcome: count for outcome, (count, _) in durations.items()} == {"succeeded": 1, "failed": 1, "dead": 1}
    latency = {a["plitzi_jobs.job.action"]: v for a, v in found["plitzi_jobs.claim.latency"]}
    assert latency == {"send": (1, 2.0), "sync": (2, 4.0)}  # each was claimed 2 s after it was due


async def test_lost_runs_missed_fires_and_queue_depth() -> None:
    telemetry, _spans, reader, _ = instrumented()
    clock = Clock(T)
    queue = create_memory_job_queue(clock=clock)
    await queue.enqueue_many(
        [
            job("a", action_id="send", due_at=T - 2_000),
            job("b", action_id="send", due_at=T - 2_000),
            job("c", action_id="send", due_at=T + 3_600_000),
        ]
    )
    assert len(await queue.claim(worker_id="died", lease_ms=1_000, limit=1)) == 1
    clock.now += 2_000

    async def handler(job: Job) -> None:
        return None

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1", on_event=telemetry, workers=1)
    assert await worker.poll() == 1  # takes "a" over from "died"
    await worker.idle()
    await worker.stop()

    await queue.put_schedules(
        space_id=1,
        schedules=[
            ScheduleInput(
                space_id=1,
                action_id="digest",
                cron="* * * * *",
                environment="main",
                enabled=True,
                next_run_at=T,
                max_attempts=3,
            )
        ],
    )
    clock.now = T + 10 * 60_000 + 1_000
    await create_scheduler(queue=queue, lookups=object(), on_event=telemetry).sweep()  # type: ignore[arg-type]

    assert await telemetry.sample_queue_depth(queue, [1]) == {
        "pending": 3,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "dead": 0,
        "cancelled": 0,
    }
    found = points(reader)
    runs = {a["plitzi_jobs.outcome"]: v for a, v in found["plitzi_jobs.runs"]}
    assert runs == {"lost": 1, "succeeded": 1}
    assert [v for _, v in found["plitzi_jobs.schedule.fired"]] == [1]
    assert found["plitzi_jobs.schedule.missed"] == [({"plitzi_jobs.job.action": "digest"}, 10)]
    depth = {a["plitzi_jobs.job.status"]: v for a, v in found["plitzi_jobs.queue.depth"]}
    assert (depth["pending"], depth["succeeded"], depth["running"]) == (3, 1, 0)  # b, c and the fire


async def test_watch_queue_samples_until_cancelled() -> None:
    telemetry, _spans, reader, _ = instrumented()
    queue = create_memory_job_queue()
    await queue.enqueue(job("a", action_id="send", due_at=T - 2_000))
    task = telemetry.watch_queue(queue, space_ids=[1], every_s=0.01)
    try:
        await wait_for(lambda: telemetry._depth.get("pending") == 1)
    finally:
        task.cancel()
    depth = {a["plitzi_jobs.job.status"]: v for a, v in points(reader)["plitzi_jobs.queue.depth"]}
    assert depth["pending"] == 1


def test_without_providers_it_uses_the_global_ones() -> None:
    telemetry = JobsTelemetry()
    assert telemetry._tracer is not None and trace.get_tracer_provider() is not None
