"""What drives the stores: the worker (claims, runs, settles), the scheduler (fires due schedules) and their
options."""
