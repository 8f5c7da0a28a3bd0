"""The availability report of a stack: what its configuration can and cannot keep running, in words and tables.

Published as docs/availability/<stack>.md (`make docs`), and in short (the classification and the figures) as the
`availability` stack output, so the claim an operator reads is derived from the same config as the objects the stack
deploys, never typed by hand. Every figure of time or data loss is read from the `recovery` output
(program/recovery.py), which traces each of its numbers to the rendered pods, the committed measurement or a stated
input; this package adds none of its own.

It is an interpretation of the configuration, not a health check: it assumes the declared replicas are healthy,
spread as declared, and that the cluster's own services work.

The report is data: `facts` reads the config once (and `figures` the `recovery` output); `claims` (the
classification and the lists), `redundancy`, `scenarios` and `maintenance` are tables of what applies under which
condition; `phrases` holds every sentence as a template and `words` the values of its placeholders; `model` is the
typed report and its JSON; `page` (with page.md) the Markdown page; `report` puts them together. The package's
public API is re-exported here from `report` and `facts`: `availability_report` (the whole report, as JSON, from
the config), `stack_facts` and `facts_report` (the same in two steps: the site carries the facts, not the config)
and `availability_output` (the stack output).
"""

from headscale_ha.program.availability.facts import StackFacts, stack_facts
from headscale_ha.program.availability.report import availability_output, availability_report, facts_report

__all__ = ["StackFacts", "availability_output", "availability_report", "facts_report", "stack_facts"]
