"""The tailnet ACL policy: the base policy in Git, what Headscale makes of it, and its deterministic render.

Imports nothing from ``components``. Only the tailnet's policy lives here: the CrossGuard pack, a policy over the
stack's resources rather than the tailnet's traffic, and its image rules are ``headscale_ha.guardrails``.

The policy model (what Headscale 0.28 and 0.29 accept, refuse and lint), one layer per module, each using only
the ones listed before it:

- ``versions``: the Headscale minors the model speaks; ``problems``: refusals, lints and their JSON paths;
- ``hujson``: the policy's text format; ``values``: Go's readings of one value (aliases, ports, protocols, …);
- ``normalise``: the document read as Headscale reads it; ``schema``: the models and their field rules;
- ``semantics``: the rules across the document; ``evaluate``: the policy's own tests, offline;
  ``lints``: the project's strictness;
- ``check``: the entry points (``check_policy``, ``parse_policy``, ``validate_policy``, ``lint_policy``);
- ``grant_conversion``: grants → ACLs for 0.28; ``render``: the base policy plus each site's routers.
"""
