"""Where Triton's files are handed over: Triton asks for paths, so kiln.triton writes the bytes it read from
kiln's cache (checked: the entry's checksum and key) to files in a private folder and gives Triton those.

The folder: KILN_TRITON_DIR, else Triton's own cache folder (TRITON_CACHE_DIR, else ~/.triton/cache), laid out
as Triton lays it out (<root>/<key>/<file>, with its "__grp__<file>" group files), because tools beside Triton
find a kernel's files there by path (Inductor's static CUDA launcher looks for <root>/<key>/<kernel>.cubin,
its FX graph cache bundles <root>/<key>/). The folder is a working copy, not the cache: kiln's entries are.
Rules:
  - private: the root and each key folder belong to this user and are not writable by others (made 0700
    when kiln makes them); a root that is not is not used: kiln.triton says so once and uses
    <temp>/kiln-triton-<uid> instead;
  - every file is written from bytes kiln has just read and checked, to a temp file beside it (O_EXCL,
    O_NOFOLLOW, 0600), then renamed over the name: a reader sees the old file or the new one, never part of
    one, and a damaged or half-written file already there is replaced, never handed over. A file already
    there with the same bytes is left as it is (read and compared: no rename under a process that has it
    open);
  - bounded: each key folder kiln.triton writes to has a mark (<root>/.kiln-triton/<key>, touched when it
    writes there); at most once an hour a process sums the marked folders and, past KILN_TRITON_DIR_MAXSIZE
    (1 GiB by default; "512M", "2G"; 0: no bound), removes the least recently marked ones down to 90% of it,
    never one marked in the last 10 minutes. Folders kiln did not write to are never removed.
"""

import errno
import os
import secrets
import shutil
import stat
import tempfile
import threading
import time
import warnings

MARKS = ".kiln-triton"  # the marks' folder in the root
_SWEPT = ".swept"  # in MARKS: when the root was last swept
_SWEEP_EVERY_S = 3600
_KEEP_RECENT_S = 600
_DEFAULT_MAX = 1 << 30
_MARK_EVERY_S = 600  # a mark is touched at most this often per key folder and process

_lock = threading.Lock()
_roots = {}  # (configured root, pid) -> (root used, why it is not the configured one or None)
_swept = set()  # roots this process has considered sweeping
_marked = {}  # key folder -> last time this process touched its mark
_warned = set()


def _warn_once(text):
    with _lock:
        if text in _warned:
            return
        _warned.add(text)
    warnings.warn(f"kiln.triton: {text}", RuntimeWarning, stacklevel=4)


def parse_size(text):
    """Bytes of "1073741824", "512K", "512M", "2G" (1024-based); ValueError otherwise."""
    value = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(value[-1:], 1)
    number = value[:-1] if scale != 1 else value
    if not number.isdigit():
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K, M, G or T)")
    return int(number) * scale


def max_size():
    text = os.environ.get("KILN_TRITON_DIR_MAXSIZE", "")
    if not text:
        return _DEFAULT_MAX
    try:
        return parse_size(text)
    except ValueError as error:
        _warn_once(f"KILN_TRITON_DIR_MAXSIZE ignored: {error}")
        return _DEFAULT_MAX


def triton_cache_dir():
    """Triton's cache folder as Triton reads it (knobs.cache.dir in Triton 3.4+, else TRITON_CACHE_DIR or
    $TRITON_HOME/.triton/cache)."""
    try:
        from triton import knobs

        found = knobs.cache.dir
        if isinstance(found, str) and found:
            return found
    except Exception:  # an older Triton, or none: its rule by hand
        pass
    found = os.environ.get("TRITON_CACHE_DIR", "").strip()
    if found:
        return found
    return os.path.join(os.environ.get("TRITON_HOME") or os.path.expanduser("~"), ".triton", "cache")


def configured_root():
    """The root to hand files over in, as configured, its links resolved (a root reached through a link of the
    user's is the folder it names; that folder is what must be private)."""
    explicit = os.environ.get("KILN_TRITON_DIR", "").strip()
    return os.path.realpath(explicit or triton_cache_dir())


def private_problem(path):
    """Why the folder at `path` is not private to this user (a link, not a folder, another owner, writable by
    group or others), or None."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.geteuid():
        return f"it belongs to uid {info.st_uid}, not to this user ({os.geteuid()})"
    if info.st_mode & 0o022:
        return f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _make_private(path):
    """Makes the folder `path` (0700) when absent; its problem (private_problem or the OSError), or None."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        return private_problem(path)
    except OSError as error:
        return f"it cannot be made or read: {error.strerror or error}"


def _fallback_root():
    return os.path.join(tempfile.gettempdir(), f"kiln-triton-{os.geteuid()}")


