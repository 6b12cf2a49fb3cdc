"""`python -m plitzi_jobs_mysql`: the same command line as the `plitzi-jobs-mysql` console script."""

from .cli.main import main

raise SystemExit(main())
