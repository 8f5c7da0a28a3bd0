"""headscale-ha as a library: one import name for everything another Pulumi program may reuse.

- ``headscale_ha.components``: the ComponentResources (the repository's ``components/``);
- ``headscale_ha.policy``: the tailnet policy renderer and the CrossGuard rules (``policy/``);
- ``headscale_ha.program``: the site program the stacks run (``program/``);
- ``headscale_ha.provider``: the dynamic provider for the Headscale API (``headscale_ha/provider/``);
- ``headscale_ha.package``: the component package, the components for programs in any Pulumi language
  (``headscale_ha/package/``, run by ``plugin/``).

The repository keeps the layout its users know; ``pyproject.toml`` maps those directories to these names, so an
editable install (``make plan`` makes one in ``.venv``) and ``pip install <repo>`` import the same code.
"""

from headscale_ha.components.release import VERSION

__version__ = VERSION
