# torch first, where it is installed: libtpcomm from a CMake build links the shared CUDA runtime
# and NCCL, and whichever process-wide libcudart.so / libnccl.so.2 loads first is the one torch
# gets too (docs/python.md). Importing tpcomm first could make torch's import fail, and
# pytest.importorskip("torch") would then quietly skip the torch tests. (Processes the tests
# spawn import torch first through _torch_workers.wrap.)
#
# TPCOMM_REQUIRE_TORCH=1 (ctest python_torch, label torch): torch must import, and a test that
# skips fails: a test that skips everywhere it runs does not exist.
import os

import pytest

REQUIRE_TORCH = os.environ.get("TPCOMM_REQUIRE_TORCH") == "1"

try:
    import torch  # noqa: F401
except ImportError as e:
    if REQUIRE_TORCH:
        raise ImportError("TPCOMM_REQUIRE_TORCH=1 but torch does not import: %s" % e) from e


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if REQUIRE_TORCH and report.skipped:
        report.outcome = "failed"
        report.longrepr = "skipped with TPCOMM_REQUIRE_TORCH=1 (a skip is not a pass here): %s" % (report.longrepr,)
