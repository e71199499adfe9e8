#!/usr/bin/env python3
"""libkiln exports no symbol of the C++ runtime (ctest `package_exports`, label package).

A toolchain that links libstdc++ statically into libkiln (-static-libstdc++, or a system with only
libstdc++.a) would export the runtime's own symbols from it, and in a process that also holds libstdc++.so
(Python with CuPy or PyTorch) the loader then binds part of libkiln's runtime to the other copy: a stream read
jumped into libkiln's read-only data on the H100 (2026-12-07). engine/CMakeLists.txt keeps such a copy local
(--exclude-libs); this test checks the built library, so that a build that still exports them fails here.

Usage: exports_test.py LIBKILN [--archives LIST]   check the library (after the self-test)
       exports_test.py --self-test [--archives LIST]   only the self-test: a shared object with a static
                                         libstdc++ and nothing hidden must be caught, the same linked with
                                         --exclude-libs,LIST must pass (LIST: libkiln's KILN_RUNTIME_ARCHIVES,
                                         engine/CMakeLists.txt, passed in by the test; default the runtime's)
Exit status 0, 1 with the symbols found, 77 (skipped) without nm.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The runtime's own entry points and data, never a template instantiation over kiln's types: operator
# new/delete, the C++ ABI (__cxa_*), the unwinder, std::locale and std::ios_base's members, the personality.
RUNTIME = re.compile(r"^(_Zn[wa]m|_Zd[la]Pv|__cxa_|__gxx_personality|_Unwind_"
                     r"|_ZNSt6locale|_ZNSt8ios_base|_ZNKSt6locale)")
DEFAULT_ARCHIVES = "libstdc++.a:libsupc++.a:libgcc.a:libgcc_eh.a"


def exported_runtime(library):
    out = subprocess.run(["nm", "-D", "--defined-only", library], capture_output=True, text=True, check=True).stdout
    names = [line.split()[-1] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if RUNTIME.match(n.split("@")[0]))


def self_test(archives):
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        print("exports_test self-test: no C++ compiler, skipped")
        return 0
    with tempfile.TemporaryDirectory() as work:
        source = os.path.join(work, "s.cpp")
        with open(source, "w") as f:
            f.write('#include <sstream>\nextern "C" double parse(const char* t) { std::istringstream in(t); '
                    'double v = 0; in >> v; return v; }\n')
        results = {}
        for name, extra in (("exported", []), ("local", [f"-Wl,--exclude-libs,{archives}"])):
            library = os.path.join(work, f"lib{name}.so")
            built = subprocess.run([compiler, "-shared", "-fPIC", "-static-libstdc++", "-o", library, source] + extra,
                                   capture_output=True, text=True)
            if built.returncode != 0:
                print("exports_test self-test: no static libstdc++ to link here, skipped "
                      f"({built.stderr.strip()[:200]})")
                return 0
            results[name] = exported_runtime(library)
    if not results["exported"] or results["local"]:
        print(f"exports_test self-test: FAILED (exported: {len(results['exported'])} found, "
              f"local: {results['local'][:5]})")
        return 1
    print(f"exports_test self-test: a static runtime left exported is caught ({len(results['exported'])} symbols, e.g. "
          f"{results['exported'][0]}); kept local, none")
    return 0


def main(argv):
    args = argv[1:]
    archives = DEFAULT_ARCHIVES
    if "--archives" in args:
        at = args.index("--archives")
        archives = args[at + 1]
        del args[at:at + 2]
    if shutil.which("nm") is None:
        print("exports_test: no nm here, skipped")
        return 77
    if self_test(archives) != 0:
        return 1
    if args[:1] == ["--self-test"]:
        return 0
    library = args[0]
    found = exported_runtime(library)
    for name in found[:20]:
        print(f"exported from {library}: {name}")
    print(f"exports_test: {len(found)} symbols of the C++ runtime exported" if found
          else f"exports_test: {os.path.basename(library)} exports none of the C++ runtime's symbols")
    return 1 if found else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv))
