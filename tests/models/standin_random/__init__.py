"""standin-random: a STAND-IN for the pulumi-random 4.21.4 resource plugin, for the tests' real Pulumi engine.

The real plugin (github.com/pulumi/pulumi-random/provider/v4) cannot be built here: the Go module proxy serves no
version of it (tools/real_tools.json, ``pulumi-resource-random``). The program needs only RandomPassword and
RandomBytes, so this directory holds a provider of its own for those two: a real gRPC resource provider that the
real engine starts and talks to as it would the real plugin, behaving as the real one does wherever the engine
can see it (``resources`` says what that is and where it comes from). It is a test double all the same: a test
that passes against it says nothing about the real plugin's code.

Put ``PLUGIN_DIR`` first on the engine's ``PATH``: the engine takes an ambient ``pulumi-resource-random`` from
there (so no ``PULUMI_IGNORE_AMBIENT_PLUGINS``). The executable runs the package under the project's venv.
"""

from __future__ import annotations

from pathlib import Path

#: The directory to put on the engine's PATH: it holds the executable ``pulumi-resource-random``.
PLUGIN_DIR = Path(__file__).resolve().parent
PLUGIN = PLUGIN_DIR / "pulumi-resource-random"
