"""``punctual verify``: a deployed (or the local) stack checked from outside, every task once, on an SQS queue.

A run makes an SQS queue of its own, schedules a mix to it through the ordinary client (tasks spread over a
window, a burst at one instant, tasks written 2 to 4 s before they are due, a recurring schedule), reads every
message back with SQS's ``SentTimestamp``, and has the checker judge it: the arrival drift per group, what is
missing or duplicated, and whether every task arrived once. Against a deployed stack it adds what the run
cost, from CloudWatch. Whatever happens, it deletes what it made.

Parts: :mod:`.plan` (the mix), :mod:`.queue` (the run's queue), :mod:`.run` (scheduling, reading back and clean-up),
:mod:`.report` (the judgement), :mod:`.metrics` (the cost), :mod:`.stack` (a deployed stack's outputs and
functions), :mod:`.options` (the CLI's options), :mod:`.command` (the run the CLI starts, and its report).
"""
