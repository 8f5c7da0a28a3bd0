"""The tailnet's identity: Headscale's Noise key and the embedded DERP relay's key, in a stack of their own.

Outputs:
- ``identity`` (secret): {noisePrivateKey, derpPrivateKey}, each `privkey:` + 64 lowercase hex;
- ``fingerprint`` (plain): SHA-256 hex of the Noise key as the restore script computes it (components/identity.py),
  what the site stacks export as ``identityFingerprint`` and the backups record.

Keys are generated once (RandomBytes, protected: `destroy` and any replacement refuse) or imported from this
stack's secret config (noisePrivateKey and derpPrivateKey, both or neither, different from each other).
"""

from __future__ import annotations

import pulumi
import pulumi_random as random
from pydantic import TypeAdapter, ValidationError

# The fingerprint and the key format are the site program's (one definition each), from the installed package.
from headscale_ha.components.config_types import NodePrivateKey
from headscale_ha.components.identity import identity_fingerprint
from headscale_ha.program.engine_config import engine_config

KEYS = ("noisePrivateKey", "derpPrivateKey")
_NODE_KEY = TypeAdapter(NodePrivateKey)


class IdentityConfigError(pulumi.RunError):
    """Invalid config of the identity stack; the message lists every problem, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            f"invalid identity config ({len(problems)} problem{'s' if len(problems) != 1 else ''}):\n  "
            + "\n  ".join(problems)
        )


def imported_keys(project: str) -> dict[str, str] | None:
    """The keys imported as secret config, validated; None when neither is set (generate them)."""
    config, secret_keys = engine_config()
    values: dict[str, str] = {}
    problems: list[str] = []
    for key in KEYS:
        full = f"{project}:{key}"
        raw = config.get(full)
        if raw is None:
            continue
        if full not in secret_keys:
            problems.append(f"{full}: must be a secret (pulumi config set --secret {key} ...), got [secret]")
            continue
        try:
            values[key] = _NODE_KEY.validate_python(raw)
        except ValidationError as exc:
            reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            problems.append(f"{full}: {reason}, got [secret]")
    unknown = sorted(k for k in config if k.startswith(f"{project}:") and k.split(":", 1)[1] not in KEYS)
    problems += [f"{k}: unknown key (this stack takes only {' and '.join(KEYS)})" for k in unknown]
    given = [key for key in KEYS if f"{project}:{key}" in config]
    if len(given) == 1:
        missing = next(key for key in KEYS if key not in given)
        problems.append(f"{project}:{missing}: is required with {given[0]}: import both keys or neither, got nothing")
    if len(values) == 2 and values["noisePrivateKey"] == values["derpPrivateKey"]:
        problems.append(
            f"{project}:derpPrivateKey: must differ from noisePrivateKey (Headscale refuses equal keys), got [secret]"
        )
    if problems:
        raise IdentityConfigError(sorted(problems))
    return values or None


def generated_key(name: str) -> pulumi.Output[str]:
    """32 random bytes, `privkey:` + hex. Protected: these bytes exist only in this stack's state."""
    key = random.RandomBytes(name, length=32, opts=pulumi.ResourceOptions(protect=True))
    return pulumi.Output.secret(key.hex.apply(lambda value: f"privkey:{value}"))


def main() -> None:
    imported = imported_keys(pulumi.get_project())
    if imported is not None:
        noise = pulumi.Output.secret(imported["noisePrivateKey"])
        derp = pulumi.Output.secret(imported["derpPrivateKey"])
    else:
        noise, derp = generated_key("noise-key"), generated_key("derp-key")
    pulumi.export("identity", pulumi.Output.secret({"noisePrivateKey": noise, "derpPrivateKey": derp}))
    # A SHA-256 of the key reveals nothing about it: plain, so every stack (and operator) can compare identities.
    pulumi.export("fingerprint", pulumi.Output.unsecret(noise.apply(identity_fingerprint)))


main()
