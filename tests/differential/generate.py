#!/usr/bin/python3
"""Writes kiln's differential corpus: small source trees that exercise what a preprocessor can observe, each to
be compiled by the bare compiler and by kiln in every mode (tests/differential/runner.cpp says how and what is
asserted). Python 3, standard library only; the output is a function of the seed and the case count alone.

    generate.py --seed 1 --cases 40 --out corpus.json          # the corpus: cases 0..39
    generate.py --seed 1 --case 12 --features a,b --out x.json  # case 12 made of these features only

Case i takes feature FEATURES[i % len(FEATURES)] first (so any slice at least as long as the list has every
feature in it): alone in the first round of the list, with up to two more at random after it. Each feature draws from a random stream of its own (seed, case,
feature), so a case rebuilt with fewer features keeps the others exactly as they were: the runner's minimal
repro drops features one by one. Adding a case kind is one function and one line in FEATURES.

A case is JSON: files (path under the case's tree -> text), options (kiln's portable options), the source
(name and text) and the siblings (kernels after the same includes, compiled first in one process), the
target, and steps (each a list of file operations applied before compiling again). '@ROOT@' in any text
or option is the absolute path of the case's tree on the machine that runs it; a write's 'pad' appends that
many bytes of comment lines (a header set large enough for NVRTC's precompiled headers, without putting
hundreds of KiB into the corpus file).
"""
import argparse
import json
import random
import sys

HEAVY_PAD = 270 * 1024  # past the NVRTC lane's PCH threshold (engine/src/lanes/nvrtc_pch.hpp, kMinHeaderBytes)
MAX_EDIT_STEPS = 3


class Case:
    """A case being built: features add headers, include lines, code and edits; build() writes the source."""

    def __init__(self, index, vendor, rng):
        self.index = index
        self.vendor = vendor
        self.files = {}
        self.folders = set()  # include folders under the tree, searched in sorted order (inc/a before inc/b)
        self.defines = []
        self.std = None
        self.prefix = []  # code before the includes (what makes NVRTC's lane hoist the prefix with PCH)
        self.includes = []  # include lines, each maybe wrapped in text of its own
        self.after = []  # declarations after the includes
        self.exprs = []  # int expressions the kernel stores: each ends in the binary
        self.steps = []  # proposed edit steps: (priority, [ops])
        self.heavy = False
        self.siblings = False
        self.bom = False
        self.crlf = False
        self.absolute = False
        if vendor == "cuda":
            self.target = "compute_90" if rng.random() < 0.2 else "sm_90"
        else:
            self.target = "gfx90a"

    def header(self, path, text):
        self.files[path] = text
        return path

    def folder(self, name):
        self.folders.add(name)

    def step(self, ops, priority=1):
        self.steps.append((priority, ops))


def write(path, text, pad=0):
    op = {"op": "write", "path": path, "text": text}
    if pad:
        op["pad"] = pad
    return op


def remove(path):
    return {"op": "remove", "path": path}


def value_header(t, name, value, extra=""):
    """A header defining <t>_<NAME> as a value of fixed width (an edit to another value keeps the size)."""
    return "#pragma once\n%s#define %s_%s %4d\n" % (extra, t.upper(), name.upper(), value)


# ---- features: each adds to the case; `t` is its tag (names are tagged so features never collide) ----


def f_quoted_angled(c, t, rng):
    """<lib/api.h> from -I; it includes "detail.h" next to itself and <other.h> from the second folder."""
    c.folder("inc/a")
    c.folder("inc/b")
    c.header("inc/a/%s/api.h" % t, '#pragma once\n#include "detail.h"\n#include <%s_other.h>\n'
             "#define %s_API (%s_DETAIL * 10 + %s_OTHER)\n" % (t, t.upper(), t.upper(), t.upper()))
    c.header("inc/a/%s/detail.h" % t, value_header(t, "detail", rng.randrange(1, 90)))
    c.header("inc/b/%s_other.h" % t, value_header(t, "other", rng.randrange(1, 90)))
    c.includes.append("#include <%s/api.h>" % t)
    c.exprs.append("%s_API" % t.upper())
    c.step([write("inc/a/%s/detail.h" % t, value_header(t, "detail", rng.randrange(100, 999)))])
    if rng.random() < 0.5:
        c.step([write("inc/b/%s_other.h" % t, value_header(t, "other", rng.randrange(100, 999), "// edited\n"))])


