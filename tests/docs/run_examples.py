#!/usr/bin/env python3
"""Every code block of README.md and docs/*.md runs here as a newcomer would run it, so the docs cannot drift.

    run_examples.py --source-dir REPO --build-dir BUILD [--page README.md] [--list]

A page's blocks run in order, in a folder of the page's own that stands for the checkout: the repository's
top-level entries are linked into it and `build` is the build tree, so `build/tools/kiln` and
`bash scripts/build_wheel.sh` work as written. HOME is a fresh folder (`~/...` writes there, and the default
cache ~/.cache/kiln is empty), `kiln` on PATH is the build's CLI, `python3` the interpreter running this.

What a block's language means (its fence: ```lang attributes...):
  sh       run with bash -e; what it exports (and a venv it activates) carries over to the page's later blocks
  python   run with the page's python3 (a venv an earlier block activated, else this interpreter)
  c, cpp   compiled against the build tree (-I engine/include -I cache/include -I base/include, libkiln from
           build/engine: the folders docs/cpp-api.md names) and run; a block without main() needs file=
  cmake    needs file=
  nginx    needs serve (below) or file=
  other    (text, a diagram, jsonl) not checked
Attributes (after the language; not shown by a Markdown renderer):
  file=PATH       the block is that file of the page's folder (written, not run): a later block uses it
  skip="why"      not run, for the reason given (a GPU, CuPy, AMD hardware, a service CI does not have)
  synopsis        a CLI synopsis: every option it names must be in `kiln <command> --help`
  expect="regex"  the block's output (stdout and stderr) must match
  serve           an nginx server block: started in context, as Debian's nginx.conf includes conf.d/*.conf
                  inside http {}, with the workers' user www-data (needs root; skipped otherwise)
Stand-ins for what CI has no such thing of, the only rewrites of a block's text: the hosts cache-host:6379
and cache-host:8080 are a Redis and the page's nginx on loopback; `listen 8080` is nginx's loopback port;
/srv/ and /etc/nginx/ are folders of the page; `sudo` runs the command as is (this runs as root in CI); pip
is told there is no package index (PIP_NO_INDEX), which there is not in CI. `python` is a copy of the
checkout's (pip builds in the folder it installs), the rest links to it.
Exit status 0 when every checked block passed; the summary counts what ran, what was checked and what was
skipped, with each reason.
"""

import argparse
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CHECKED = ("sh", "bash", "python", "c", "cpp", "cmake", "nginx")
TIMEOUT = 600


class BlockFailure(Exception):
    pass


class Block:
    def __init__(self, page, line, lang, attributes, text):
        self.page, self.line, self.lang, self.text = page, line, lang, text
        self.attributes = attributes

    @property
    def where(self):
        return f"{self.page}:{self.line}"


