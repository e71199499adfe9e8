"""cuda.core._utils.cuda_utils of the stand-in: the error classes (cuda.core 1.2 keeps NVRTCError here)."""


class CUDAError(Exception):
    pass


class NVRTCError(CUDAError):
    pass
