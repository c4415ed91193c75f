"""Atomic writes, one way for the whole library: write beside the destination, rename into
place when everything is written; on any failure remove the temporary (and the parent
folders this call created), so a failed or interrupted run leaves nothing behind.

The temporary is ``.<name>.partial-<random>`` in the destination's folder (so the rename
stays on one file system), with the permissions the umask gives a new file or folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["WRITE_ERRORS", "atomic_path", "atomic_write"]

# A write error raised without a file name (ENOSPC from a write) gets the destination's.
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.EACCES}


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block ends.

    With ``directory=True`` the temporary is a folder: when ``path`` does not exist yet
    it is renamed into place as a whole; when it does, each file is renamed into its
    place (other files already in ``path`` are kept). A folder where a file is expected
    raises IsADirectoryError, a file where a folder is expected NotADirectoryError.

    Examples:
        >>> import pathlib, tempfile
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "out" / "a.txt"
        >>> with atomic_path(target) as partial:
        ...     _ = partial.write_text("done")
        >>> target.read_text(), sorted(p.name for p in target.parent.iterdir())
        ('done', ['a.txt'])
    """
    path = Path(path)
    if path.exists() and directory and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder", str(path))
    if path.is_dir() and not directory:
        raise IsADirectoryError(errno.EISDIR, "is a folder, expected a file name", str(path))
    created = _make_parents(path.parent)
    temporary: Path | None = None
    committed = False
    try:
        if directory:
            temporary = Path(tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent))
            os.chmod(temporary, 0o777 & ~_umask())  # mkdtemp's 0o700 is for secrets
        else:
            handle, name = tempfile.mkstemp(
                prefix=f".{path.stem}.partial-", suffix=path.suffix, dir=path.parent
            )
            os.close(handle)
            temporary = Path(name)
            os.chmod(temporary, 0o666 & ~_umask())
        yield temporary
        if directory:
            _commit_folder(temporary, path)
        else:
            os.replace(temporary, path)
        committed = True
    except OSError as error:
        if error.filename is None and error.errno in WRITE_ERRORS:
            raise OSError(error.errno, error.strerror or str(error), str(path)) from error
        raise
    finally:
        if not committed:
            if temporary is not None:
                _remove(temporary)
            for folder in reversed(created):
                with contextlib.suppress(OSError):
                    folder.rmdir()


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8 with ``\\n`` line ends) to ``path`` atomically,
    flushed to disk before the rename; returns the path."""
    with atomic_path(path) as partial, partial.open("wb") as file:
        file.write(data.encode("utf-8") if isinstance(data, str) else data)
        file.flush()
        os.fsync(file.fileno())
    return Path(path)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _make_parents(folder: Path) -> list[Path]:
    """mkdir -p ``folder``; return the folders created, outermost first."""
    missing = []
    current = folder
    while not current.exists():
        missing.append(current)
        current = current.parent
    if not current.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder", str(current))
    created: list[Path] = []
    try:
        for item in reversed(missing):
            item.mkdir()
            created.append(item)
    except OSError:
        for item in reversed(created):
            with contextlib.suppress(OSError):
                item.rmdir()
        raise
    return created


def _commit_folder(temporary: Path, path: Path) -> None:
    if not path.exists():
        os.rename(temporary, path)
        return
    for source in sorted(temporary.rglob("*")):
        target = path / source.relative_to(temporary)
        if source.is_dir():
            if target.exists() and not target.is_dir():
                raise OSError(errno.ENOTDIR, "is a file, not a folder", str(target))
            target.mkdir(exist_ok=True)
        else:
            os.replace(source, target)
    shutil.rmtree(temporary, ignore_errors=True)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink()
