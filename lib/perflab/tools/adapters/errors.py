"""What went wrong in a student's adapter, in one line a student can act on: the real message
(for ``torch.compile``, the error underneath dynamo's and inductor's wrappers, not their
boilerplate), the file and line in the student's own code, and the known limits of running on
a CPU (the Triton interpreter, CUDA-only calls) named as such and graded "needs a GPU" instead
of "error".
"""

from __future__ import annotations

import linecache
import re
import traceback
from pathlib import Path

#: Lines of torch.compile's messages that say nothing about the error itself.
_BOILERPLATE = re.compile(
    r"Set TORCHDYNAMO_VERBOSE=1|TORCH_LOGS=|For even more developer context|"
    r"You can suppress this exception|Explanation:|Hint:|Developer debug context:|"
    r"For more details about this graph break|^\s*from user code:|^\s*File \"|^\s*$"
)

#: (pattern in the message or the failing source line, why it cannot run here): a CPU limit,
#: not a bug; the check says "needs a GPU".
_NEEDS_A_GPU = (
    (r"0 active drivers", "@triton.autotune needs a GPU driver; the Triton interpreter has none"),
    (
        r"\.is_cuda|device(?:\.type)? == .cuda|\.device\.type == \"cuda\"",
        "the code requires CUDA tensors",
    ),
    (
        r"(?i)must be (?:on )?(?:a )?cuda|on a cuda device|requires? cuda|cuda tensors? "
        r"(?:are |is )?(?:required|expected)|expected .{0,40}\bcuda\b.{0,40}\bgot\b.{0,20}cpu",
        "the code refuses CPU tensors (it asks for CUDA ones)",
    ),
    (r"NVTX functions not installed|nvtx", "NVTX ranges need CUDA"),
    (
        r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|no CUDA GPUs are available",
        "the code calls CUDA",
    ),
)

#: Triton APIs a newer Triton removed or changed, with what to do.
_MISSING_TRITON_API = (
    (
        r"[Bb]lock pointers have been removed|no attribute 'make_block_ptr'|"
        r"no attribute 'advance'",
        "uses tl.make_block_ptr, removed in Triton 3.9 (and .advance() broken in 3.8's "
        "interpreter); the 2026 course's torch brings triton 3.6.0, perflab's install 3.7.1: "
        "pip install triton==3.7.1",
    ),
)


def innermost(error: BaseException) -> BaseException:
    """The error underneath: ``__cause__`` links (torch.compile wraps the user's exception in
    its own, with the original as the cause), followed to the last."""
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
    return error


def _message(error: BaseException) -> str:
    """The first line of the message that is not torch.compile's boilerplate."""
    lines = [line for line in str(error).splitlines() if not _BOILERPLATE.search(line)]
    text = lines[0].strip() if lines else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _student_frame(error: BaseException, root: Path | None) -> traceback.FrameSummary | None:
    """The innermost frame of the traceback in a file under ``root`` (the student's code)."""
    frames = []
    for link in (error, *_context_chain(error)):
        frames += traceback.extract_tb(link.__traceback__)
    if root is None:
        return None
    root = root.resolve()
    mine = [f for f in frames if f.filename and _under(Path(f.filename), root)]
    return mine[-1] if mine else None


def _context_chain(error: BaseException):
    seen = {id(error)}
    while error.__cause__ is not None and id(error.__cause__) not in seen:
        error = error.__cause__
        seen.add(id(error))
        yield error


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError):
        return False
    return True


def describe_traceback(text: str, root: Path | None = None) -> tuple[str, str]:
    """``describe`` for an error that happened in another process (a rank), from its
    formatted traceback: its last line, and the innermost frame in ``root``."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    last = lines[-1].strip() if lines else "failed"
    frames = re.findall(r'File "([^"]+)", line (\d+)', text)
    where, source = "", ""
    if root is not None:
        mine = [(f, int(n)) for f, n in frames if _under(Path(f), root.resolve())]
        if mine:
            path, line = mine[-1]
            where = f" ({Path(path).name}:{line})"
            source = linecache.getline(path, line).strip()
    return _classify(last, source, where)


def _classify(message: str, source: str, where: str) -> tuple[str, str]:
    for pattern, why in _NEEDS_A_GPU:
        if re.search(pattern, message) or (source and re.search(pattern, source)):
            shown = f"`{source}`" if source and not re.search(pattern, message) else message
            return "needs a GPU", f"{why}: {shown}{where}"
    for pattern, fix in _MISSING_TRITON_API:
        if re.search(pattern, message):
            return "error", f"{fix}{where}"
    return "error", f"{message}{where}"


def describe(error: BaseException, root: Path | None = None) -> tuple[str, str]:
    """(status, detail) of an adapter's error: "needs a GPU" for a CPU limit, else "error";
    the detail is the underlying message, the file and line in ``root`` where it was raised
    and, for a Triton API the installed Triton lacks, what to do."""
    inner = innermost(error)
    message = _message(inner)
    frame = _student_frame(error, root)
    where = ""
    source = ""
    if frame is not None:
        where = f" ({Path(frame.filename).name}:{frame.lineno})"
        source = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    # torch.compile names the line it could not trace in its message ("from user code: File
    # ..., line N"): deeper in the student's code than the Python traceback's last frame.
    traced = [
        (f, int(n))
        for f, n in re.findall(r'File "([^"]+)", line (\d+)', str(inner))
        if root is not None and _under(Path(f), root.resolve())
    ]
    if traced:
        path, line = traced[-1]
        where = f" ({Path(path).name}:{line})"
        source = linecache.getline(path, line).strip()
    return _classify(message, source, where)
