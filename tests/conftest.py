import os

import numpy as np
import pytest
import torch
from hypothesis import settings

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=15, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
