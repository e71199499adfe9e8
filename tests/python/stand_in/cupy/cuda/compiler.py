"""cupy.cuda.compiler of the stand-in (CuPy v14.2.0's names and signatures)."""

from cupy.cuda import function

STAND_IN_ARCH = "90"
_use_ptx = False

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


def _get_arch():
    return STAND_IN_ARCH


def _get_arch_for_options_for_nvrtc(arch=None):
    if arch is None:
        arch = _get_arch()
    if not _use_ptx:
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
