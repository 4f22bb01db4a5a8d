"""The test suite, a package: test modules are imported as tests.test_*, and tests.conftest is the one
conftest module (`from tests.conftest import cpipe` and pytest's own import are the same module)."""
