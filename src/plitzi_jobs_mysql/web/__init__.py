"""The operators' dashboard (the `web` extra): `create_dashboard(queue, ...)`, an ASGI app to run alone
(`plitzi-jobs-mysql dashboard`) or mount in a Starlette or FastAPI application.

Modules: `app.py` builds the application; `pages.py` (what an operator reads) and `actions.py` (what an operator
changes, by POST) are its routes; `params.py` reads and bounds the request parameters; `views.py`, `times.py` and
`chart.py` turn records into what the templates show; `activity.py` keeps the chart's closed hours;
`capabilities.py` says what the queue it was given can do; `security.py` the token, the session cookie, CSRF and
the response headers; `templates/` and `static/` ship in the wheel.
"""

from .app import create_dashboard

__all__ = ["create_dashboard"]
