"""CrossGuard entry point: `pulumi preview --policy-pack guardrails/pack` runs this file."""

from pulumi_policy import EnforcementLevel, PolicyPack

from headscale_ha.guardrails.pack.pack import PACK_NAME, build_policies

PolicyPack(name=PACK_NAME, enforcement_level=EnforcementLevel.MANDATORY, policies=build_policies())
