"""The switch's state, shared by enable()/disable() (_patch), the replacement of torch's NVRTC call
(_compile) and stats() (_stats), read and changed as `_state.<name>`."""

import threading

lock = threading.RLock()  # guards the switch, the counters, the engine and the warnings given
enabled = False
original = None  # torch.cuda._utils._nvrtc_compile as torch has it, saved by the first enable()
form = None  # "binary" (kernel_source, kernel_name, compute_capability, cuda_include_dirs, nvcc_options, auto_pch)
             # or "header" (..., compute_capability, header_code, cuda_include_dirs, ...): _patch.FORMS
kind = None  # what torch's function returns and kiln compiles: "cubin" (sm_XY) or "ptx" (compute_XY)
engine = None  # None: an engine of this process without a GPU runtime (_compile.engine)
