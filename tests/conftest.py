import sys

import pytest

from gemmlab.runtime.device import gpu_available


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU/driver on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_call_plans():
    """Each test plans its calls afresh: a test may patch what a choice reads."""
    from gemmlab.core import planner

    planner.CALL_PLANS.clear()
    planner.CHOICE_PLANS.clear()
    native = sys.modules.get("gemmlab.torch.native")
    if native is not None:  # nor do the C++ routed kernels repeat an earlier test's launches
        native.forget()


@pytest.fixture(autouse=True, scope="session")
def _private_kernel_cache(tmp_path_factory):
    """Tests compile into a fresh cache folder, never the user's."""
    import os

    folder = os.environ.get("GEMMLAB_TEST_CACHE_DIR") or str(tmp_path_factory.mktemp("kernel-cache"))
    old = os.environ.get("GEMMLAB_CACHE_DIR")
    os.environ["GEMMLAB_CACHE_DIR"] = folder
    yield
    if old is None:
        os.environ.pop("GEMMLAB_CACHE_DIR", None)
    else:
        os.environ["GEMMLAB_CACHE_DIR"] = old
