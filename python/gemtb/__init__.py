"""gemtb from Python: the bit-exact oracle (gemtb.ref), the simulator (gemtb.whatif), the model
description (gemtb.model), the synthetic data (gemtb.data) and the attention check's cases and
criteria (gemtb.testing), calling the libraries the gemtb command line calls. The CUDA kernels are
in gemtb.gpu (`import gemtb.gpu`; not imported here, since it imports PyTorch when present).
"""

import os as _os

from . import _core

# The data files the libraries read (model configs, scenarios) ship in the package.
_core.use_data_dir(_os.path.join(_os.path.dirname(__file__), "data"))

from . import data, ref, testing  # noqa: E402
from ._sim import model, whatif  # noqa: E402

__all__ = ["data", "model", "ref", "testing", "whatif"]
