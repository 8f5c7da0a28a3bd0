"""Models of other projects the tests run in place of the real actor (the engine, Headscale, the CLIs, ...): one
package each, with a README naming what it follows and the real check that judges it (tests/models/README.md)."""
