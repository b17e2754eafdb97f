"""Ed25519 keys and signatures of site exports (the `cryptography` package).

A site holds `site.key` (PKCS#8 PEM, mode 0600, never overwritten) and registers `site.pub` (PEM) with
the hub; the hub trusts a folder of registered `<site>.pub` files, each key bound to the site its file
name names. An export's manifest names the signing
key (its raw 32 bytes, hex) and `manifest.sig` holds the signature of the manifest's exact bytes; the
manifest names the SHA-256 of every other file of the export, so one signature covers them all.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from autheval.errors import RecordError

KEY_FILE = "site.key"
PUB_FILE = "site.pub"


def _write_new(path: Path, data: bytes, mode: int, flag: str) -> None:
    """Create `path` with `mode`, refusing one that exists (a link included): a key is never replaced."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), mode)
    except FileExistsError as err:
        raise RecordError(flag, None, f"{path} exists; a key is never overwritten (move it away first)") from err
    except OSError as err:
        raise RecordError(flag, None, f"cannot write {path}: {err.strerror or err}") from err
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(path, mode)  # the umask may have taken bits away from the public key's 0644


def keygen(folder: Path, flag: str = "--out") -> tuple[Path, Path]:
    """A new key pair in `folder` (made if missing): site.key (0600) and site.pub. Refuses to
    replace either."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise RecordError(flag, None, f"{folder} is a file, not a folder")
    for name in (KEY_FILE, PUB_FILE):
        if (folder / name).exists() or (folder / name).is_symlink():
            raise RecordError(flag, None, f"{folder / name} exists; a key is never overwritten (move it away first)")
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as err:
        raise RecordError(flag, None, f"cannot make {folder}: {err.strerror or err}") from err
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    _write_new(folder / KEY_FILE, private, 0o600, flag)
    _write_new(folder / PUB_FILE, public, 0o644, flag)
    return folder / KEY_FILE, folder / PUB_FILE


def plain_file_bytes(path: Path, flag: str, what: str, limit: int = 1 << 16) -> bytes:
    """The bytes of a plain file (not a link, not a folder, not a FIFO) of at most `limit` bytes, or one
    line naming `flag`: keys, manifests and statistics are read no other way."""
    try:
        st = os.lstat(path)
    except OSError as err:
        raise RecordError(flag, None, f"{path}: no such {what}") from err
    if not stat.S_ISREG(st.st_mode):
        raise RecordError(flag, None, f"{path} is not a plain file (a link, folder or device); a {what} must be one")
    if st.st_size > limit:
        raise RecordError(flag, None, f"{path} is {st.st_size:,} bytes, more than a {what} may hold ({limit:,})")
    return path.read_bytes()


def load_private_key(path: Path, flag: str = "--key"):
    """The Ed25519 private key of `path`; refused when others may read it (mode beyond 0600)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    data = plain_file_bytes(Path(path), flag, "private key")
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    if mode & 0o077:
        raise RecordError(flag, None, f"{path} may be read by others (mode {mode:04o}); chmod 600 {path}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise RecordError(flag, None, f"{path} is not an unencrypted PEM private key (autheval site keygen)") from err
    if not isinstance(key, Ed25519PrivateKey):
        raise RecordError(flag, None, f"{path} is not an Ed25519 key (autheval site keygen makes one)")
    return key


def public_hex(key) -> str:
    """The raw 32 bytes of a public key (or of a private key's public key), as hex."""
    from cryptography.hazmat.primitives import serialization

    public = key.public_key() if hasattr(key, "public_key") else key
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def trusted_keys(folder: Path, flag: str = "--trust") -> dict[str, str]:
    """{raw public key hex: file name} of every registered `<site>.pub` in `folder` (each a plain file
    holding an Ed25519 public key; the file name names the one site the key may sign for; a key registered
    twice, or anything else, is one line naming the file)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    folder = Path(folder)
    if not folder.is_dir():
        raise RecordError(flag, None, f"{folder} is not a folder of registered *.pub keys")
    keys: dict[str, str] = {}
    for path in sorted(folder.glob("*.pub")):
        data = plain_file_bytes(path, flag, "public key")
        try:
            key = serialization.load_pem_public_key(data)
        except (ValueError, TypeError) as err:
            raise RecordError(flag, None, f"{path} is not a PEM public key") from err
        if not isinstance(key, Ed25519PublicKey):
            raise RecordError(flag, None, f"{path} is not an Ed25519 public key")
        site = key_site(path.name)
        from autheval.sites.names import check_site_name

        check_site_name(site, f"{flag} {path}: the file name (<site>.pub) names the site the key signs for;")
        raw = public_hex(key)
        if raw in keys:
            raise RecordError(
                flag, None, f"{path} and {folder / keys[raw]} hold the same key; a key is registered for one site only"
            )
        keys[raw] = path.name
    if not keys:
        raise RecordError(flag, None, f"{folder} holds no registered *.pub key")
    return keys


def key_site(file_name: str) -> str:
    """The site a registered key signs for: its file name without `.pub` (`north.pub` signs for north)."""
    return file_name[: -len(".pub")] if file_name.endswith(".pub") else file_name


def sign(key, data: bytes) -> str:
    """The Ed25519 signature of `data`, as hex."""
    return key.sign(data).hex()


def verify(public_key_hex: str, signature_hex: str, data: bytes) -> bool:
    """Whether `signature_hex` is the signature of `data` by the key `public_key_hex`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex)).verify(bytes.fromhex(signature_hex), data)
    except (InvalidSignature, ValueError):
        return False
    return True
