"""The component package's provider plugin: the engine starts it with its own address; it serves the schema and
constructs the components (headscale_ha.package). See docs/package.md."""

from headscale_ha.package.host import serve

if __name__ == "__main__":
    serve()
