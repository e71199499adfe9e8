"""cupy.cuda.function of the stand-in: a Module that records what it was given."""


class Module:
    """CUDA kernel module (stand-in): load() keeps the image instead of calling cuModuleLoadData."""

    def __init__(self):
        self.ptr = 0
        self.mapping = None
        self.image = None
        self.mapping_calls = []

    def load(self, cubin):
        if type(cubin) is not bytes:  # CuPy declares `bytes cubin` in Cython: bytearray etc. are refused
            raise TypeError(f"Argument 'cubin' has incorrect type (expected bytes, got {type(cubin).__name__})")
        self.image = cubin
        self.ptr = 1

    def get_function(self, name):
        return (self, name)

    def _set_mapping(self, mapping):
        if mapping is not None and type(mapping) is not dict:
            raise TypeError(f"Argument 'mapping' has incorrect type (expected dict, got {type(mapping).__name__})")
        self.mapping_calls.append(mapping)
        self.mapping = mapping
