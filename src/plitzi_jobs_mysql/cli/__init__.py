"""The `plitzi-jobs-mysql` command: schema (ddl, migrate), operator reads and writes (jobs, schedules, stats)."""

from .main import main

__all__ = ["main"]
