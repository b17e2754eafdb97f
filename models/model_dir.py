"""A local model folder checked before a run starts, in one line naming the flag (no torch, no model
load: a few small JSON files and each weight file's header are read).

A folder is refused when it has no config.json (or one that is not a JSON object), when it is not the
kind of model its role needs (`scorer`: a vision-language model, a `vision_config` beside its text
model, with a tokenizer and a processor; `vision`: a vision tower, an `image_size` and no text part,
with an image processor: a BERT folder is neither), when it has no weights (model.safetensors,
pytorch_model.bin, or a shard index whose shards are all there), or when a safetensors file is
truncated or padded (its header's length and tensor offsets must add up to the file's size exactly),
when any entry of the folder is a link (a link could read a file from outside: /etc/shadow as weights)
or not a regular file (a FIFO blocks the loader; a device is endless), when a JSON file of the folder
repeats a key (read with autheval.parse.load_json), or when config.json declares a size no model has
(`vocab_size: 10**12` or `hidden_size: 2**40`: SIZE_LIMITS, and an embedding larger than the weights).
Found by hand, each of these failed only after the stages before the model ran, in tracebacks.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

from autheval.errors import RecordError
from autheval.parse import load_json

ROLES = ("scorer", "vision")
SAFETENSORS = "model.safetensors"
TORCH_BIN = "pytorch_model.bin"
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
MAX_JSON_BYTES = 64 << 20  # a config, an index or a safetensors header larger than this is not a model's
MAX_JSON_DEPTH = 64
MAX_ENTRIES = 10_000  # files and folders in a model folder (a real one has a few dozen)
SMALL_JSON_BYTES = 4 << 20  # JSON files up to this size are parsed in full (configs; not a vocabulary)
# The largest value a config.json may give each size (the largest released models are far below these).
SIZE_LIMITS = {
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 17,
    "intermediate_size": 1 << 20,
    "num_hidden_layers": 1 << 12,
    "num_attention_heads": 1 << 12,
    "num_key_value_heads": 1 << 12,
    "head_dim": 1 << 14,
    "image_size": 1 << 14,
    "patch_size": 1 << 12,
    "num_channels": 64,
    "max_position_embeddings": 1 << 24,
    "mm_tokens_per_image": 1 << 16,
    "projection_dim": 1 << 17,
}
GENERIC_LIMIT = 1 << 24  # any other integer named *_size, *_dim or num_*


def check_model_dir(path: str | os.PathLike, flag: str, role: str) -> None:
    """Refuse a model folder that cannot serve as `role` ('scorer' or 'vision'), in one RecordError
    line naming `flag` (the flag, variable or setting that named the folder) and the folder."""
    if role not in ROLES:
        raise ValueError(f"unknown model role {role!r}; expected one of {ROLES}")
    folder = Path(path)

    def refuse(rule: str) -> RecordError:
        return RecordError(flag, None, f"{folder}: {rule}")

    if not folder.is_dir():
        raise refuse("no such folder (a local model directory; nothing is downloaded)")
    _only_regular_files(folder, refuse)
    config = _json_object(folder / "config.json", refuse, "config.json")
    _check_sizes(config, refuse)
    for small in sorted(folder.glob("*.json")):
        if small.name != "config.json" and small.stat().st_size <= SMALL_JSON_BYTES:
            _json_value(small, refuse, small.name)
    if role == "scorer":
        if not isinstance(config.get("vision_config"), dict):
            raise refuse(
                f"not a vision-language model (config.json's model_type {config.get('model_type')!r} has no "
                "vision_config); the scorer needs an image-text-to-text model such as Gemma3 or LLaVA"
            )
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            raise refuse(f"no tokenizer (one of {', '.join(TOKENIZER_FILES)})")
        if not any((folder / name).is_file() for name in ("processor_config.json", "preprocessor_config.json")):
            raise refuse("no processor (processor_config.json or preprocessor_config.json)")
    else:
        if "image_size" not in config or "text_config" in config:
            raise refuse(
                f"not a vision tower (config.json's model_type {config.get('model_type')!r} "
                + ("has a text part" if "text_config" in config else "has no image_size")
                + "); the probe needs a vision model such as CLIPVisionModel or SigLIP's vision model"
            )
        if not any((folder / name).is_file() for name in ("preprocessor_config.json", "processor_config.json")):
            raise refuse("no image processor (preprocessor_config.json)")
    elements = 0
    known = True
    for weights in _weight_files(folder, refuse):
        if weights.name.endswith(".safetensors"):
            elements += _check_safetensors(weights, refuse)
        elif zipfile.is_zipfile(weights):
            try:
                with zipfile.ZipFile(weights) as archive:
                    archive.namelist()
            except (zipfile.BadZipFile, OSError) as err:
                raise refuse(f"{weights.name} cannot be read ({err})") from None
            known = False
        else:
            known = False
    if known:
        _check_embedding(config, elements, refuse)


def _only_regular_files(folder: Path, refuse) -> None:
    """Every entry under the folder must be a regular file or a folder, and none a link: a link could
    make the loaders read a file from outside the folder, and a FIFO or a device blocks them or never
    ends. Nothing is followed or opened here (lstat only)."""
    # A Hugging Face cache snapshot (models--org--name/snapshots/<revision>/) is made of links to
    # models--org--name/blobs/<sha>: those links, and no others, are read.
    repo = folder.resolve().parent.parent
    blobs = repo / "blobs" if folder.resolve().parent.name == "snapshots" and (repo / "blobs").is_dir() else None
    seen = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > MAX_ENTRIES:
                raise refuse(f"has more than {MAX_ENTRIES} files and folders (not a model folder)")
            entry = Path(root, name)
            shown = entry.relative_to(folder)
            try:
                mode = entry.lstat().st_mode
            except OSError as err:
                raise refuse(f"{shown} cannot be read ({err.strerror})") from None
            if stat.S_ISLNK(mode):
                if blobs is not None and _blob_link(entry, blobs):
                    continue
                raise refuse(
                    f"{shown} is a link (links in a model folder are refused, but for a Hugging Face cache "
                    "snapshot's links to a regular file in its own blobs/ folder: nothing outside the folder "
                    "is read; copy the files in, e.g. cp -rL)"
                )
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise refuse(f"{shown} is not a regular file (a FIFO, socket or device)")


def _blob_link(entry: Path, blobs: Path) -> bool:
    """A link of a Hugging Face cache snapshot: to a regular file directly in the repo's blobs/ folder."""
    try:
        target = entry.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling, or a loop
        return False
    return target.parent == blobs.resolve() and stat.S_ISREG(target.lstat().st_mode)


