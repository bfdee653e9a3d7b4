"""The test suites: a package, so the repository root is on sys.path and helpers import as `tests.support.X`
(tests only), `tests.<stage>.X` (one stage's own) or `rft.fixtures.X` (shared with benchmarks/)."""