def root():
    """The root files are handed over in (see the module's text), made and checked once per process."""
    configured = configured_root()
    cache_key = (configured, os.getpid())
    with _lock:
        found = _roots.get(cache_key)
    if found is not None:
        return found[0]
    problem = _make_private(configured)
    used = configured
    if problem:
        used = _fallback_root()
        fallback_problem = _make_private(used)
        if fallback_problem:
            used = tempfile.mkdtemp(prefix="kiln-triton-")  # this process's own: private by construction
        _warn_once(f"Triton's files are handed over in {used}, not in {configured}: {problem}")
    with _lock:
        _roots[cache_key] = (used, problem)
    _maybe_sweep(used)
    return used


class Folder:
    """One key's folder, <root>/<key>: write() hands a file over."""

    def __init__(self, key):
        self.key = key
        self._root = root()
        self.path = os.path.join(self._root, key)
        self._checked = False
        self.written = 0  # bytes this folder wrote (not counting files found already right)

    def _ensure(self):
        if self._checked:
            return self.path
        problem = _make_private(self.path)
        if problem:
            # Someone else's folder under a private root (or a link put there): not used.
            replacement = os.path.join(tempfile.mkdtemp(prefix="kiln-triton-"), self.key)
            os.mkdir(replacement, 0o700)
            _warn_once(f"{self.path} is not used ({problem}); this process hands files over in {replacement}")
            self.path = replacement
        self._checked = True
        return self.path

    def write(self, name, data):
        """The path of a file `name` holding exactly `data` (see the module's text)."""
        folder = self._ensure()
        path = os.path.join(folder, name)
        if _holds(path, data):
            self._mark()
            return path
        temporary = os.path.join(folder, f".{name[:150]}.kiln-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            os.replace(temporary, path)
        except BaseException:
            try:
                os.unlink(temporary)
            except OSError:
                pass
            raise
        self.written += len(data)
        self._mark()
        return path

    def _mark(self):
        now = time.time()
        with _lock:
            last = _marked.get(self.path, 0.0)
            if now - last < _MARK_EVERY_S:
                return
            _marked[self.path] = now
        if os.path.dirname(self.path) != self._root:
            return  # a replacement folder of this process only: nothing to bound
        marks = os.path.join(self._root, MARKS)
        try:
            os.makedirs(marks, mode=0o700, exist_ok=True)
            with open(os.path.join(marks, self.key), "ab"):
                pass
            os.utime(os.path.join(marks, self.key))
        except OSError:
            pass  # an unmarked folder is only never swept


def _holds(path, data):
    """Whether `path` is a regular file of this user holding exactly `data`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() or info.st_size != len(data):
            return False
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(len(data) + 1) == data
    except OSError:
        return False
    finally:
        os.close(fd)


def _maybe_sweep(used):
    """sweep(used) when this process has not considered it yet and the last sweep is an hour old."""
    with _lock:
        if used in _swept:
            return
        _swept.add(used)
    stamp = os.path.join(used, MARKS, _SWEPT)
    try:
        if time.time() - os.stat(stamp).st_mtime < _SWEEP_EVERY_S:
            return
    except OSError:
        pass
    try:
        sweep(used, max_size())
    except OSError:
        pass  # bounding the working copy never fails a compile


def sweep(used, limit, keep_recent_s=_KEEP_RECENT_S):
    """Removes the least recently marked key folders of `used` until the marked ones take at most 90% of
    `limit` bytes (nothing when they take no more than `limit`, or limit is 0), sparing folders marked in the
    last `keep_recent_s` seconds. Returns the keys removed."""
    marks = os.path.join(used, MARKS)
    os.makedirs(marks, mode=0o700, exist_ok=True)
    with open(os.path.join(marks, _SWEPT), "ab"):
        pass
    os.utime(os.path.join(marks, _SWEPT))
    if limit <= 0:
        return []
    folders = []
    with os.scandir(marks) as found:
        for mark in found:
            if mark.name.startswith(".") or not mark.is_file(follow_symlinks=False):
                continue
            size = 0
            try:
                with os.scandir(os.path.join(used, mark.name)) as files:
                    for item in files:
                        if item.is_file(follow_symlinks=False):
                            size += item.stat(follow_symlinks=False).st_size
            except OSError as error:
                if error.errno != errno.ENOENT:
                    continue
            folders.append((mark.stat(follow_symlinks=False).st_mtime, mark.name, size))
    total = sum(size for _, _, size in folders)
    removed = []
    if total <= limit:
        return removed
    now = time.time()
    for _, key, size in sorted(folders):
        if total <= limit * 0.9:
            break
        mark = os.path.join(marks, key)
        try:
            if now - os.stat(mark).st_mtime < keep_recent_s:
                continue  # (read again: another process may have just written there)
        except OSError:
            continue
        shutil.rmtree(os.path.join(used, key), ignore_errors=True)
        try:
            os.unlink(mark)
        except OSError:
            pass
        total -= size
        removed.append(key)
    return removed
