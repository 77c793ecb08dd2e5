"""The manifest of a checkpoint: what trainperf wrote, signed, checked before anything is read.

Why: ``torch.distributed.checkpoint`` reads a checkpoint's ``.metadata`` with ``pickle``, and
unpickling runs whatever code the file names. A checkpoint directory that someone else could
write to (a shared scratch space, a downloaded archive) would run their code in ``bench
--resume``. So after every save, trainperf writes ``trainperf-manifest.json`` beside the shards:
each file's relative path, size and SHA-256, signed with HMAC-SHA256 under a key that only this
user holds (:func:`checkpoint_key`, ``$TRAINPERF_CACHE_DIR/checkpoint.key``, mode 0600). Before
``--resume`` lets torch open anything, :func:`verify` checks the signature, that the directory
holds exactly the listed files (no link, no extra file) and that every size and hash matches;
any difference is one line and exit 2. A checkpoint written elsewhere (another user, another
machine without the same key, an older trainperf) is refused in the same way: resume only from
checkpoints you wrote; multi-node runs need the key on every node (a shared cache directory).

Pure standard library (no torch): the bench checks ``--resume`` before it starts any process.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any

from trainperf.errors import SpecError, TrainperfError, one_line

MANIFEST = "trainperf-manifest.json"
"""The manifest's file name inside ``step-<N>/``."""
DONE = ".done"
"""The marker written after the manifest: the checkpoint is complete."""
KEY_FILE = "checkpoint.key"
VERSION = 1
_MANIFEST_MAX_BYTES = 4 << 20
_STEP_DIR = re.compile(r"^step-(\d{1,12})$")


class CheckpointError(TrainperfError):
    """A checkpoint directory that is not one trainperf wrote, or was changed since; one line, exit 2."""


def key_path() -> Path:
    """``$TRAINPERF_CACHE_DIR/checkpoint.key`` (default ``~/.cache/trainperf/checkpoint.key``)."""
    from trainperf.specs.cpu_calibration import cache_path

    return cache_path().parent / KEY_FILE


def _read_key(p: Path) -> bytes | None:
    """The key's bytes, None if there is none; one line if it is not a private regular file."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CheckpointError(f"checkpoint key {str(p)!r} cannot be opened: {one_line(e.strerror or str(e))} "
                              "(a link is refused)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o077 or st.st_uid != os.getuid():
            raise CheckpointError(f"checkpoint key {str(p)!r} is not a regular file of yours readable only by you "
                                  "(mode 600); remove it and save the checkpoint again")
        key = os.read(fd, 256)
    finally:
        os.close(fd)
    if len(key) < 32:
        raise CheckpointError(f"checkpoint key {str(p)!r} is damaged ({len(key)} bytes); remove it and save the "
                              "checkpoint again")
    return key


def checkpoint_key(*, create: bool) -> bytes:
    """This user's checkpoint signing key, created (32 random bytes, mode 0600, never through a
    link) when ``create`` and missing; one line when it is missing and not ``create``."""
    p = key_path()
    key = _read_key(p)
    if key is not None:
        return key
    if not create:
        raise CheckpointError(f"no checkpoint key {str(p)!r}: it was not written by trainperf as this user with this "
                              "cache directory (TRAINPERF_CACHE_DIR); refusing to read it")
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:  # another rank or run made it meanwhile
        return checkpoint_key(create=False)
    try:
        os.write(fd, secrets.token_bytes(32))
        os.fsync(fd)
    finally:
        os.close(fd)
    return checkpoint_key(create=False)


def _sha256(path: Path) -> tuple[int, str]:
    """Size and SHA-256 of a regular file, opened without following a link."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        digest = hashlib.file_digest(f, "sha256")
        return f.tell(), digest.hexdigest()


def _entries(step_dir: Path) -> list[str]:
    """Every file under ``step_dir`` (relative, sorted) but the manifest and the done marker;
    one line for a link or anything that is neither a file nor a directory."""
    found: list[str] = []
    for root, dirs, files in os.walk(step_dir, followlinks=False):
        for name in [*dirs, *files]:
            p = Path(root) / name
            mode = os.lstat(p).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise CheckpointError(f"checkpoint {str(step_dir)!r}: {str(p)!r} is not a regular file or directory "
                                      "(a link?); refusing to read the checkpoint")
            if stat.S_ISREG(mode):
                rel = p.relative_to(step_dir).as_posix()
                if rel not in (MANIFEST, DONE):
                    found.append(rel)
    return sorted(found)


def _signed(body: dict[str, Any], key: bytes) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).hexdigest()


def write_manifest(step_dir: str | Path, step: int) -> Path:
    """Sign and write the manifest of the checkpoint just saved in ``step_dir`` (rank 0, after
    every rank's shards are written); atomically, never through a link."""
    from trainperf.locked_update import write_replace

    d = Path(step_dir)
    files = [{"path": rel, "size": size, "sha256": digest}
             for rel in _entries(d) for size, digest in [_sha256(d / rel)]]
    body = {"version": VERSION, "step": step, "files": files}
    manifest = {**body, "hmac_sha256": _signed(body, checkpoint_key(create=True))}
    return write_replace(d / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode("utf-8"))


