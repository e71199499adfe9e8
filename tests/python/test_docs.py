"""The docs stay true to the tree (no libkiln needed): code comments cite `docs/design.md §N` and
`bench/RESULTS.md, section N` by number, the README maps the docs/ pages by path, and the environment
table in docs/configuration.md is the one list of what kiln reads. Moving a section, renaming a page or
reading a new KILN_ variable without saying so fails here rather than leaving a reader at a dead end.
"""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# What is scanned for citations and environment reads: the code and scripts, not build outputs.
SOURCE_DIRS = ("base", "cache", "engine", "tools", "device_src", "python", "tests", "scripts", "bench", "cmake",
               "examples", "includes")
SOURCE_EXTENSIONS = (".cpp", ".hpp", ".h", ".cu", ".inl", ".py", ".sh", ".cmake", ".txt", ".md")


def read(relative):
    with open(os.path.join(REPO, relative), encoding="utf-8") as f:
        return f.read()


def source_files():
    for top in SOURCE_DIRS:
        root = os.path.join(REPO, top)
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git")]
            for name in files:
                if name.endswith(SOURCE_EXTENSIONS):
                    yield os.path.join(folder, name)
    for name in ("README.md", "ARCHITECTURE.md", "CMakeLists.txt"):
        yield os.path.join(REPO, name)
    for name in os.listdir(os.path.join(REPO, "docs")):
        yield os.path.join(REPO, "docs", name)


def all_text():
    for path in source_files():
        with open(path, encoding="utf-8", errors="replace") as f:
            yield os.path.relpath(path, REPO), f.read()


def numbered_sections(markdown):
    """The N of every `## N. title` heading."""
    return {int(m.group(1)) for m in re.finditer(r"^## (\d+)\. ", markdown, re.MULTILINE)}


def test_design_citations_name_existing_sections():
    sections = numbered_sections(read("docs/design.md"))
    assert sections, "docs/design.md has no numbered sections"
    bad = []
    for path, text in all_text():
        for m in re.finditer(r"design\.md §(\d+)(?:-§(\d+))?", text):
            for n in filter(None, m.groups()):
                if int(n) not in sections:
                    bad.append(f"{path}: {m.group(0)}")
        # design.md itself, ARCHITECTURE.md and the docs/ pages write a citation of design.md as `§N`.
        if path == "ARCHITECTURE.md" or path.startswith("docs" + os.sep):
            for m in re.finditer(r"(?<!RESULTS\.md )§(\d+)", text):
                if int(m.group(1)) not in sections:
                    bad.append(f"{path}: {m.group(0)}")
    assert not bad, "citations of design.md sections that do not exist:\n" + "\n".join(bad)


def test_results_citations_name_existing_sections():
    sections = numbered_sections(read("bench/RESULTS.md"))
    assert sections, "bench/RESULTS.md has no numbered sections"
    patterns = (r"RESULTS\.md,? (?:section|§) ?(\d+)(?: and (\d+))?",
                r"RESULTS\.md,? sections (\d+) and (\d+)",
                r"sections? (\d+)(?: and (\d+))? of bench/RESULTS\.md")
    bad = []
    for path, text in all_text():
        for pattern in patterns:
            for m in re.finditer(pattern, text):
                for n in filter(None, m.groups()):
                    if int(n) not in sections:
                        bad.append(f"{path}: {m.group(0)}")
    assert not bad, "citations of RESULTS.md sections that do not exist:\n" + "\n".join(bad)


def test_results_index_matches_its_sections():
    text = read("bench/RESULTS.md")
    index = text[text.index("Sections"):text.index("\n## ", text.index("Sections"))]
    listed = {int(m.group(1)) for m in re.finditer(r"^(\d+)\. ", index, re.MULTILINE)}
    assert listed == numbered_sections(text)
    # Section titles name the benchmark; the issue that asked for it is a line inside.
    titled = [line for line in text.splitlines() if line.startswith("#") and re.search(r"\(issues? \d", line)]
    assert not titled, titled


def test_pages_the_docs_name_exist():
    missing = []
    for name in ["README.md", "ARCHITECTURE.md"] + [os.path.join("docs", n) for n in os.listdir(os.path.join(REPO, "docs"))]:
        for m in re.finditer(r"(?<![\w/.-])((?:docs|bench)/[\w./-]+\.md|ARCHITECTURE\.md|README\.md)", read(name)):
            if not os.path.exists(os.path.join(REPO, m.group(1))):
                missing.append(f"{name}: {m.group(1)}")
    assert not missing, "pages named that do not exist:\n" + "\n".join(missing)


def test_readme_maps_every_docs_page():
    readme = read("README.md")
    pages = sorted(n for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md"))
    unmapped = [p for p in pages if f"docs/{p}" not in readme]
    assert not unmapped, f"docs/ pages the README does not point to: {unmapped}"


def test_environment_table_lists_every_variable_kiln_reads():
    table = read("docs/configuration.md")
    statuses = set(re.findall(r"\b(KILN_(?:OK|ERROR_[A-Z_]+))\b", read("engine/include/kiln/kiln.h")))
    statuses.add("KILN_ERROR_UNKNOWN")  # kiln_status_name's answer for an unknown value
    read_by_kiln = set()
    for top in ("base", "cache", "engine", "tools", os.path.join("python", "kiln"), "includes"):
        root = os.path.join(REPO, top)
        for folder, _, files in os.walk(root):
            for name in files:
                if name.endswith((".cpp", ".hpp", ".py")):
                    with open(os.path.join(folder, name), encoding="utf-8") as f:
                        read_by_kiln.update(re.findall(r"[\"'](KILN_[A-Z0-9_]+)[\"']", f.read()))
    undocumented = sorted(v for v in read_by_kiln - statuses if f"`{v}" not in table)
    assert not undocumented, f"read by kiln but not in docs/configuration.md: {undocumented}"