def _check_sizes(config: dict, refuse) -> None:
    """Each size config.json gives (in the config and its text_config, vision_config, ...) must be an
    integer from 0 to its SIZE_LIMITS bound (GENERIC_LIMIT for other *_size, *_dim and num_* integers)."""
    stack: list[tuple[str, object]] = [("", config)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, list):
            stack.extend((f"{where}[{i}]", item) for i, item in enumerate(value))
            continue
        if not isinstance(value, dict):
            continue
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            if isinstance(item, (dict, list)):
                stack.append((path, item))
                continue
            limit = SIZE_LIMITS.get(key)
            if limit is None and (key.endswith(("_size", "_dim")) or key.startswith("num_")):
                if not isinstance(item, int) or isinstance(item, bool):
                    continue
                limit = GENERIC_LIMIT
            if limit is None or item is None:
                continue
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item <= limit:
                raise refuse(f"config.json's {path} is {item!r}; it must be an integer from 0 to {limit}")


def _check_embedding(config: dict, elements: int, refuse) -> None:
    """A config whose token embedding (vocab_size x hidden_size) holds more numbers than all the
    safetensors weights together does not describe these weights."""
    for part, section in [("", config)] + [(f"{k}.", v) for k, v in config.items() if isinstance(v, dict)]:
        vocab, hidden = section.get("vocab_size"), section.get("hidden_size")
        if isinstance(vocab, int) and isinstance(hidden, int) and vocab * hidden > elements:
            raise refuse(
                f"config.json's {part}vocab_size x {part}hidden_size ({vocab} x {hidden}) is more than the "
                f"{elements} numbers of its weights (the config does not describe these weights)"
            )


def _json_value(path: Path, refuse, name: str):
    if path.stat().st_size > MAX_JSON_BYTES:
        raise refuse(f"{name} is larger than {MAX_JSON_BYTES >> 20} MB")
    try:
        return load_json(path.read_bytes(), name, what="JSON")
    except RecordError as err:
        raise refuse(f"{name} is not valid JSON ({err.rule[:160]})") from None


def _json_object(path: Path, refuse, name: str) -> dict:
    if not path.is_file():
        raise refuse(f"no {name} (not a model folder)")
    value = _json_value(path, refuse, name)
    if not isinstance(value, dict):
        raise refuse(f"{name} must hold a JSON object")
    return value


def _weight_files(folder: Path, refuse) -> list[Path]:
    """The folder's weight files: a shard index's shards (each present), else the single file."""
    for index in INDEX_FILES:
        if (folder / index).is_file():
            weight_map = _json_object(folder / index, refuse, index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise refuse(f"{index} has no weight_map")
            shards = sorted({str(v) for v in weight_map.values()})
            for shard in shards:
                file = folder / shard
                if Path(shard).is_absolute() or ".." in Path(shard).parts or not file.is_file():
                    raise refuse(f"{index} names shard {shard!r}, which is not a file of the folder")
            return [folder / shard for shard in shards]
    for name in (SAFETENSORS, TORCH_BIN):
        if (folder / name).is_file():
            return [folder / name]
    raise refuse(f"no weights ({SAFETENSORS}, {TORCH_BIN} or a shard index {' / '.join(INDEX_FILES)})")


def _check_safetensors(path: Path, refuse) -> int:
    """The number of values its tensors hold. The header's length and the tensors' data offsets must
    account for the file's size exactly (safetensors' own rule): a truncated download or a file cut by
    a full disk is refused here."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise refuse(f"{path.name} is truncated ({size} bytes: no header)")
        length = int.from_bytes(head, "little")
        if length > min(size - 8, MAX_JSON_BYTES):
            raise refuse(f"{path.name} is truncated (its header claims {length} bytes; the file has {size})")
        try:
            header = load_json(handle.read(length), path.name, what="a safetensors header")
        except RecordError as err:
            raise refuse(f"{path.name} is not a safetensors file ({err.rule[:160]})") from None
    if not isinstance(header, dict):
        raise refuse(f"{path.name} is not a safetensors file (its header is not a JSON object)")
    end = elements = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            raise refuse(f"{path.name}: tensor {name!r} has no valid data_offsets")
        end = max(end, offsets[1])
        shape = tensor.get("shape")
        if isinstance(shape, list) and all(isinstance(x, int) and x >= 0 for x in shape):
            count = 1
            for x in shape:
                count *= x
            elements += count
    expected = 8 + length + end
    if size < expected:
        raise refuse(f"{path.name} is truncated ({size} bytes; its header needs {expected})")
    if size > expected:
        raise refuse(f"{path.name} has {size - expected} bytes after its tensors (not a safetensors file as written)")
    return elements