def parse_blocks(page, text):
    """The fenced blocks of a Markdown page, with the attributes of their info strings."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        start = i + 1
        i += 1
        body = []
        while i < len(lines) and not re.match(rf"^\s*{fence}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        words = shlex.split(info.strip()) if info.strip() else []
        lang = words[0] if words else ""
        attributes = {}
        for word in words[1:]:
            key, _, value = word.partition("=")
            attributes[key] = value if _ else True
        blocks.append(Block(page, start, lang, attributes, "\n".join(body) + "\n"))
    return blocks


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, log, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    said = open(log).read()[-2000:] if os.path.exists(log) else ""
    raise BlockFailure(f"{what} did not listen on 127.0.0.1:{port}: {said}")


class Page:
    """One page's folder, environment and services."""

    def __init__(self, runner, name):
        self.runner, self.name = runner, name
        self.dir = tempfile.mkdtemp(prefix=f"kiln-docs-{re.sub(r'[^A-Za-z0-9]+', '-', name)}-", dir=runner.work)
        os.chmod(self.dir, 0o755)  # nginx's workers (www-data) reach the page's /srv/ through it
        for entry in os.listdir(runner.source_dir):
            if entry == "python":  # a copy: `pip install ./python` builds in the folder it is given
                shutil.copytree(os.path.join(runner.source_dir, entry), os.path.join(self.dir, entry),
                                ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
            elif entry != ".git" and not entry.startswith("build"):
                os.symlink(os.path.join(runner.source_dir, entry), os.path.join(self.dir, entry))
        os.symlink(runner.build_dir, os.path.join(self.dir, "build"))
        self.home = os.path.join(self.dir, "home")
        self.root = os.path.join(self.dir, "root")  # the page's /srv/ and /etc/nginx/
        os.makedirs(self.home)
        os.makedirs(os.path.join(self.root, "etc", "nginx"))
        os.chmod(self.root, 0o755)
        self.state = os.path.join(self.dir, ".state")
        self.env = dict(runner.base_env, HOME=self.home)
        self.services = []
        self.redis_port = None
        self.nginx_port = None

    def close(self):
        for process in self.services:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()

    # -- the stand-ins -------------------------------------------------------------------------------
    def rewrite(self, text):
        if "cache-host:6379" in text:
            text = text.replace("cache-host:6379", f"127.0.0.1:{self.redis()}")
        if "cache-host:8080" in text:
            text = text.replace("cache-host:8080", f"127.0.0.1:{self.nginx_port_number()}")
        text = re.sub(r"(?<![\w.-])/srv/", self.root + "/srv/", text)
        text = re.sub(r"(?<![\w.-])/etc/nginx/", self.root + "/etc/nginx/", text)
        return text

    def redis(self):
        if self.redis_port is None:
            server = shutil.which("redis-server") or "/usr/bin/redis-server"
            if not os.path.exists(server):
                raise Skip("no redis-server (Debian: redis-server)")
            self.redis_port = free_port()
            log = os.path.join(self.dir, "redis.log")
            self.services.append(subprocess.Popen(
                [server, "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", self.dir], stdout=open(log, "w"), stderr=subprocess.STDOUT))
            wait_port(self.redis_port, "redis-server", log)
        return self.redis_port

    def nginx_port_number(self):
        if self.nginx_port is None:
            self.nginx_port = free_port()
        return self.nginx_port

    def serve_nginx(self, block_text):
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(nginx):
            raise Skip("no nginx (Debian: nginx-light)")
        if os.geteuid() != 0:
            raise Skip("nginx's workers run as www-data, which needs root to start")
        port = self.nginx_port_number()
        server = re.sub(r"\blisten\s+8080\s*;", f"listen 127.0.0.1:{port};", self.rewrite(block_text))
        d = os.path.join(self.dir, "nginx")
        os.makedirs(os.path.join(d, "conf.d"))
        with open(os.path.join(d, "conf.d", "kiln-cache.conf"), "w") as f:
            f.write(server)
        temp = os.path.join(d, "tmp")
        os.makedirs(temp)
        shutil.chown(temp, "www-data", "www-data")
        os.chmod(d, 0o755)
        temps = "".join(f"    {kind}_temp_path {temp}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi",
                                                                               "uwsgi", "scgi"))
        # Debian's /etc/nginx/nginx.conf, cut to what a server block needs around it.
        config = (f"user www-data;\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n"
                  f"events {{ worker_connections 64; }}\nhttp {{\n    access_log {d}/access.log;\n{temps}"
                  f"    include {d}/conf.d/*.conf;\n}}\n")
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(config)
        check = subprocess.run([nginx, "-t", "-p", d, "-c", os.path.join(d, "nginx.conf"), "-e",
                                os.path.join(d, "error.log")], capture_output=True, text=True)
        if check.returncode != 0:
            raise BlockFailure(f"nginx -t refused the server block in context:\n{check.stderr}")
        self.services.append(subprocess.Popen([nginx, "-p", d, "-c", os.path.join(d, "nginx.conf"), "-e",
                                               os.path.join(d, "error.log")],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(port, "nginx", os.path.join(d, "error.log"))
        return f"nginx serves it on 127.0.0.1:{port}"


class Skip(Exception):
    pass


class Runner:
    def __init__(self, source_dir, build_dir):
        self.source_dir, self.build_dir = source_dir, build_dir
        self.work = tempfile.mkdtemp(prefix="kiln-docs-examples-")
        os.chmod(self.work, 0o755)
        shims = os.path.join(self.work, "bin")
        os.makedirs(shims)
        with open(os.path.join(shims, "python3"), "w") as f:
            f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        with open(os.path.join(shims, "sudo"), "w") as f:  # CI runs as root: the command itself
            f.write('#!/bin/sh\nexec "$@"\n')
        for name in ("python3", "sudo"):
            os.chmod(os.path.join(shims, name), 0o755)
        keep = ("LANG", "LC_ALL", "TERM", "TMPDIR", "CUDA_HOME", "KILN_CUDA_PATH", "ROCM_PATH")
        self.base_env = {k: v for k, v in os.environ.items() if k in keep}
        # No package index is reached: pip installs the local wheel or folder a block names, and asks no index.
        self.base_env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        self.base_env["PATH"] = os.pathsep.join([shims, os.path.join(build_dir, "tools"), "/usr/local/sbin",
                                                 "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
        self.results = []  # (block, verdict, detail)

    # -- one block ------------------------------------------------------------------------------------
    def run_block(self, page, block):
        a = block.attributes
        if "skip" in a:
            if a["skip"] is True or not a["skip"].strip():
                raise BlockFailure('skip needs a reason: skip="..."')
            return "skipped", a["skip"]
        if "file" in a:
            path = os.path.join(page.dir, a["file"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(block.text)
            if block.lang == "nginx" and "serve" in a:
                return "ran", page.serve_nginx(block.text)
            return "written", a["file"]
        if block.lang == "nginx":
            if "serve" not in a:
                raise BlockFailure("an nginx block needs serve, file= or skip=")
            return "ran", page.serve_nginx(block.text)
        if block.lang == "cmake":
            raise BlockFailure("a cmake block needs file= (a later block builds it) or skip=")
        if "synopsis" in a:
            return "checked", self.check_synopsis(page, block)
        if block.lang in ("sh", "bash"):
            output = self.run_shell(page, page.rewrite(block.text))
        elif block.lang == "python":
            output = self.run_command(page, ["python3", "-"], stdin=page.rewrite(block.text))
        elif block.lang in ("c", "cpp"):
            output = self.compile_and_run(page, block)
        else:
            raise BlockFailure(f"no way to check a {block.lang} block")
        if "expect" in a and not re.search(a["expect"], output):
            raise BlockFailure(f"its output does not match {a['expect']!r}:\n{output[-3000:]}")
        return "ran", output.strip().splitlines()[-1][:120] if output.strip() else "(no output)"

    def run_command(self, page, args, stdin=None):
        env = self.load_state(page)
        result = subprocess.run(args, input=stdin, cwd=page.dir, env=env, capture_output=True, text=True,
                                timeout=TIMEOUT)
        output = result.stdout + result.stderr
        if result.returncode != 0:
            raise BlockFailure(f"exit {result.returncode}:\n{output[-4000:]}")
        return output

    def run_shell(self, page, text):
        # What the block exports (and a venv it activates) carries over: its environment is saved at the end.
        script = f"set -e\n{text}\nexport -p > {shlex.quote(page.state)}.new\n"
        output = self.run_command(page, ["bash", "-c", script])
        os.replace(page.state + ".new", page.state)
        return output

    def load_state(self, page):
        env = dict(page.env)
        if os.path.exists(page.state):
            dump = subprocess.run(["bash", "-c", f". {shlex.quote(page.state)} 2>/dev/null; env -0"],
                                  env=page.env, capture_output=True, text=True, check=True).stdout
            env = dict(item.split("=", 1) for item in dump.split("\0") if "=" in item)
            env["PWD"] = page.dir
        return env

    def compile_and_run(self, page, block):
        if not re.search(r"\bint\s+main\s*\(", block.text):
            raise BlockFailure(f"a {block.lang} block without main() needs file= (a later block builds it) or skip=")
        source = os.path.join(page.dir, f"block-{block.line}.{block.lang}")
        with open(source, "w") as f:
            f.write(block.text)
        binary = source + ".out"
        includes = [f"-I{os.path.join(self.source_dir, d, 'include')}" for d in ("engine", "cache", "base")]
        library = os.path.join(self.build_dir, "engine")
        compiler = ["g++", "-std=c++20"] if block.lang == "cpp" else ["gcc", "-std=c11"]
        self.run_command(page, compiler + ["-Wall", "-Werror", source, "-o", binary, *includes, f"-L{library}",
                                           "-lkiln", f"-Wl,-rpath,{library}"])
        return self.run_command(page, [binary])

    def check_synopsis(self, page, block):
        """Each `kiln ...` line: its command words, then every option it names must be in that command's help."""
        checked = []
        for raw in block.text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line.startswith("kiln "):
                continue
            parts = [p.strip() for p in line[len("kiln "):].split(" | ")]
            first = parts[0].split()
            command = [first[0]]
            if first[0] == "cache":
                command.append(first[1])
            for index, part in enumerate(parts):
                words = part.split()
                this = command if index == 0 else command[:1] + words[:1]
                help_text = self.run_command(page, ["kiln", *this, "--help"])
                for option in re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", part):
                    if not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", help_text):
                        raise BlockFailure(f"`kiln {' '.join(this)}` has no option {option} (its --help)")
                checked.append("kiln " + " ".join(this))
        if not checked:
            raise BlockFailure("a synopsis without a `kiln ...` line")
        return f"{len(checked)} commands' options found in their --help"

    # -- pages ----------------------------------------------------------------------------------------
    def run_page(self, name):
        with open(os.path.join(self.source_dir, name), encoding="utf-8") as f:
            blocks = parse_blocks(name, f.read())
        page = Page(self, name)
        try:
            for block in blocks:
                if block.lang not in CHECKED and not block.attributes:
                    self.results.append((block, "not code", block.lang or "a plain block"))
                    continue
                started = time.time()
                try:
                    verdict, detail = self.run_block(page, block)
                except Skip as why:
                    verdict, detail = "skipped", str(why)
                except (BlockFailure, subprocess.TimeoutExpired) as why:
                    verdict, detail = "FAILED", str(why)
                self.results.append((block, verdict, detail))
                print(f"{block.where} {block.lang}: {verdict} ({time.time() - started:.1f} s): "
                      f"{detail if verdict != 'FAILED' else ''}", flush=True)
                if verdict == "FAILED":
                    print(f"--- the block:\n{block.text}--- what went wrong:\n{detail}\n", flush=True)
        finally:
            page.close()


def pages(source_dir):
    found = ["README.md"]
    found += sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(source_dir, "docs")) if n.endswith(".md"))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--page", action="append", help="only this page (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    source_dir, build_dir = os.path.realpath(args.source_dir), os.path.realpath(args.build_dir)
    runner = Runner(source_dir, build_dir)
    try:
        for name in args.page or pages(source_dir):
            runner.run_page(name)
    finally:
        if not args.keep:
            shutil.rmtree(runner.work, ignore_errors=True)
    counts = {}
    for _, verdict, _ in runner.results:
        counts[verdict] = counts.get(verdict, 0) + 1
    print("docs examples: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    for block, verdict, detail in runner.results:
        if verdict == "skipped":
            print(f"  skipped {block.where} {block.lang}: {detail}")
    failed = [block.where for block, verdict, _ in runner.results if verdict == "FAILED"]
    if failed:
        print("FAILED: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
