"""The steps after a verified download, so that the files are what data prep reads.

- The text archive unpacks to `results4/` (the 500 training parts, eval.txt, eval.md5), as the
  reference README does by hand ("tar xf; cd results4; md5sum --check"): every unpacked file
  must be in the reference list with its MD5, and the list must agree with the values the
  README prints. The archive unpacks into a hidden folder that is renamed to `results4` only
  when all of it checks out.
- The TF1 checkpoint's data file gets the name TensorFlow reads (a hard link, no copy).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tarfile
from pathlib import Path
from typing import Callable, Mapping

from bert.core.files import temp_name
from data.download import published
from data.download.errors import DownloadError
from data.download.fetch import BLOCK, md5_file
from data.download.metadata import parse_md5_list


def unpack_text(folder: Path, log: Callable[[str], None] = print) -> Path:
    """folder/results_text.tar.gz -> folder/results4, checked; an existing results4 is only
    checked (never replaced)."""
    final = folder / published.TEXT_DIR
    expected = _reference_list(folder / published.TEXT_LIST)
    log(f"checking {len(expected)} files of {published.TEXT_DIR}/ against {published.TEXT_LIST}")
    if final.exists():
        _check_tree(final, expected)
        log(f"present {final} ({len(expected)} files, md5 ok)")
        return final
    tmp = temp_name(final)
    try:
        _extract(folder / published.TEXT_ARCHIVE, tmp)
        unpacked = tmp / published.TEXT_DIR
        if not unpacked.is_dir():
            raise DownloadError(
                f"{folder / published.TEXT_ARCHIVE}: holds no {published.TEXT_DIR}/ folder"
            )
        _check_tree(unpacked, expected)
        os.replace(unpacked, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"unpacked {final} ({len(expected)} files, md5 ok)")
    return final


def _reference_list(path: Path) -> dict[str, str]:
    listed = parse_md5_list(path.read_text(), str(path))
    blank = [name for name, md5 in listed.items() if md5 is None]
    if blank:
        raise DownloadError(f"{path}: no MD5 for {blank[0]}")
    for name, md5 in published.TEXT_FILES_MD5.items():
        if listed.get(name) != md5:
            raise DownloadError(
                f"{path}: lists {name} with md5 {listed.get(name)}, the "
                f"published value is {md5} ({published.TEXT_FILES_SOURCE})"
            )
    return listed  # type: ignore[return-value]


def _check_tree(root: Path, expected: Mapping[str, str]) -> None:
    """Every listed file present with its MD5, and no other file (a stray part-* file would
    join the training text)."""
    found = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    strays = sorted(found - set(expected))
    if strays:
        raise DownloadError(f"{root / strays[0]}: not in {published.TEXT_LIST}")
    for name, md5 in expected.items():
        path = root / name
        if not path.is_file():
            raise DownloadError(f"{path}: missing (listed in {published.TEXT_LIST})")
        got = md5_file(path)
        if got != md5:
            raise DownloadError(f"{path}: md5 {got} differs from {md5} in {published.TEXT_LIST}")


def _extract(archive: Path, dest: Path) -> None:
    """Regular files and folders only, each inside `dest` (no links, devices or `..`)."""
    dest.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                _extract_member(tar, member, archive, dest)
    except (tarfile.TarError, EOFError) as err:
        raise DownloadError(f"{archive}: not a readable tar archive ({err})") from None


def _extract_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, archive: Path, dest: Path
) -> None:
    name = posixpath.normpath(member.name)
    if name.startswith(("/", "../")) or name == "..":
        raise DownloadError(f"{archive}: member {member.name!r} would land outside the folder")
    target = dest / name
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
    elif member.isfile():
        target.parent.mkdir(parents=True, exist_ok=True)
        with tar.extractfile(member) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out, BLOCK)
    else:
        raise DownloadError(f"{archive}: member {member.name!r} is not a regular file or folder")


def link_tf1_data(folder: Path, log: Callable[[str], None] = print) -> Path:
    """folder/tf1_ckpt/model.ckpt-28252.data-00000-of-00001 -> the stored data file."""
    stored, wanted = folder / published.TF1_DATA_STORED, folder / published.TF1_DATA_NAME
    if wanted.exists():
        if not wanted.samefile(stored) and md5_file(wanted) != md5_file(stored):
            raise DownloadError(
                f"{wanted}: exists and is not the checkpoint's data file; left as it is"
            )
        return wanted
    tmp = temp_name(wanted)
    try:
        os.link(stored, tmp)
    except OSError:  # a file system without hard links
        os.symlink(stored.name, tmp)
    os.replace(tmp, wanted)
    log(f"linked {wanted} -> {stored.name}")
    return wanted
