#!/usr/bin/env python3
"""The rules of kiln's house, checked on the source tree (ctest `house_rules`, label unit).

ARCHITECTURE.md states them; this test is what keeps them true. Each rule names the libraries by folder:

  size        a .cpp over 800 lines or a header over 450 in base/ cache/ includes/ engine/ tools/
              (the public C header engine/include/kiln/kiln.h aside: one stable header is the C API's contract)
  facade      engine/ includes another library's private header (anything under <library>/src/), other than
              the include home's one public header (includes/include/)
  lanes       a lane (engine/src/lanes/) includes another library's private header or the include facade, or
              reaches back up to the engine's front (kiln/engine.hpp)
  layers      cache/ (or base/) includes anything of the include home (includes/)
  tiers       tools/ opens remote tiers itself (calls open_remote or includes a cache/src/ header)
  vendors     a two-way vendor switch (a comparison with a named vendor, `v == Vendor::cuda`, `!= Vendor::hip`, or
              a ternary on or giving one, `Vendor::cuda ? a : b`, `c ? Vendor::cuda : Vendor::hip`) outside the engine's vendor table (engine/src/vendor_table.*)
              and its lanes (engine/src/lanes/): a third vendor would compile and silently take one of the two
              branches. What differs by vendor is a row of the table; a switch over every enumerator with no
              default (the compiler names a vendor it lacks) and a test against Vendor::none are not switches
  streams     a library file (base/ cache/ includes/ engine/) includes an iostream or locale header (<sstream>,
              <fstream>, <iostream>, <istream>, <ostream>, <locale>, <iomanip>): a stream reads and writes through
              the host process's global locale and its facets, so a host that sets a locale changes what kiln parses,
              and a process holding two copies of libstdc++ crashed in one (a PCH record's numbers, 2026-12-07).
              The library parses with std::from_chars, formats with fmt and reads files with POSIX calls; tools/
              (the CLI, its own process) may use streams
  catch       a test file under tests/ configures Catch2 (#define CATCH_CONFIG_RUNNER or CATCH_CONFIG_MAIN) other than
              tests/support/catch_session.cpp: Catch2's implementation compiles once for every test binary, and a
              file that configures it loses the tests' precompiled header (10-15 s of CPU a file)

Usage: house_rules.py [SOURCE_ROOT]   check a tree (default: the repository this file is in), after the self-test
       house_rules.py --self-test      only the self-test: a scratch tree that breaks each rule once must have each
                                       breach caught, and the same tree keeping them must pass
Exit status 0 when the rules hold, 1 with one line per breach otherwise.
"""
import os
import re
import sys
import tempfile

LIBRARIES = ("base", "cache", "includes", "engine", "tools")
CPP_LIMIT, HEADER_LIMIT = 800, 450
SIZE_EXEMPT = {"engine/include/kiln/kiln.h"}
SOURCE_SUFFIXES = (".cpp", ".cc", ".c")
HEADER_SUFFIXES = (".hpp", ".h")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)
VENDOR_TABLE = ("engine/src/vendor_table.hpp", "engine/src/vendor_table.cpp")
NAMED_VENDOR = r"(?:\w+::)*Vendor::(?!none\b)\w+"
VENDOR_SWITCH_RE = re.compile(rf"[!=]=\s*{NAMED_VENDOR}|{NAMED_VENDOR}\s*(?:[!=]=|\?)|\?\s*{NAMED_VENDOR}\s*:")
COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
CATCH_CONFIG_RE = re.compile(r"^\s*#\s*define\s+CATCH_CONFIG_(?:RUNNER|MAIN)\b", re.M)
CATCH_SESSION = "tests/support/catch_session.cpp"
STREAM_HEADERS = {"sstream", "fstream", "iostream", "istream", "ostream", "locale", "iomanip"}


def files_of(root):
    """Every source and header file of the house's libraries, as paths relative to root."""
    out = []
    for lib in LIBRARIES:
        for dirpath, dirnames, names in os.walk(os.path.join(root, lib)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES + HEADER_SUFFIXES):
                    out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def header_index(paths):
    """Maps every suffix of every header path (a/b/c.hpp -> c.hpp, b/c.hpp, a/b/c.hpp) to the headers ending so."""
    index = {}
    for path in paths:
        if path.endswith(HEADER_SUFFIXES):
            parts = path.split("/")
            for i in range(len(parts)):
                index.setdefault("/".join(parts[i:]), []).append(path)
    return index


def resolve(including, name, index):
    """The house header an #include names: first beside the including file (as the compiler looks for a quoted
    name), else every header whose path ends with the name. System and third-party headers give []."""
    beside = os.path.normpath(os.path.join(os.path.dirname(including), name))
    if beside in index.get(os.path.basename(name), []):
        return [beside]
    return index.get(name, [])


