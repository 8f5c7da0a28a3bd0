"""`check_wiring`: build the model of the rendered set, then run the rules, object by object.

The order of the findings is part of the interface (the tests compare them): two-owner findings first, then, for
each object in the order given, its pod template's references and then the rule for its kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from headscale_ha.program.externals import External, OptionalRef
from tools.wiring.checker import Checker, Finding
from tools.wiring.model import Holder, RenderedSet
from tools.wiring.rules import cnpg, gateway_api, ingress, policies, rbac, services, storage, volsync
from tools.wiring.rules.owners import check_owners
from tools.wiring.rules.pods import check_pod

Rule = Callable[[Checker, Mapping[str, Any], Holder], None]

#: The rule for each kind, from every family that checks objects of a kind.
RULES: dict[str, Rule] = {
    **services.RULES,
    **ingress.RULES,
    **gateway_api.RULES,
    **policies.RULES,
    **rbac.RULES,
    **storage.RULES,
    **cnpg.RULES,
    **volsync.RULES,
}


def check_wiring(
    objects: list[dict[str, Any]],
    *,
    externals: Iterable[External] = (),
    optional_refs: Iterable[OptionalRef] = (),
) -> list[Finding]:
    """Every reference between `objects` that a cluster would fail to resolve, in object order."""
    checker = Checker(RenderedSet(objects, externals, optional_refs))
    check_owners(checker)
    model = checker.model
    for obj, holder in model.objects:
        if id(obj) in model.pods:
            check_pod(checker, model.pods[id(obj)])
        rule = RULES.get(str(obj["kind"]))
        if rule is not None:
            rule(checker, obj, holder)
    return checker.findings
