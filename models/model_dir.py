"""A local model folder checked before a run starts, in one line naming the flag (no torch, no model
load: a few small JSON files and each weight file's header are read).

A folder is refused when it has no config.json (or one that is not a JSON object), when it is not the
kind of model its role needs (`scorer`: a vision-language model, a `vision_config` beside its text
model, with a tokenizer and a processor; `vision`: a vision tower, an `image_size` and no text part,
with an image processor: a BERT folder is neither), when it has no weights (model.safetensors,
pytorch_model.bin, or a shard index whose shards are all there), or when a safetensors file is
truncated or padded (its header's length and tensor offsets must add up to the file's size exactly).
Found by hand, each of these failed only after the stages before the model ran, in tracebacks.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

from autheval.errors import RecordError

ROLES = ("scorer", "vision")
SAFETENSORS = "model.safetensors"
TORCH_BIN = "pytorch_model.bin"
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
MAX_JSON_BYTES = 64 << 20  # a config, an index or a safetensors header larger than this is not a model's
MAX_JSON_DEPTH = 64


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
    config = _json_object(folder / "config.json", refuse, "config.json")
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
    for weights in _weight_files(folder, refuse):
        if weights.name.endswith(".safetensors"):
            _check_safetensors(weights, refuse)
        elif zipfile.is_zipfile(weights):
            try:
                with zipfile.ZipFile(weights) as archive:
                    archive.namelist()
            except (zipfile.BadZipFile, OSError) as err:
                raise refuse(f"{weights.name} cannot be read ({err})") from None


def _json_object(path: Path, refuse, name: str) -> dict:
    if not path.is_file():
        raise refuse(f"no {name} (not a model folder)")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise refuse(f"{name} is larger than {MAX_JSON_BYTES >> 20} MB")
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as err:
        raise refuse(f"{name} is not valid JSON ({str(err).splitlines()[0][:120]})") from None
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


def _check_safetensors(path: Path, refuse) -> None:
    """The header's length and the tensors' data offsets must account for the file's size exactly
    (safetensors' own rule): a truncated download or a file cut by a full disk is refused here."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise refuse(f"{path.name} is truncated ({size} bytes: no header)")
        length = int.from_bytes(head, "little")
        if length > min(size - 8, MAX_JSON_BYTES):
            raise refuse(f"{path.name} is truncated (its header claims {length} bytes; the file has {size})")
        try:
            header = json.loads(handle.read(length))
        except (ValueError, RecursionError):
            raise refuse(f"{path.name} is not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise refuse(f"{path.name} is not a safetensors file (its header is not a JSON object)")
    end = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        offsets = tensor.get("data_offsets") if isinstance(tensor, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            raise refuse(f"{path.name}: tensor {name!r} has no valid data_offsets")
        end = max(end, offsets[1])
    expected = 8 + length + end
    if size < expected:
        raise refuse(f"{path.name} is truncated ({size} bytes; its header needs {expected})")
    if size > expected:
        raise refuse(f"{path.name} has {size - expected} bytes after its tensors (not a safetensors file as written)")
