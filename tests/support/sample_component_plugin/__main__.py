"""The sample component package's plugin entry point: the engine runs ``python <this directory> <engine address>``.

Run that way, this directory is the working directory and the module path's first entry, so ``sample_components``
imports as a sibling module (nothing edits the path).
"""

from pulumi.provider.experimental import component_provider_host
from sample_components import Greeting

if __name__ == "__main__":
    component_provider_host([Greeting], name="sample", version="1.2.3")
