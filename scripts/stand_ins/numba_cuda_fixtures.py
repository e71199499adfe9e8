"""A pytest plugin for running numba-cuda's installed tests outside its source tree (scripts/h200_numba.py):
its test classes ask for a fixture, initialize_from_pytest_config, that numba-cuda's repository defines in
a conftest.py its wheel does not carry. Here the fixture sets what those classes read from it (whether to
dump reproducers of failed FileCheck tests: never)."""

import pytest


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request):
    if request.cls is not None:
        request.cls._dump_failed_filechecks = False
