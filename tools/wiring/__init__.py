"""Wiring check: the references BETWEEN rendered Kubernetes objects that the kubelet, the controllers and the API
server resolve at run time, and that a per-object schema check cannot see.

A pod that mounts a Secret nobody creates validates fine and then sits in ContainerCreating; a Service whose
selector matches no pod template applies cleanly and has no endpoints. The check resolves every such reference
against the rendered set, against what the set makes others create (cert-manager's Secret for a Certificate,
CloudNativePG's `-app` Secret and `-rw` Service, VolSync's movers, a StatefulSet's claims), and against `External`
objects that are documented as created by someone else (program/externals.py, with the `OptionalRef`s a pod may
run without). Anything else is a `Finding` that says what would happen in a cluster.

The package's API, re-exported here: `check_wiring`, `Finding`, `External`, `OptionalRef`. Inside:

- vocabulary.py: the facts (cluster-scoped kinds, `POD_TEMPLATE_PATHS`, operators' names, labels and keys);
  manifest.py reads one object as a plain dict; selectors.py: label selectors (`selector_matches`);
- model.py: the rendered set indexed once (targets, holders, pod templates); operators.py: what CloudNativePG and
  cert-manager create from a rendered object; checker.py: `Finding`, and resolving one reference;
- rules/: one module per family of references (pods, services, ingress, gateway_api, policies, rbac, storage, cnpg,
  volsync, owners);
- check.py: `check_wiring`; cli.py and __main__.py: ``python -m tools.wiring FILES_OR_DIRS...``.

Pure: plain dicts in, findings out (the CLI alone reads YAML).
"""

from headscale_ha.program.externals import External, OptionalRef
from tools.wiring.check import check_wiring
from tools.wiring.checker import Finding

__all__ = ["External", "Finding", "OptionalRef", "check_wiring"]
