"""Where the tailnet ACL policy comes from and who writes the live one."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from headscale_ha.components.settings.base import SettingsModel


class PolicyMode(StrEnum):
    """Who puts the Git policy into Headscale: the file (from the first start), the provider, or nobody."""

    FILE = "file"  # Headscale reads the rendered policy file: enforced from its first start, Git the only owner
    APPLY = "apply"  # database mode, the provider writes the policy over the API (needs bootstrapApiKey)
    DATABASE_UNMANAGED = "databaseUnmanaged"  # database mode, nobody writes: allow-all until someone does


class TailnetPolicySettings(SettingsModel):
    """Where the tailnet ACL policy comes from and who owns the live one."""

    mode: PolicyMode = Field(
        default=PolicyMode.FILE,
        description="`file`: Headscale reads the rendered policy from a mounted file, enforced from its first start "
        "(a change restarts Headscale); `apply`: database mode, the provider writes it over the API; "
        "`databaseUnmanaged`: database mode, nobody writes it, so the tailnet allows everything until someone "
        "does (the plan warns).",
    )

    @field_validator("mode", mode="before")
    @classmethod
    def _no_dry_run(cls, mode: object) -> object:
        """`dryRun` used to leave Headscale allow-all without saying so; it is gone, not silently remapped."""
        if mode == "dryRun":
            raise ValueError(
                "'dryRun' was removed: it left the tailnet allow-all; use 'file' (the default: the Git policy is "
                "enforced from Headscale's first start), 'apply' (the provider writes it), or 'databaseUnmanaged' "
                "(allow-all until someone writes a policy, on purpose)"
            )
        return mode

    file: str = Field(
        default="policy/base.hujson", min_length=1, description="Base policy (HuJSON), relative to the project."
    )
    router_tag_owner: str = Field(
        default="group:admins",
        pattern=r"^(group:[a-z0-9][a-z0-9._-]*|[^@\s]+@[^\s]*)$",
        description="Owner of the generated `tag:subnet-router-<site>` tags (a group or a user of the base policy).",
    )
