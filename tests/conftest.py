import os

import pytest
import torch

os.environ.setdefault("MPLBACKEND", "Agg")
# one core per pytest-xdist worker: oversubscribed OpenMP threads spin against each other in loops of small
# operations (a 2 s test took 128 s with two 2-thread workers on 2 cores)
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // _workers)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
