"""Tests that need no server: the memory stores, the runtime over them, cron, the pure helpers."""