def f_include_next(c, t, rng):
    """inc/a's header includes the next one of its name, in inc/b."""
    c.folder("inc/a")
    c.folder("inc/b")
    c.header("inc/a/%s_wrap.h" % t, "#pragma once\n#include_next <%s_wrap.h>\n#define %s_WRAP_A 1\n" % (t, t.upper()))
    c.header("inc/b/%s_wrap.h" % t, value_header(t, "wrap_b", rng.randrange(1, 99)))
    c.includes.append("#include <%s_wrap.h>" % t)
    c.exprs.append("%s_WRAP_A + %s_WRAP_B" % (t.upper(), t.upper()))
    c.step([write("inc/b/%s_wrap.h" % t, value_header(t, "wrap_b", rng.randrange(100, 999)))])


def f_has_include(c, t, rng):
    """__has_include of a header that appears, changes and goes again."""
    c.folder("inc/a")
    c.folder("inc/b")
    angled = rng.random() < 0.5
    spelled = "<%s_opt.h>" % t if angled else '"%s_opt.h"' % t
    c.header("inc/b/%s_base.h" % t, value_header(t, "base", rng.randrange(1, 99)))
    c.includes.append("#include \"%s_base.h\"\n#if __has_include(%s)\n#include %s\n#define %s_OPTV %s_OPT\n"
                      "#else\n#define %s_OPTV 0\n#endif" % (t, spelled, spelled, t.upper(), t.upper(), t.upper()))
    c.exprs.append("%s_OPTV + %s_BASE" % (t.upper(), t.upper()))
    where = rng.choice(["inc/a", "inc/b"])
    c.step([write("%s/%s_opt.h" % (where, t), value_header(t, "opt", rng.randrange(1, 99)))])
    c.step([write("%s/%s_opt.h" % (where, t), value_header(t, "opt", rng.randrange(100, 999)))])
    if rng.random() < 0.5:
        c.step([remove("%s/%s_opt.h" % (where, t))])


def f_shadow(c, t, rng):
    """A header in the second folder, then one of the same name added to the first (it wins), then removed."""
    c.folder("inc/a")
    c.folder("inc/b")
    c.header("inc/b/%s_cfg.h" % t, value_header(t, "cfg", rng.randrange(1, 99)))
    c.includes.append("#include \"%s_cfg.h\"" % t)
    c.exprs.append("%s_CFG" % t.upper())
    c.step([write("inc/a/%s_cfg.h" % t, value_header(t, "cfg", rng.randrange(100, 999)))], priority=2)
    if rng.random() < 0.5:
        c.step([remove("inc/a/%s_cfg.h" % t)])


