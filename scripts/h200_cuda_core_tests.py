"""cuda.core's own tests of Program (test files from cuda.core's repository, given on the command line),
in one process, as shipped or with cuda.core's Program routed through kiln (kiln.cuda_core); prints
pytest's summary and, with kiln, kiln.cuda_core's stats, so the two runs' counts can be compared and
kiln's share seen. The tests' conftest.py is replaced by scripts/stand_ins/cuda_core_fixtures.py.

  python3 scripts/h200_cuda_core_tests.py kiln|plain TEST_FILE ...
"""

import json
import os
import sys

mode = sys.argv[1]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins"))
if mode == "kiln":
    import kiln.cuda_core

    kiln.cuda_core.enable()  # before the tests import cuda.core's Program
elif mode != "plain":
    sys.exit(f"mode must be kiln or plain, not {mode!r}")
import pytest  # noqa: E402

code = pytest.main(["-q", "-rfE", "-p", "no:cacheprovider", "-p", "cuda_core_fixtures", "--confcutdir",
                    os.path.dirname(os.path.abspath(sys.argv[2]))] + sys.argv[2:])
if mode == "kiln":
    stats = kiln.cuda_core.stats()
    print("kiln.cuda_core stats:", json.dumps({k: stats[k] for k in ("routed", "fallbacks", "compile_errors")}))
sys.exit(int(code))
