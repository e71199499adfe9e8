"""numba-cuda's tests that compile or link CUDA C++, in one process, with cuda.core's Program routed
through kiln (kiln.cuda_core) or as shipped; prints pytest's summary and, with kiln, kiln.cuda_core's
stats, so the two runs' counts can be compared and kiln's share seen. numba.cuda.testing needs the
`filecheck` package and its tests a fixture from numba-cuda's repository conftest: stand-ins from
scripts/stand_ins are put on the path (never into numba's tree).

  python3 scripts/h200_numba.py kiln|plain TEST_FILE_OR_MODULE ...
"""

import json
import os
import sys

mode = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
import numpy  # noqa: E402

if not hasattr(numpy, "row_stack"):
    # numba-cuda 0.30 registers an overload of numpy.row_stack when its CUDA target loads; a recent NumPy has no
    # row_stack any more (vstack is what it was): without it every test that compiles a kernel fails at import.
    # Both modes get it, so their counts stay comparable.
    numpy.row_stack = numpy.vstack
if mode == "kiln":
    import kiln.cuda_core

    kiln.cuda_core.enable()  # before numba imports cuda.core's Program
import pytest  # noqa: E402

targets = sys.argv[2:]
pyargs = [] if all(os.path.exists(t) for t in targets) else ["--pyargs"]  # test files, or module names
# importlib mode: numba-cuda's tests live under a namespace package pytest would otherwise name "cuda.tests".
# numba-cuda's conftest.py files (its fixtures) sit in its installed tree: that tree is the root.
import numba_cuda  # noqa: E402

tree = os.path.dirname(os.path.abspath(numba_cuda.__file__))
code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "numba_cuda_fixtures", "--import-mode=importlib", "--rootdir",
                    tree, "--confcutdir", "/"] + pyargs + targets)
if mode == "kiln":
    stats = kiln.cuda_core.stats()
    print("kiln.cuda_core stats:", json.dumps({k: stats[k] for k in ("routed", "fallbacks", "compile_errors")}))
sys.exit(int(code))
