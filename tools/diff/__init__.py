"""``make diff``: what a change does to each stack, offline, like ``pulumi preview --diff`` without a cluster.

The command is ``python -m tools.diff`` (``__main__.py``). The base (a git ref) is checked out with ``git worktree
add --detach`` into a temporary directory and planned by its own code and stack files; the working tree is planned
the same way (``planning.py``). Each plan runs in a subprocess, ``dump.py`` run as a script, that writes a JSON
dump: every Pulumi resource (type, name, URN, parent, inputs, options) and, as inputs, every Kubernetes object.
Secret values never leave that subprocess: each becomes ``{"secret": <16 hex of its SHA-256>}``, so a change shows
as ``changed`` and the value never does.

The comparison (``stacks.diff_dumps``) keys resources by URN (type, parent chain and name), follows aliases, pairs a
deleted and a created resource that are the same Kubernetes object (or of one type with similar inputs) as one
replacement (``resources.py``), and predicts replacements the way pulumi-kubernetes (4.x), pulumi-random and this
project's dynamic providers decide them (``changes.py``, with the one rule table, tools/kubernetes_rules.py).
Replaced or deleted state gets a DATA LOSS line (``findings.py``). Before the fields, each stack says what its
changes mean (``effects.py``): the workloads restarted, rolled, stopped or started (with the outage of the
`recovery` output) and a policy's rules added and removed. ``report.py`` holds what was found and the exit status
it means; ``render.py`` prints it.

The package itself exports nothing: each name is imported from its module.
"""
