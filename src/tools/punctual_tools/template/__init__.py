"""The template and what it says: ``template.yaml`` loaded (:mod:`.load`), its intrinsic functions evaluated
(:mod:`.intrinsics`), and the Tasks table it defines built locally (:mod:`.table`).

The template is the one schema (the table, its indexes, every function's configuration). The tooling and the
tests read it from the source checkout; the code in Lambda never does (the layer holds neither it nor PyYAML).
"""

from punctual_tools.template.intrinsics import NO_VALUE, Resolver, evaluate_condition, resolve_value
from punctual_tools.template.load import find_template, load_template
from punctual_tools.template.table import TABLE_RESOURCE, create_table_kwargs, ensure_table, stream_filter_patterns

__all__ = [
    "NO_VALUE",
    "TABLE_RESOURCE",
    "Resolver",
    "create_table_kwargs",
    "ensure_table",
    "evaluate_condition",
    "find_template",
    "load_template",
    "resolve_value",
    "stream_filter_patterns",
]
