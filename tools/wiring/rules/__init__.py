"""The wiring rules, one module per family of references; each rule is a function of the `Checker` (checker.py)
and one rendered object with its `Holder`, and each module's `RULES` maps the kinds it checks to its rule.

owners (two owners for one object), pods (volumes, env, mounts, probes, pull secrets, service accounts), services
(selectors, target ports, backends, a StatefulSet's governing Service), ingress, gateway_api (routes, listeners,
ReferenceGrants), policies (NetworkPolicy and PodDisruptionBudget selectors), rbac, storage (pre-bound claims),
cnpg (CloudNativePG and the barman-cloud plugin), volsync.
"""
