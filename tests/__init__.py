"""The test suites: a package, so the repository root is on sys.path and helpers import as `tests.support.X`
(shared) or `tests.<stage>.X` (one stage's own)."""
