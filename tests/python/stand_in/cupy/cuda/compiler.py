"""cupy.cuda.compiler of the stand-in (CuPy v14.2.0's names and signatures)."""

from cupy.cuda import device, function

_use_ptx = False
_nvrtc_version = None  # as CuPy's: set by the first _get_nvrtc_version(), which loads NVRTC
STAND_IN_NVRTC_VERSION = (13, 0)
nvrtc_loads = 0  # how often the stand-in "loaded NVRTC" (CuPy: a dlopen of libnvrtc, milliseconds)

calls = []  # every call of the original _compile_with_cache_cuda: a dict of its arguments


class CompileException(Exception):
    """Same constructor and attributes as CuPy's; the message is the compiler log."""

    def __init__(self, msg, source, name, options, backend='nvrtc'):
        super().__init__()
        self._msg, self.source, self.name, self.options, self.backend = msg, source, name, options, backend

    def __str__(self):
        return self.get_message()

    def get_message(self):
        return self._msg

    def dump(self, f):
        f.write(f"stand-in dump: {self.backend} {self.name} {' '.join(self.options)}\n{self._msg}\n")


# The arch functions follow CuPy v14.2.0's rules (without its memoization): the newest cubin arch
# comes from the NVRTC version, and asking for that version loads NVRTC.
_tegra_archs = ('32', '53', '62', '72', '87')


def _get_nvrtc_version():
    global _nvrtc_version, nvrtc_loads
    if _nvrtc_version is None:
        nvrtc_loads += 1
        _nvrtc_version = STAND_IN_NVRTC_VERSION
    return _nvrtc_version


def _get_max_compute_capability():
    major, minor = _get_nvrtc_version()
    if major == 12 and minor < 8:
        return '90'
    if major == 12 and minor == 8:
        return '120'
    return '121'


def _get_arch():
    nvrtc_max_compute_capability = _get_max_compute_capability()
    arch = device.Device().compute_capability
    if arch in _tegra_archs:
        return arch
    return min(arch, nvrtc_max_compute_capability, key=int)


def _get_arch_for_options_for_nvrtc(arch=None):
    if arch is None:
        arch = _get_arch()
    if not _use_ptx and int(arch) <= int(_get_max_compute_capability()):
        return f'-arch=sm_{arch}', 'cubin'
    return f'-arch=compute_{arch}', 'ptx'


def _compile_with_cache_cuda(
        source, options, arch, extra_source=None, backend='nvrtc',
        enable_cooperative_groups=False, name_expressions=None,
        log_stream=None, cache_in_memory=False, jitify=False, to_ltoir=False):
    calls.append(dict(source=source, options=options, arch=arch, extra_source=extra_source, backend=backend,
                      enable_cooperative_groups=enable_cooperative_groups, name_expressions=name_expressions,
                      log_stream=log_stream, cache_in_memory=cache_in_memory, jitify=jitify, to_ltoir=to_ltoir))
    if to_ltoir:
        return b'stand-in LTO IR'
    module = function.Module()
    module.load(b'stand-in: compiled by the original')
    if name_expressions:
        module._set_mapping({name: 'original_' + name for name in name_expressions})
    return module


def _compile_module_with_cache(source, options=(), *, arch=None, extra_source=None, backend='nvrtc',
                               enable_cooperative_groups=False, name_expressions=None, log_stream=None,
                               jitify=False, to_ltoir=False):
    # As CuPy's: the module-level name is looked up at call time, so a replacement takes effect.
    return _compile_with_cache_cuda(source, options, arch, extra_source, backend, enable_cooperative_groups,
                                    name_expressions, log_stream, False, jitify, to_ltoir)
