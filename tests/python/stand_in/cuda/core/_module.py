"""cuda.core._module of the stand-in: ObjectCode and a Kernel record."""

import collections
import os

from cuda.core._utils.cuda_utils import CUDAError

Kernel = collections.namedtuple("Kernel", ["symbol", "object_code"])  # what get_kernel found


class ObjectCode:
    """Holds a compiled program's bytes, name, code type and symbol mapping, as cuda.core's ObjectCode."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("ObjectCode objects cannot be instantiated directly. Please use ObjectCode APIs "
                           "(from_cubin, from_ptx) or Program APIs (compile).")

    @classmethod
    def _init(cls, module, code_type, *, name="", symbol_mapping=None):
        self = cls.__new__(cls)
        if isinstance(module, str):  # a path, as cuda.core reads a str
            with open(module, "rb") as file:
                module = file.read()
        elif not isinstance(module, (bytes, bytearray)):
            raise TypeError(f"module must be bytes or a path, got {type(module).__name__}")
        self._module, self._code_type, self._name = module, code_type, name
        self._sym_map = {} if symbol_mapping is None else dict(symbol_mapping)
        return self

    @staticmethod
    def from_cubin(module, *, name="", symbol_mapping=None):
        return ObjectCode._init(os.fspath(module) if isinstance(module, os.PathLike) else module, "cubin",
                                name=name, symbol_mapping=symbol_mapping)

    @staticmethod
    def from_ptx(module, *, name="", symbol_mapping=None):
        return ObjectCode._init(os.fspath(module) if isinstance(module, os.PathLike) else module, "ptx",
                                name=name, symbol_mapping=symbol_mapping)

    @staticmethod
    def from_ltoir(module, *, name="", symbol_mapping=None):
        return ObjectCode._init(os.fspath(module) if isinstance(module, os.PathLike) else module, "ltoir",
                                name=name, symbol_mapping=symbol_mapping)

    @property
    def code(self):
        return self._module

    @property
    def name(self):
        return self._name

    @property
    def code_type(self):
        return self._code_type

    @property
    def symbol_mapping(self):
        return dict(self._sym_map)

    def get_kernel(self, name):
        """As cuda.core: the mapped symbol for a name expression, else the name itself (encoded); the driver
        would look it up in the binary, so this looks for its bytes there."""
        if self._code_type not in ("cubin", "ptx", "fatbin"):
            raise RuntimeError(f'Unsupported code type "{self._code_type}"')
        try:
            symbol = self._sym_map[name]
        except KeyError:
            symbol = name.encode()
        if not isinstance(symbol, bytes) or symbol not in self._module:
            raise CUDAError(f"CUDA_ERROR_NOT_FOUND: named symbol {symbol!r} not found")
        return Kernel(symbol, self)
