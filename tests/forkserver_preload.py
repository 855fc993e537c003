"""What the tests' fork server (``tests.forked``) loads once, so that every process forked
from it starts warm: memstack's modules and the default tokeniser's vocabulary (about half
a second each time otherwise). No embedding model: an ONNX session's threads do not
survive a fork.
"""

import memstack.cli
import memstack.layers
import memstack.memory
from memstack.tokens import DEFAULT_ENCODING
from memstack.vocab import load_encoding

__all__ = ["memstack"]

load_encoding(DEFAULT_ENCODING)