def abs_header(c, t, rng, spelled):
    """A header reached by its absolute path (the compiler opens it whatever its flags), with and without -I."""
    c.absolute = True
    # Without include folders on even rounds of the feature list, with them on odd ones (kiln keys the two ways).
    if (c.index // len(FEATURES)) % 2 == 1:
        c.folder("inc/a")  # the request has include folders too (another header from them)
        c.header("inc/a/%s_near.h" % t, value_header(t, "near", rng.randrange(1, 99)))
        c.includes.append('#include "%s_near.h"' % t)
        c.exprs.append("%s_NEAR" % t.upper())
    c.header("abs/%s_v.h" % t, value_header(t, "v", rng.randrange(1, 99)))
    c.includes.append(spelled("@ROOT@/abs/%s_v.h" % t))
    c.exprs.append("%s_V" % t.upper())
    # An edit that keeps the size, then one that does not.
    c.step([write("abs/%s_v.h" % t, value_header(t, "v", rng.randrange(100, 999)))], priority=3)
    c.step([write("abs/%s_v.h" % t, value_header(t, "v", rng.randrange(100, 999), "// grown\n"))])


def f_abs_plain(c, t, rng):
    abs_header(c, t, rng, lambda path: '#include "%s"' % path)


def f_abs_digraph(c, t, rng):
    abs_header(c, t, rng, lambda path: '%%:include "%s"' % path)


def f_abs_splice(c, t, rng):
    abs_header(c, t, rng, lambda path: '#inc\\\nlude "%s"' % path)


def f_abs_macro(c, t, rng):
    def spelled(path):
        return ("#define %s_S(x) #x\n#define %s_X(x) %s_S(x)\n#include %s_X(%s)"
                % (t.upper(), t.upper(), t.upper(), t.upper(), path))
    abs_header(c, t, rng, spelled)


def f_abs_spelling(c, t, rng):
    """Other spellings of an absolute include: a comment or blanks in the directive, a splice in the name."""
    forms = [
        lambda p: '#/* a comment */include "%s"' % p,
        lambda p: '#  include "%s"' % p,
        lambda p: '%%:  include "%s"' % p,
        lambda p: '#include "%s\\\n%s"' % (p[:8], p[8:]),
        lambda p: '# \\\n include "%s"' % p,
        lambda p: '#define %s_PATH "%s"\n#include %s_PATH' % (t.upper(), p, t.upper()),
    ]
    abs_header(c, t, rng, rng.choice(forms))


def f_abs_has_include(c, t, rng):
    """__has_include of an absolute path that appears later."""
    c.absolute = True
    c.includes.append('#if __has_include("@ROOT@/abs/%s_maybe.h")\n#include "@ROOT@/abs/%s_maybe.h"\n'
                      "#define %s_MAYBEV %s_MAYBE\n#else\n#define %s_MAYBEV 0\n#endif"
                      % (t, t, t.upper(), t.upper(), t.upper()))
    c.exprs.append("%s_MAYBEV" % t.upper())
    c.step([write("abs/%s_maybe.h" % t, value_header(t, "maybe", rng.randrange(1, 99)))], priority=2)
    c.step([write("abs/%s_maybe.h" % t, value_header(t, "maybe", rng.randrange(100, 999)))])


def f_include_spelling(c, t, rng):
    """A header from -I spelled as a digraph, with a splice, a comment, or through a macro."""
    c.folder("inc/a")
    c.header("inc/a/%s_sp.h" % t, value_header(t, "sp", rng.randrange(1, 99)))
    name = "%s_sp.h" % t
    forms = [
        '%%:include "%s"' % name,
        '#inc\\\nlude "%s"' % name,
        '#/**/include <%s>' % name,
        '#define %s_STR(x) #x\n#define %s_XSTR(x) %s_STR(x)\n#define %s_NAME %s_sp\n#include %s_XSTR(%s_NAME.h)'
        % (t.upper(), t.upper(), t.upper(), t.upper(), t, t.upper(), t.upper()),
        '#define %s_HDR "%s"\n#include %s_HDR' % (t.upper(), name, t.upper()),
        '#include "%s\\\n%s"' % (name[:3], name[3:]),
    ]
    c.includes.append(rng.choice(forms))
    c.exprs.append("%s_SP" % t.upper())
    c.step([write("inc/a/%s_sp.h" % t, value_header(t, "sp", rng.randrange(100, 999)))], priority=2)


def f_line_file(c, t, rng):
    """__LINE__ and __FILE__ in the source and in headers (the names the compiler gives the headers)."""
    c.folder("inc/a")
    c.header("inc/a/%s_where.h" % t,
             "#pragma once\n\n"
             'extern "C" __device__ char %s_file_h[] = __FILE__;\n'
             "static constexpr int %s_line_h = __LINE__;\n" % (t, t))
    c.includes.append('#include "%s_where.h"' % t)
    if c.vendor == "cuda":
        # HIPRTC (comgr) compiles the source as /tmp/comgr-XXXXXX/input/CompileSource: its __FILE__ is random per
        # compile, with kiln or without, so a HIP case keeps to its length (and to the headers' names).
        c.after.append('extern "C" __device__ char %s_file_s[] = __FILE__;' % t)
    c.exprs.append("%s_line_h" % t)
    c.exprs.append("__LINE__")
    c.exprs.append("(int)sizeof(__FILE__)")
    c.step([write("inc/a/%s_where.h" % t,
                  "#pragma once\n\n\n"
                  'extern "C" __device__ char %s_file_h[] = __FILE__;\n'
                  "static constexpr int %s_line_h = __LINE__;\n" % (t, t))])


def f_include_level(c, t, rng):
    """__INCLUDE_LEVEL__ read in a header and in the header it includes."""
    c.folder("inc/a")
    c.header("inc/a/%s_lv.h" % t, '#pragma once\n#include "%s_lv2.h"\nstatic constexpr int %s_level = __INCLUDE_LEVEL__;\n'
             % (t, t))
    c.header("inc/a/%s_lv2.h" % t, "#pragma once\nstatic constexpr int %s_level2 = __INCLUDE_LEVEL__ * 10;\n" % t)
    c.includes.append('#include "%s_lv.h"' % t)
    c.exprs.append("%s_level + %s_level2 + __INCLUDE_LEVEL__ * 100" % (t, t))
    c.step([write("inc/a/%s_lv2.h" % t, "#pragma once\nstatic constexpr int %s_level2 = __INCLUDE_LEVEL__ * 20;\n" % t)])


def f_counter(c, t, rng):
    """__COUNTER__ in headers and in the source: it counts across the whole translation unit (HIPRTC only)."""
    c.folder("inc/a")
    c.header("inc/a/%s_cnt.h" % t, "#pragma once\nstatic constexpr int %s_c1 = __COUNTER__;\nstatic constexpr int %s_c2 = __COUNTER__;\n"
             % (t, t))
    c.includes.append('#include "%s_cnt.h"' % t)
    c.after.append("static constexpr int %s_c3 = __COUNTER__;" % t)
    c.exprs.append("%s_c1 + %s_c2 * 10 + %s_c3 * 100" % (t, t, t))
    c.step([write("inc/a/%s_cnt.h" % t, "#pragma once\nstatic constexpr int %s_c0 = __COUNTER__;\n"
                  "static constexpr int %s_c1 = __COUNTER__;\nstatic constexpr int %s_c2 = __COUNTER__;\n" % (t, t, t))])


def f_assert(c, t, rng):
    """assert in a header's function and in the kernel: the file, line and function go into the binary."""
    c.folder("inc/a")
    c.header("inc/a/%s_chk.h" % t, "#pragma once\n__device__ inline int %s_check(int v) {\n  assert(v != 12345);\n  return v + 1;\n}\n"
             % t)
    c.includes.append('#include "%s_chk.h"' % t)
    c.exprs.append("%s_check(out[1])" % t)
    c.after.append("__device__ inline void %s_here(int v) { assert(v != 54321); }" % t)
    c.exprs.append("(%s_here(out[2]), 0)" % t)
    c.step([write("inc/a/%s_chk.h" % t, "#pragma once\n\n__device__ inline int %s_check(int v) {\n  assert(v != 12345);\n  return v + 1;\n}\n"
                  % t)])


def f_line_directive(c, t, rng):
    """#line in the source (before the includes or between them) and in a header."""
    c.folder("inc/a")
    c.header("inc/a/%s_ln.h" % t, '#pragma once\n#line 500 "%s_renamed.h"\nstatic constexpr int %s_ln = __LINE__;\n'
             'extern "C" __device__ char %s_ln_file[] = __FILE__;\n' % (t, t, t))
    where = rng.choice([c.prefix, c.includes])
    where.append('#line %d "%s_named.cu"' % (rng.randrange(20, 400), t))
    c.includes.append('#include "%s_ln.h"' % t)
    c.exprs.append("%s_ln + __LINE__" % t)
    c.exprs.append("(int)sizeof(__FILE__)")
    c.step([write("inc/a/%s_ln.h" % t, '#pragma once\n#line 600 "%s_renamed.h"\nstatic constexpr int %s_ln = __LINE__;\n'
                  'extern "C" __device__ char %s_ln_file[] = __FILE__;\n' % (t, t, t))])


def f_gnu_marker(c, t, rng):
    """A GNU line marker (# N "file") in the source between the includes, and in a header."""
    c.folder("inc/a")
    c.header("inc/a/%s_gm.h" % t, '#pragma once\n# 40 "%s_marked.h"\nstatic constexpr int %s_gm = __LINE__;\n' % (t, t))
    c.includes.append('# %d "%s_other.cu"' % (rng.randrange(50, 300), t))
    c.includes.append('#include "%s_gm.h"' % t)
    c.exprs.append("%s_gm + __LINE__" % t)
    c.exprs.append("(int)sizeof(__FILE__)")
    c.step([write("inc/a/%s_gm.h" % t, '#pragma once\n# 41 "%s_marked.h"\nstatic constexpr int %s_gm = __LINE__;\n' % (t, t))])


def f_line_dir_lookup(c, t, rng):
    """A #line naming a file in another folder, then a quoted include: where does the compiler look?"""
    c.folder("inc/a")
    c.header("inc/a/%s_look.h" % t, value_header(t, "look", rng.randrange(1, 99)))
    c.header("inc/c/%s_look.h" % t, value_header(t, "look", rng.randrange(100, 199)))
    c.includes.append('#line 30 "@ROOT@/inc/c/%s_elsewhere.cu"\n#include "%s_look.h"' % (t, t))
    c.exprs.append("%s_LOOK" % t.upper())
    c.step([write("inc/c/%s_look.h" % t, value_header(t, "look", rng.randrange(200, 299)))])


def f_after_code(c, t, rng):
    """Includes after code (CuPy's shape): with PCH, NVRTC's lane moves the prefix into a header of its own."""
    c.folder("inc/a")
    c.prefix.append("typedef int %s_T;" % t)
    c.prefix.append("static constexpr %s_T %s_early = __LINE__;" % (t, t))
    c.header("inc/a/%s_late.h" % t, value_header(t, "late", rng.randrange(1, 99)))
    c.includes.append('#include "%s_late.h"' % t)
    c.exprs.append("%s_early + %s_LATE + __LINE__" % (t, t.upper()))
    c.step([write("inc/a/%s_late.h" % t, value_header(t, "late", rng.randrange(100, 999)))])


def f_in_declaration(c, t, rng):
    """Includes inside a struct and inside a function body."""
    c.folder("inc/a")
    c.header("inc/a/%s_fields.h" % t, "int a = %d;\nint b = __LINE__;\n" % rng.randrange(1, 99))
    c.header("inc/a/%s_body.h" % t, "v += %d;\n" % rng.randrange(1, 99))
    c.after.append('struct %s_S {\n#include "%s_fields.h"\n};' % (t, t))
    c.after.append('__device__ inline int %s_f(int v) {\n#include "%s_body.h"\n  return v;\n}' % (t, t))
    c.exprs.append("%s_S{}.a + %s_S{}.b + %s_f(1)" % (t, t, t))
    c.step([write("inc/a/%s_body.h" % t, "v += %d;\n" % rng.randrange(100, 999))])


def f_in_namespace(c, t, rng):
    """An include inside a namespace (and one inside an extern "C++" block)."""
    c.folder("inc/a")
    c.header("inc/a/%s_ns.h" % t, "static constexpr int value = %d;\n" % rng.randrange(1, 99))
    c.after.append('namespace %s_ns {\n#include "%s_ns.h"\n}' % (t, t))
    c.exprs.append("%s_ns::value" % t)
    c.step([write("inc/a/%s_ns.h" % t, "static constexpr int value = %d;\n" % rng.randrange(100, 999))])


def f_in_conditional(c, t, rng):
    """Includes in both branches of a conditional group decided by a -D, and one decided by a header."""
    c.folder("inc/a")
    c.header("inc/a/%s_one.h" % t, value_header(t, "pick", rng.randrange(1, 99)))
    c.header("inc/a/%s_two.h" % t, value_header(t, "pick", rng.randrange(100, 199)))
    c.header("inc/a/%s_mode.h" % t, "#pragma once\n#define %s_MODE 1\n" % t.upper())
    if rng.random() < 0.5:
        c.defines.append("-D%s_USE_TWO" % t.upper())
    c.includes.append('#include "%s_mode.h"\n#ifdef %s_USE_TWO\n#include "%s_two.h"\n#elif %s_MODE == 1\n'
                      '#include "%s_one.h"\n#else\n#include "%s_two.h"\n#endif'
                      % (t, t.upper(), t, t.upper(), t, t))
    c.exprs.append("%s_PICK" % t.upper())
    # Flip the branch from a header (the lean walk must see it), then edit the header it now reads.
    c.step([write("inc/a/%s_mode.h" % t, "#pragma once\n#define %s_MODE 2\n" % t.upper())], priority=2)
    c.step([write("inc/a/%s_two.h" % t, value_header(t, "pick", rng.randrange(200, 299)))])


def f_bom(c, t, rng):
    """UTF-8 byte order marks on a header (and maybe the source). NVRTC fails on one and kiln drops it, so the
    runner hands bare NVRTC such files without it (runner.cpp, bare_view); HIPRTC takes them as they are."""
    c.folder("inc/a")
    c.header("inc/a/%s_bom.h" % t, "\ufeff" + value_header(t, "bom", rng.randrange(1, 99)))
    c.includes.append('#include "%s_bom.h"' % t)
    c.exprs.append("%s_BOM" % t.upper())
    c.bom = c.bom or rng.random() < 0.5
    c.step([write("inc/a/%s_bom.h" % t, "\ufeff" + value_header(t, "bom", rng.randrange(100, 999)))])


def f_crlf(c, t, rng):
    """CRLF line ends in headers (a splice and a directive among them) and maybe the source."""
    c.folder("inc/a")
    text = value_header(t, "cr", rng.randrange(1, 99), "#define %s_LONG \\\n  (1 + \\\n   2)\n" % t.upper())
    c.header("inc/a/%s_cr.h" % t, text.replace("\n", "\r\n"))
    c.includes.append('#include "%s_cr.h"' % t)
    c.exprs.append("%s_CR + %s_LONG + __LINE__" % (t.upper(), t.upper()))
    c.crlf = c.crlf or rng.random() < 0.5
    edited = value_header(t, "cr", rng.randrange(100, 999), "#define %s_LONG \\\n  (3 + \\\n   2)\n" % t.upper())
    c.step([write("inc/a/%s_cr.h" % t, edited.replace("\n", "\r\n"))])


def heavy(c, t, rng):
    """A header set past NVRTC's PCH threshold, and sibling kernels after the same includes."""
    if c.heavy:
        return
    c.heavy = True
    c.siblings = True
    body = "#pragma once\n#define %s_HEAVY 7\n" % t.upper()
    if c.absolute or rng.random() < 0.3:
        c.absolute = True
        c.header("abs/%s_heavy.h" % t, body)
        c.includes.insert(0, '#include "@ROOT@/abs/%s_heavy.h"' % t)
        path = "abs/%s_heavy.h" % t
    else:
        c.folder("inc/a")
        c.header("inc/a/%s_heavy.h" % t, body)
        c.includes.insert(0, '#include "%s_heavy.h"' % t)
        path = "inc/a/%s_heavy.h" % t
    c.pads = getattr(c, "pads", {})
    c.pads[path] = HEAVY_PAD
    c.exprs.append("%s_HEAVY" % t.upper())


def f_heavy(c, t, rng):
    heavy(c, t, rng)
    if rng.random() < 0.5:
        f_after_code(c, t + "h", rng)


def f_hoist_include_level(c, t, rng):
    """With PCH, includes after code and a header that reads __INCLUDE_LEVEL__: it must still read 1."""
    f_after_code(c, t, rng)
    heavy(c, t, rng)
    c.header("inc/a/%s_lvl.h" % t, "#pragma once\nstatic constexpr int %s_lvl = __INCLUDE_LEVEL__;\n" % t)
    c.includes.append('#include "%s_lvl.h"' % t)
    c.exprs.append("%s_lvl" % t)


def f_hoist_gnu_marker(c, t, rng):
    """With PCH, a GNU line marker before the last include after code: __LINE__ after it must follow the marker."""
    f_after_code(c, t, rng)
    heavy(c, t, rng)
    c.header("inc/a/%s_last.h" % t, value_header(t, "last", rng.randrange(1, 99)))
    c.includes.append('# 100 "%s_other.cu"' % t)
    c.includes.append('#include "%s_last.h"' % t)
    c.exprs.append("%s_LAST + __LINE__" % t.upper())
    c.exprs.append("(int)sizeof(__FILE__)")


def f_hoist_line(c, t, rng):
    """With PCH, a #line before the last include after code (the lane does not hoist then)."""
    f_after_code(c, t, rng)
    heavy(c, t, rng)
    c.header("inc/a/%s_ll.h" % t, value_header(t, "ll", rng.randrange(1, 99)))
    c.includes.append('#line 100 "%s_other.cu"' % t)
    c.includes.append('#include "%s_ll.h"' % t)
    c.exprs.append("%s_LL + __LINE__" % t.upper())


def f_std20(c, t, rng):
    c.std = "c++20"
    c.exprs.append("(int)(__cplusplus / 100)")


def f_define_flag(c, t, rng):
    """A -D value read by a header, and a -U of a name a header defines only when it is not defined."""
    c.folder("inc/a")
    c.defines.append("-D%s_VAL=%d" % (t.upper(), rng.randrange(1, 99)))
    c.header("inc/a/%s_def.h" % t, "#pragma once\n#ifndef %s_VAL\n#define %s_VAL 0\n#endif\n#define %s_TWICE (%s_VAL * 2)\n"
             % ((t.upper(),) * 4))
    c.includes.append('#include "%s_def.h"' % t)
    c.exprs.append("%s_TWICE" % t.upper())
    c.step([write("inc/a/%s_def.h" % t, "#pragma once\n#ifndef %s_VAL\n#define %s_VAL 0\n#endif\n#define %s_TWICE (%s_VAL * 3)\n"
                  % ((t.upper(),) * 4))])


def f_pragma_once_spellings(c, t, rng):
    """One file with #pragma once reached by two spellings (relative to its includer, and from -I)."""
    c.folder("inc/a")
    c.header("inc/a/%s/once.h" % t, "#pragma once\n__device__ inline int %s_once() { return %d; }\n" % (t, rng.randrange(1, 99)))
    c.header("inc/a/%s/user.h" % t, '#pragma once\n#include "once.h"\n#include "../%s/once.h"\n' % t)
    c.includes.append('#include "%s/user.h"\n#include <%s/once.h>' % (t, t))
    c.exprs.append("%s_once()" % t)
    c.step([write("inc/a/%s/once.h" % t, "#pragma once\n__device__ inline int %s_once() { return %d; }\n"
                  % (t, rng.randrange(100, 999)))])


def f_guard_twice(c, t, rng):
    """An include guard, the header included twice and its guard tested in the source."""
    c.folder("inc/b")
    g = "%s_GUARD_H" % t.upper()
    c.header("inc/b/%s_g.h" % t, "#ifndef %s\n#define %s\n#define %s_G %d\n#endif\n" % (g, g, t.upper(), rng.randrange(1, 99)))
    c.includes.append('#include <%s_g.h>\n#include "%s_g.h"\n#ifdef %s\n#define %s_SEEN 1\n#endif' % (t, t, g, t.upper()))
    c.exprs.append("%s_G + %s_SEEN" % (t.upper(), t.upper()))
    c.step([write("inc/b/%s_g.h" % t, "#ifndef %s\n#define %s\n#define %s_G %d\n#endif\n"
                  % (g, g, t.upper(), rng.randrange(100, 999)))])


# Each feature: name, function, the vendors it applies to.
FEATURES = [
    ("abs_digraph", f_abs_digraph, ("cuda", "hip")),
    ("abs_splice", f_abs_splice, ("cuda", "hip")),
    ("abs_macro", f_abs_macro, ("cuda", "hip")),
    ("hoist_include_level", f_hoist_include_level, ("cuda",)),
    ("hoist_gnu_marker", f_hoist_gnu_marker, ("cuda",)),
    ("quoted_angled", f_quoted_angled, ("cuda", "hip")),
    ("include_next", f_include_next, ("cuda", "hip")),
    ("has_include", f_has_include, ("cuda", "hip")),
    ("shadow", f_shadow, ("cuda", "hip")),
    ("abs_plain", f_abs_plain, ("cuda", "hip")),
    ("abs_spelling", f_abs_spelling, ("cuda", "hip")),
    ("abs_has_include", f_abs_has_include, ("cuda", "hip")),
    ("include_spelling", f_include_spelling, ("cuda", "hip")),
    ("line_file", f_line_file, ("cuda", "hip")),
    ("include_level", f_include_level, ("cuda", "hip")),
    ("counter", f_counter, ("hip",)),  # NVRTC 13.0 has no __COUNTER__ (an undefined identifier there)
    ("assert", f_assert, ("cuda",)),
    ("line_directive", f_line_directive, ("cuda", "hip")),
    ("gnu_marker", f_gnu_marker, ("cuda", "hip")),
    ("line_dir_lookup", f_line_dir_lookup, ("cuda", "hip")),
    ("after_code", f_after_code, ("cuda", "hip")),
    ("in_declaration", f_in_declaration, ("cuda", "hip")),
    ("in_namespace", f_in_namespace, ("cuda", "hip")),
    ("in_conditional", f_in_conditional, ("cuda", "hip")),
    ("bom", f_bom, ("cuda", "hip")),
    ("crlf", f_crlf, ("cuda", "hip")),
    ("heavy", f_heavy, ("cuda",)),
    ("hoist_line", f_hoist_line, ("cuda",)),
    ("std20", f_std20, ("cuda", "hip")),
    ("define_flag", f_define_flag, ("cuda", "hip")),
    ("pragma_once_spellings", f_pragma_once_spellings, ("cuda", "hip")),
    ("guard_twice", f_guard_twice, ("cuda", "hip")),
]
BY_NAME = {name: (fn, vendors) for name, fn, vendors in FEATURES}
ORDER = {name: i for i, (name, _, _) in enumerate(FEATURES)}
# Every HIP_EVERY-th case compiles for AMD (HIPRTC), when its first feature applies there.
HIP_EVERY = 5


def rng_for(seed, index, what):
    return random.Random("%d:%d:%s" % (seed, index, what))


def pick_features(seed, index):
    """The first round of the list takes each feature alone; later rounds add up to two at random."""
    first, _, vendors = FEATURES[index % len(FEATURES)]
    hip = index % HIP_EVERY == HIP_EVERY - 1 or "cuda" not in vendors
    vendor = "hip" if hip and "hip" in vendors else "cuda"
    rng = rng_for(seed, index, "pick")
    names = [first]
    for _ in range(rng.choice([0, 1, 1, 2]) if index >= len(FEATURES) else 0):
        name, _, vendors = rng.choice(FEATURES)
        if name not in names and vendor in vendors:
            names.append(name)
    return vendor, names


def crlf(text):
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def build(seed, index, vendor, names):
    c = Case(index, vendor, rng_for(seed, index, "case"))
    for name in names:
        # The tag is the feature's place in FEATURES: the same in every case it is part of, so a case rebuilt
        # without one feature keeps the others' names.
        BY_NAME[name][0](c, "f%d" % ORDER[name], rng_for(seed, index, name))
    kname = "k%04d" % index
    head = "".join(line + "\n" for line in c.prefix + c.includes + c.after)

    def kernel(name, exprs):
        body = "".join("  out[%d] = %s;\n" % (i + 4, e) for i, e in enumerate(exprs))
        return 'extern "C" __global__ void %s(int* out) {\n%s}\n' % (name, body)

    source = head + kernel(kname, c.exprs)
    siblings = []
    if c.siblings:
        # Kernels after the same text (the prelude NVRTC's lane hoists is named by it), with bodies of their own.
        for s in range(2):
            siblings.append(head + kernel("%s_sib%d" % (kname, s), ["%d" % (s + 1)] + c.exprs[:1]))
    if c.crlf:
        source = crlf(source)
        siblings = [crlf(s) for s in siblings]
    if c.bom:
        source = "\ufeff" + source
        siblings = ["\ufeff" + s for s in siblings]
    options = ["-I@ROOT@/%s" % f for f in sorted(c.folders)] + c.defines
    if c.std:
        options.append("-std=" + c.std)
    pads = getattr(c, "pads", {})
    files = [write(path, text, pads.get(path, 0)) for path, text in sorted(c.files.items())]
    # The edit steps: every priority above 1 (the edits the features exist for), then the others, at most
    # MAX_EDIT_STEPS in all, in the order the features proposed them.
    ranked = sorted(range(len(c.steps)), key=lambda i: (-c.steps[i][0], i))[:MAX_EDIT_STEPS]
    steps = [c.steps[i][1] for i in sorted(ranked)]
    for step in steps:
        for op in step:
            if op["op"] == "write" and op["path"] in pads:
                op["pad"] = pads[op["path"]]
    for path in sorted(c.folders):
        files.append({"op": "mkdir", "path": path})
    return {
        "id": "c%04d" % index,
        "index": index,
        "seed": seed,
        "features": names,
        "vendor": vendor,
        "target": c.target,
        "source_name": kname + ".cu",
        "source": source,
        "siblings": siblings,
        "options": options,
        "files": files,
        "steps": steps,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--first", type=int, default=0, help="the index of the first case")
    parser.add_argument("--case", type=int, help="only this case")
    parser.add_argument("--features", help="with --case: build it from these features (comma-separated)")
    parser.add_argument("--out", default="-")
    args = parser.parse_args()
    cases = []
    if args.case is not None:
        vendor, names = pick_features(args.seed, args.case)
        if args.features is not None:
            names = [n for n in args.features.split(",") if n]
            unknown = [n for n in names if n not in BY_NAME]
            if unknown:
                sys.exit("generate.py: unknown feature(s) %s" % ", ".join(unknown))
        cases.append(build(args.seed, args.case, vendor, names))
    else:
        for index in range(args.first, args.first + args.cases):
            vendor, names = pick_features(args.seed, index)
            cases.append(build(args.seed, index, vendor, names))
    text = json.dumps({"seed": args.seed, "cases": cases}, indent=1, sort_keys=True) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(text)


if __name__ == "__main__":
    main()