def _load_manifest(step_dir: Path) -> dict[str, Any]:
    where = f"checkpoint {str(step_dir)!r}"
    try:
        fd = os.open(step_dir / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        why = "has no trainperf manifest" if e.errno == errno.ENOENT else f"manifest cannot be read ({e.strerror})"
        raise CheckpointError(f"{where} {why}: it was not written by trainperf (or by an older version); refusing "
                              "to read it (torch would unpickle its metadata)") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(_MANIFEST_MAX_BYTES + 1) if stat.S_ISREG(os.fstat(f.fileno()).st_mode) else b""
    try:
        data = json.loads(raw.decode("utf-8")) if len(raw) <= _MANIFEST_MAX_BYTES else None
    except (ValueError, RecursionError):
        data = None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(
            isinstance(e, dict) and set(e) == {"path", "size", "sha256"} and isinstance(e["path"], str)
            for e in files):
        raise CheckpointError(f"{where}: its manifest is not one trainperf wrote; refusing to read the checkpoint")
    assert isinstance(data, dict)
    return data


def verify(step_dir: str | Path, step: int) -> None:
    """Refuse (one :class:`CheckpointError` line) a checkpoint trainperf did not write as this
    user, or that changed since: a missing or forged manifest, a link, a file added, removed,
    resized or altered. Nothing in the directory is opened but the manifest and the listed
    files (read as bytes, for their hashes)."""
    d = Path(step_dir)
    where = f"checkpoint {str(d)!r}"
    if not stat.S_ISDIR(os.lstat(d).st_mode):
        raise CheckpointError(f"{where} is not a directory (a link?); refusing to read it")
    data = _load_manifest(d)
    body = {k: v for k, v in data.items() if k != "hmac_sha256"}
    given = data.get("hmac_sha256")
    try:
        key = checkpoint_key(create=False)
    except CheckpointError as e:
        raise CheckpointError(f"{where}: {e}") from None
    if not isinstance(given, str) or not hmac.compare_digest(given, _signed(body, key)):
        raise CheckpointError(f"{where}: its manifest's signature does not match this user's checkpoint key "
                              f"({str(key_path())!r}); it was not written by trainperf here, refusing to read it")
    if data.get("version") != VERSION or data.get("step") != step:
        raise CheckpointError(f"{where}: its manifest is for step {data.get('step')!r}, not {step}; refusing to read it")
    listed = {e["path"]: e for e in data["files"]}
    present = _entries(d)
    if sorted(listed) != present:
        extra = sorted(set(present) - set(listed))
        missing = sorted(set(listed) - set(present))
        raise CheckpointError(f"{where} does not hold what trainperf wrote (added: {', '.join(extra) or 'none'}; "
                              f"missing: {', '.join(missing) or 'none'}); refusing to read it")
    for rel, entry in listed.items():
        try:
            size, digest = _sha256(d / rel)
        except OSError as e:
            raise CheckpointError(f"{where}: {rel} cannot be read ({e.strerror}); refusing to read the checkpoint") \
                from None
        if size != entry["size"] or not hmac.compare_digest(digest, str(entry["sha256"])):
            raise CheckpointError(f"{where}: {rel} changed since trainperf wrote it (size or SHA-256 differs); "
                                  "refusing to read the checkpoint")


def latest_complete_step(directory: str | Path) -> int | None:
    """The highest ``step-<N>`` under ``directory`` with its done marker, or None."""
    d = Path(directory)
    if not d.is_dir():
        return None
    steps = []
    for p in d.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and os.path.lexists(p / DONE):
            steps.append(int(m.group(1)))
    return max(steps) if steps else None


def check_checkpoint_dir(path: str | None, *, resume: bool) -> None:
    """``--checkpoint-dir`` before the run starts (one line, exit 2): it must be a directory if it
    exists (else missing, to be created), exist for ``--resume``, and for ``--resume`` its latest
    complete checkpoint must pass :func:`verify` -- before any process reads it."""
    if path is None:
        return
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except (OSError, ValueError) as e:
        raise SpecError("--checkpoint-dir", path, f"a directory ({one_line(getattr(e, 'strerror', None) or str(e))})") \
            from None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise SpecError("--checkpoint-dir", path, "a directory (this path exists and is not one)")
    if not resume:
        return
    if st is None:
        raise SpecError("--checkpoint-dir", path, "an existing directory to --resume from")
    step = latest_complete_step(path)
    if step is not None:
        with contextlib.suppress(FileNotFoundError):
            verify(Path(path) / f"step-{step}", step)
            return
        raise CheckpointError(f"checkpoint {str(Path(path) / f'step-{step}')!r} vanished while it was checked")
