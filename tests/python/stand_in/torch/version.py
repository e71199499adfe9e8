import os

cuda = "13.0"
hip = "6.4" if os.environ.get("TORCH_STAND_IN_HIP") else None