def library_of(path):
    return path.split("/", 1)[0]


def is_private(path):
    """A library's private part: everything under <library>/src/ (its public door is <library>/include/)."""
    return path.split("/")[1:2] == ["src"]


def check(root):
    paths = files_of(root)
    index = header_index(paths)
    breaches = []
    for path in paths:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lib = library_of(path)
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        limit = HEADER_LIMIT if path.endswith(HEADER_SUFFIXES) else CPP_LIMIT
        if path not in SIZE_EXEMPT and lines > limit:
            breaches.append(f"size: {path} has {lines} lines, over the {limit} a "
                            f"{'header' if limit == HEADER_LIMIT else '.cpp'} may have: split it")
        in_lane = path.startswith("engine/src/lanes/")
        for name in INCLUDE_RE.findall(text):
            if lib != "tools" and name in STREAM_HEADERS:
                breaches.append(f"streams: {path} includes <{name}>: the library does not use iostreams or locales "
                                f"(std::from_chars to parse, fmt to format, POSIX calls to read files)")
            for target in resolve(path, name, index):
                tlib = library_of(target)
                if tlib == lib:
                    if in_lane and target == "engine/include/kiln/engine.hpp":
                        breaches.append(f"lanes: {path} includes {name}: a lane must not reach back up to the "
                                        f"engine's front; the types it needs live in kiln/device.hpp or kiln/launch.hpp")
                    continue
                if lib == "engine" and in_lane and (is_private(target) or tlib == "includes"):
                    breaches.append(f"lanes: {path} includes {name} ({target}): a lane sees no other library's "
                                    f"private headers, the include facade neither")
                elif lib == "engine" and is_private(target):
                    breaches.append(f"facade: {path} includes {name} ({target}), a private header of {tlib}/: "
                                    f"the engine goes through public headers, and into the include home only "
                                    f"through its facade (includes/include/)")
                elif lib in ("cache", "base") and tlib == "includes":
                    breaches.append(f"layers: {path} includes {name} ({target}): {lib}/ sits below the include "
                                    f"home, so no arrow runs from it into includes/")
                elif lib == "tools" and tlib == "cache" and is_private(target):
                    breaches.append(f"tiers: {path} includes {name} ({target}): tools/ reaches the cache and its "
                                    f"remote tiers through the engine's facade")
        if path not in VENDOR_TABLE and not in_lane:
            for number, line in enumerate(COMMENT_RE.sub(lambda m: "\n" * m.group().count("\n"), text).split("\n"), 1):
                if VENDOR_SWITCH_RE.search(line):
                    breaches.append(f"vendors: {path}:{number}: '{line.strip()}' switches two ways on a vendor; look "
                                    f"what differs by vendor up in the vendor table (engine/src/vendor_table.*), or "
                                    f"pass it in from there")
        if lib == "tools" and re.search(r"\bopen_remote\s*\(", text):
            breaches.append(f"tiers: {path} calls open_remote: tools/ does not open remote tiers itself; the "
                            f"storage layer does, through the engine's facade")
    for dirpath, dirnames, names in os.walk(os.path.join(root, "tests")):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(n for n in names if n.endswith(SOURCE_SUFFIXES)):
            path = os.path.relpath(os.path.join(dirpath, name), root)
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                configures = CATCH_CONFIG_RE.search(COMMENT_RE.sub("", f.read()))
            if configures and path != CATCH_SESSION:
                breaches.append(f"catch: {path} defines {configures.group().split()[-1]}: Catch2's implementation "
                                f"compiles once ({CATCH_SESSION}); a test with its own main ends it with "
                                f"kiln_test::run_catch(argc, argv) (tests/support/catch_run.hpp)")
    return breaches


