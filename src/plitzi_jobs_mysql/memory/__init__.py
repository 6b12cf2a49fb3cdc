"""The in-process stores: one process's dicts, keeping the contract exactly.

Correct for a deployment that runs ONE replica, and honest about the rest: a second replica on this gets its own
schedules and its own jobs, so a nightly digest goes out twice. A test that passes against these is testing the
rules a shared store keeps too, so they refuse what MySQL would refuse and read every instant from one clock.
"""

from .kv import MemoryKv, create_memory_kv
from .queue import MemoryJobQueue, create_memory_job_queue
from .wall_clock import wall_clock_ms

__all__ = ["MemoryJobQueue", "MemoryKv", "create_memory_job_queue", "create_memory_kv", "wall_clock_ms"]
