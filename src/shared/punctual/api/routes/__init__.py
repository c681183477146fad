"""The API's routes, a Powertools router per resource; :func:`~punctual.api.app.build_app` includes them."""

from punctual.api.routes import batch, schedules, tasks

ROUTERS = (tasks.router, batch.router, schedules.router)

__all__ = ["ROUTERS"]
