"""Slow tests: several processes, killed workers, restarted servers, clusters, fault injection."""