def self_test():
    """Each rule, broken once in a scratch tree, is caught; the same tree without the breaches passes."""
    good = {
        "base/include/kiln/base/log.hpp": "#pragma once\n",
        "cache/include/kiln/cache/storage.hpp": '#pragma once\n#include "kiln/base/log.hpp"\n',
        "cache/src/remote/remote_tier.hpp": "#pragma once\n",
        "cache/src/storage.cpp": '#include "kiln/cache/storage.hpp"\n#include "remote/remote_tier.hpp"\n',
        "includes/include/kiln/includes/include_home.hpp": '#pragma once\n#include "kiln/cache/storage.hpp"\n',
        "includes/src/scan.hpp": "#pragma once\n",
        "includes/src/scan.cpp": '#include "scan.hpp"\n',
        "engine/include/kiln/engine.hpp": "#pragma once\n#include <vector>\n",
        "engine/include/kiln/device.hpp": "#pragma once\n",
        "engine/src/engine.cpp": '#include "kiln/engine.hpp"\n#include "kiln/includes/include_home.hpp"\n'
                                 '#include "kiln/cache/storage.hpp"\n',
        "engine/src/lanes/nvrtc.cpp": '#include "kiln/device.hpp"\n#include <cuda.h>\n'
                                      'bool cuda(Vendor v) { return v == Vendor::cuda; }\n',
        "engine/src/vendor_table.cpp": 'const Row& row(Vendor v) { return v == Vendor::cuda ? kRows[0] : kRows[1]; }\n',
        "engine/src/capi.cpp": 'int c(Vendor v) {\n  switch (v) {\n    case Vendor::cuda: return 1;\n'
                               '    case Vendor::hip: return 2;\n    case Vendor::none: break;\n  }\n  return 0;\n}\n'
                               '// was: v == Vendor::cuda ? 1 : 2\n/* or v != Vendor::hip */\n',
        "engine/include/kiln/kiln.h": "int x;\n" * 900,
        "tests/support/catch_session.cpp": "#define CATCH_CONFIG_RUNNER\n#include <catch2/catch.hpp>\n",
        "tests/system/own_main.cpp": '// not: #define CATCH_CONFIG_RUNNER\n#include "catch_run.hpp"\n',
        "tools/main.cpp": '#include "kiln/engine.hpp"\n#include <iostream>\nint open_remote_count = 0;\n'
                          'bool gpu(Vendor v) { return v != Vendor::none; }\n',
    }
    bad = {
        "size": ("engine/src/big.cpp", "int x;\n" * 801),
        "size ": ("cache/src/big.hpp", "int x;\n" * 451),
        "facade": ("engine/src/requests.cpp", '#include "scan.hpp"\n'),
        "facade ": ("engine/src/storage_use.cpp", '#include "remote/remote_tier.hpp"\n'),
        "lanes": ("engine/src/lanes/hiprtc.cpp", '#include "kiln/includes/include_home.hpp"\n'),
        "lanes ": ("engine/src/lanes/lane.hpp", '#pragma once\n#include "kiln/engine.hpp"\n'),
        "layers": ("cache/src/manifests.cpp", '#include "kiln/includes/include_home.hpp"\n'),
        "tiers": ("tools/tiers.cpp", "void f() { auto t = open_remote (url); }\n"),
        "tiers ": ("tools/prewarm.cpp", '#include "remote/remote_tier.hpp"\n'),
        "vendors": ("engine/src/requests.cpp", 'auto flag(Vendor v) { return v == Vendor::cuda ? "-arch=" : "--offload-arch="; }\n'),
        "vendors ": ("includes/src/resolve.cpp", 'void f() {\n  if (input.vendor != kiln::Vendor::hip) g();\n}\n'),
        "vendors  ": ("cache/src/store/entry.cpp", 'bool lto(Vendor v) { return Vendor::cuda== v; }\n'),
        "catch": ("tests/system/own_main.cpp", "#define CATCH_CONFIG_RUNNER\n#include <catch2/catch.hpp>\n"),
        "catch ": ("tests/unit/main.cpp", "  #  define CATCH_CONFIG_MAIN\n"),
        "streams": ("cache/src/store/store_pch.cpp", "#include <charconv>\n#include <sstream>\n"),
        "streams ": ("engine/include/kiln/engine.hpp", "#pragma once\n#include <vector>\n#include <ostream>\n"),
        "vendors   ": ("tools/devices.cpp", 'Vendor of(const Target& t) { return t.gpu ? Vendor::cuda : Vendor::hip; }\n'),
    }

    def write(root, files):
        for rel, text in files.items():
            full = os.path.join(root, rel)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(text)

    failures = []
    with tempfile.TemporaryDirectory() as root:
        write(root, good)
        found = check(root)
        if found:
            failures.append(f"a tree keeping every rule was refused: {found}")
    for rule, (rel, text) in bad.items():
        with tempfile.TemporaryDirectory() as root:
            write(root, good)
            write(root, {rel: text})
            found = check(root)
            if len(found) != 1 or not found[0].startswith(rule.strip() + ":"):
                failures.append(f"breaking '{rule.strip()}' with {rel} gave {found or 'nothing'}")
    for line in failures:
        print(f"house_rules self-test: {line}")
    print(f"house_rules self-test: {len(bad) - len(failures)} of {len(bad)} breaches caught"
          if not failures else "house_rules self-test: FAILED")
    return 1 if failures else 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    # The self-test runs first every time: a rule that stopped catching its breach fails the test, not only a tree
    # that breaks a rule.
    if self_test() != 0:
        return 1
    root = argv[1] if len(argv) > 1 else os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
    breaches = check(root)
    for line in breaches:
        print(line)
    count = len(files_of(root))
    print(f"house_rules: {count} files, {len(breaches)} breaches" if breaches
          else f"house_rules: {count} files keep every rule")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
