# The C loop of udfs/core/_simhash.c (built in place by setup.py).
import numpy as np
from numpy.typing import NDArray

def simhash_codes(codes: bytes | NDArray[np.uint32], /) -> int: ...
