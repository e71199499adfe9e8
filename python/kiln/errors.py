"""kiln's exceptions: one class per kiln_status of the C API, all derived from kiln.Error.

    try:
        engine.compile(source, target="sm_90")
    except kiln.CompileError as error:
        print(error.log)          # the whole compiler log
    except kiln.Error as error:   # anything else kiln reports
        print(error.status, error.message)
"""

__all__ = ["Error", "InvalidArgumentError", "InvalidHandleError", "CompileError", "LoadError", "LaunchError",
           "ConfigError", "DeviceUnavailableError", "OutOfMemoryError", "InternalError", "LibraryError",
           "error_type"]


def _last_line(text):
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _compose(message, log):
    """(message, log_shown): kiln's message without a second copy of a log line, and whether the message
    shows the log. A failed compile's message reads "<call> failed ... for sm_90: <the log's first error
    line>" and then, on the next lines, the log (as the compiler wrote it, or with its file names put
    right): the headline's copy of that line is dropped, so the text says each line once."""
    head, newline, body = message.partition("\n")
    log_text = log.strip()
    # The body is the log when it holds it, or its last line (HIPRTC's log is shown with file names changed).
    shown = bool(body.strip()) and (log_text in body or _last_line(log_text) in body)
    quoted = body if shown else log
    for line in quoted.splitlines():
        line = line.strip()
        if line and head.rstrip().endswith(": " + line):
            head = head.rstrip()[:-len(line)].rstrip()  # "... for sm_90:", then the log
            break
    return head + newline + body, shown


class Error(RuntimeError):
    """A kiln call failed. `status` is the KILN_ERROR_* name (None for errors of the Python package
    itself), `code` its number, `message` what kiln said, `log` the compiler log, whole ("" unless a
    compile failed). str(error) is "<status>: <message>", followed by the log when the message does not
    show it; each line of the log appears once (kiln's message for a failed compile quotes the log's
    first error line and then the log: the quote is left out of `message`)."""

    status = None
    code = None

    def __init__(self, message, status=None, log=""):
        status = status or type(self).status
        message = str(message)
        log = log or ""
        shown = True
        if log.strip():
            message, shown = _compose(message, log)
        text = f"{status}: {message}" if status else message
        if not shown:
            text += f"\n--- compiler log ---\n{log}"
        super().__init__(text)
        self.message = message
        self.log = log
        if status:
            self.status = status


class InvalidArgumentError(Error):
    """A null pointer, a bad count, a size field too small, ..."""
    status, code = "KILN_ERROR_INVALID_ARGUMENT", 1


class InvalidHandleError(Error):
    """A destroyed handle, or one of a destroyed engine."""
    status, code = "KILN_ERROR_INVALID_HANDLE", 2


class CompileError(Error):
    """The compiler rejected the source; `log` holds the whole compiler log."""
    status, code = "KILN_ERROR_COMPILE", 3


class LoadError(Error):
    """A binary did not load, or the module has no such kernel."""
    status, code = "KILN_ERROR_LOAD", 4


class LaunchError(Error):
    """A launch, copy or stream operation was refused (by kiln or the driver)."""
    status, code = "KILN_ERROR_LAUNCH", 5


class ConfigError(Error):
    """Bad configuration: an unknown target, option or built-in, an empty source, a bad KILN_* variable."""
    status, code = "KILN_ERROR_CONFIG", 6


class DeviceUnavailableError(Error):
    """No vendor library or no device for what was asked."""
    status, code = "KILN_ERROR_DEVICE_UNAVAILABLE", 7


class OutOfMemoryError(Error):
    """Host or device memory ran out."""
    status, code = "KILN_ERROR_OUT_OF_MEMORY", 8


class InternalError(Error):
    """A fault inside kiln (a bug): the message says where."""
    status, code = "KILN_ERROR_INTERNAL", 9


class LibraryError(Error, OSError):
    """libkiln could not be found or loaded, or it is too old for what was asked. Raised by the Python
    package itself (no kiln_status); also an OSError, as a failed library load is."""


_BY_CODE = {cls.code: cls for cls in (InvalidArgumentError, InvalidHandleError, CompileError, LoadError, LaunchError,
                                      ConfigError, DeviceUnavailableError, OutOfMemoryError, InternalError)}


def error_type(code):
    """The exception class for a kiln_status value (kiln.Error for a value this package does not know)."""
    return _BY_CODE.get(code, Error)
