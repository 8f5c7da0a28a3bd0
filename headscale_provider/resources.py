"""``headscale_provider.resources`` as 0.1.x state names it: the same classes as ``headscale_ha.provider.resources``.

An alias, not a copy: unpickling an old path yields the current class, so a provider host serves old and new state
with one implementation.
"""

from headscale_ha.provider.resources import (
    ApiKeyProvider,
    NodeSettingsProvider,
    PolicyProvider,
    PreAuthKeyProvider,
    UserProvider,
)

__all__ = ["ApiKeyProvider", "NodeSettingsProvider", "PolicyProvider", "PreAuthKeyProvider", "UserProvider"]
