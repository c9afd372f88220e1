"""The suite's end-of-run rule (conftest.py): a test may skip only for what no install can give this machine (a
GPU), saying so with conftest.NO_GPU; any other skip fails the run and is listed. Checked on a tiny suite run by
pytest itself, with this suite's conftest."""

import pathlib

import pytest

pytestmark = pytest.mark.fast  # the quick tier: needs no engines, server or browser

pytest_plugins = ["pytester"]

CONFTEST = (pathlib.Path(__file__).resolve().parents[1] / "conftest.py").read_text()


def test_a_skip_for_a_missing_package_fails_the_run_and_is_listed(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_one="""
import pytest
def test_needs_sshd():
    pytest.skip("needs Debian's openssh-server")
def test_ok():
    assert True
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*test_needs_sshd: needs Debian's openssh-server*", "*1 skipped for a reason*"])


def test_a_skip_that_says_no_gpu_passes_and_is_listed(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_one="""
import pytest
from conftest import NO_GPU
def test_on_a_gpu():
    pytest.skip(NO_GPU + " NCCL allreduce needs a GPU")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*test_on_a_gpu: cannot exist here (no GPU): NCCL allreduce needs a GPU*"])
