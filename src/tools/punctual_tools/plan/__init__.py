"""``punctual plan``: the sizing and cost of a deployment for a rate of tasks, from one model (:mod:`.model`) that
also makes the generated tables of docs/scale.md and docs/cost.md (:mod:`.pages`)."""

from punctual_tools.plan.model import PAGE_RATES, TASK_UNITS, Defaults, Plan, defaults, make_plan

__all__ = ["PAGE_RATES", "TASK_UNITS", "Defaults", "Plan", "defaults", "make_plan"]
