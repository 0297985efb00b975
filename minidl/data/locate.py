"""Find a dataset's files: an explicit root alone, else $MINIDL_DATA, the cache, Debian's folder.

An explicit root (``--data-dir``, ``root=``) is the only place looked in: a
folder the user named that lacks the files is an error, never a silent
fall-back to other copies. Without one, the places are tried in order. Each
place is tried as given and, for a general data folder, with the dataset's
name appended (``DIR`` and ``DIR/fashion-mnist``). A file counts in either
form, gzip (``train-images-idx3-ubyte.gz``) or uncompressed
(``train-images-idx3-ubyte``).
"""

import os
from pathlib import Path

DATA_ENV = "MINIDL_DATA"


class DatasetNotFoundError(FileNotFoundError):
    """No folder holds the dataset's files; the message lists where we looked and the fixes."""


def cache_root():
    """``$XDG_CACHE_HOME/minidl``, or ``~/.cache/minidl``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "minidl"


def cache_dir(spec):
    """``$XDG_CACHE_HOME/minidl/<name>``, or ``~/.cache/minidl/<name>``."""
    return cache_root() / spec.name


def candidate_dirs(spec, root=None):
    """The folders to search, in order, as (where it came from, folder or None when unset)."""
    if root:
        return [("root / --data-dir", Path(root)), ("root / --data-dir", Path(root) / spec.name)]
    places = []
    env_dir = os.environ.get(DATA_ENV)
    if env_dir:
        places += [(f"${DATA_ENV}", Path(env_dir)), (f"${DATA_ENV}", Path(env_dir) / spec.name)]
    else:
        places.append((f"${DATA_ENV}", None))
    places.append(("cache", cache_dir(spec)))
    places += [(f"Debian package {spec.debian_package}", Path(d)) for d in spec.debian_dirs]
    return places


def find_file(folder, gz_name):
    """The path of ``gz_name`` or its uncompressed twin in ``folder``, or None."""
    for name in (gz_name, gz_name[:-3]):
        path = Path(folder) / name
        if path.is_file():
            return path
    return None


def locate(spec, root=None, split=None):
    """The first folder holding the files of ``split`` (all four when None).

    Returns a ``Path``; raises ``DatasetNotFoundError`` listing every place
    looked in and how to get the data.
    """
    names = spec.split_files(split) if split else spec.all_files()
    report = []
    for source, folder in candidate_dirs(spec, root):
        if folder is None:
            report.append(f"  {source}: not set")
        elif not folder.is_dir():
            report.append(f"  {folder} ({source}): no such folder")
        elif missing := [name for name in names if find_file(folder, name) is None]:
            report.append(
                f"  {folder} ({source}): missing "
                + ", ".join(f"{name[:-3]}[.gz]" for name in missing)
            )
        else:
            return folder
    raise DatasetNotFoundError(_not_found_message(spec, split, names, report, root))


def _not_found_message(spec, split, names, report, root=None):
    what = f"{spec.title} ({split} split)" if split else spec.title
    wanted = ", ".join(f"{name[:-3]}[.gz]" for name in names)
    if root:
        return "\n".join(
            [
                f"{what} not found in --data-dir {root}: looked for {wanted} in:",
                *report,
                f"Pass the folder that holds the files, or leave out "
                f"--data-dir to use $MINIDL_DATA, the cache or "
                f"'minidl data download {spec.name}'",
            ]
        )
    fixes = []
    if spec.debian_package:
        fixes.append(f"  Debian/Ubuntu, as root: apt-get install {spec.debian_package}")
    fixes += [
        f"  online: minidl data download {spec.name}  (or download=True in Python)",
        f"  files elsewhere: pass --data-dir DIR (root=DIR in Python) or set {DATA_ENV}=DIR",
    ]
    return "\n".join(
        [
            f"{what} not found: looked for {wanted} in:",
            *report,
            "Get the data one of these ways:",
            *fixes,
        ]
    )
