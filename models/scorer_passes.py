"""The scorer's two forward passes over an encoded batch (models/scorer.py says why there are two):
`score_shared_prefix` runs the prompt once and the four continuations on its repeated key/value
cache; `score_padded_rows` runs the reference's prompt + continuation rows. Both return (B, 4) mean
token log-likelihoods; torch is imported where a pass runs."""

from __future__ import annotations

import numpy as np


def model_inputs(model, encoded: dict) -> dict:
    device, dtype = model.device, model.dtype
    inputs = {k: v.to(device) for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    if "pixel_values" in encoded:
        inputs["pixel_values"] = encoded["pixel_values"].to(device, dtype)
    return inputs


def score_shared_prefix(
    model, encoded: dict, cont_ids: list[list[int]], pad_id: int, row_cont_ids: list[list[list[int]]] | None = None
) -> np.ndarray:
    """The prompt pass runs left-padded (every prompt ends at the last position, positions counted from
    each row's first real token), so a row's distance from any key is its real distance: a sliding-window
    layer (Gemma3) then masks and keeps the right keys for every row. Right-padded, a row shorter than
    the batch's longest lost its first keys to the window once the longest passed it.

    `row_cont_ids`: each row's own continuations (B lists of the same number of token-id lists: a
    benchmark item's options, models/benchmark.py) instead of `cont_ids`, shared by every row."""
    import torch

    inputs = _left_padded(model_inputs(model, encoded))
    mask = inputs["attention_mask"]
    batch = mask.shape[0]
    rows = row_cont_ids if row_cont_ids is not None else [cont_ids] * batch
    n_cont = len(rows[0])
    if len(rows) != batch or any(len(row) != n_cont for row in rows):
        raise ValueError(
            f"every row of a batch needs the same number of continuations ({n_cont}) and every "
            f"row its own ({len(rows)} lists for {batch} rows)"
        )
    prompt_len = mask.sum(dim=1)
    prompt_positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    prefix = model(**inputs, position_ids=prompt_positions, use_cache=True, logits_to_keep=1)
    first_logits = prefix.logits[:, -1]  # (B, V): every prompt ends at the last position
    cache = prefix.cache
    cache.batch_repeat_interleave(n_cont)  # row b*n+j continues image b

    flat = [ids for row in rows for ids in row]  # (nB, M), row b*n+j = row b's continuation j
    width = max(len(ids) for ids in flat)
    cont = torch.tensor([ids + [pad_id] * (width - len(ids)) for ids in flat], dtype=torch.long, device=mask.device)
    cont_mask = torch.tensor(
        [[1] * len(ids) + [0] * (width - len(ids)) for ids in flat], dtype=mask.dtype, device=mask.device
    )
    attention = torch.cat([mask.repeat_interleave(n_cont, dim=0), cont_mask], dim=1)
    positions = prompt_len.repeat_interleave(n_cont).unsqueeze(1) + torch.arange(width, device=mask.device)
    logits = model(input_ids=cont, attention_mask=attention, position_ids=positions, cache=cache, use_cache=True).logits
    # token 0 is predicted by the last prompt position, token t >= 1 by continuation position t-1
    step_logits = torch.cat([first_logits.repeat_interleave(n_cont, dim=0).unsqueeze(1), logits[:, : width - 1]], dim=1)
    logprobs = _token_logprobs(step_logits, cont)
    return _masked_mean(logprobs, cont_mask).view(batch, n_cont).cpu().numpy()


def _left_padded(inputs: dict) -> dict:
    """Right-padded token rows (real tokens first) moved to the right end of each row; images untouched."""
    import torch

    mask = inputs["attention_mask"]
    width = mask.shape[1]
    shift = width - mask.sum(dim=1, keepdim=True)
    index = (torch.arange(width, device=mask.device).unsqueeze(0) - shift) % width
    return {
        k: torch.gather(v, 1, index) if k in ("input_ids", "attention_mask", "token_type_ids") else v
        for k, v in inputs.items()
    }


def score_padded_rows(
    model, encoded: dict, cont_ids: list[list[int]], pad_id: int, all_logits: bool = False
) -> np.ndarray:
    """The reference's rows (prompt_b + continuation_j, right-padded), all images of the batch at once.
    Only the positions that predict a continuation token are projected onto the vocabulary, unless
    `all_logits` (the reference computes every position's logits: the benchmark's baseline does too)."""
    import torch

    inputs = model_inputs(model, encoded)
    mask = inputs["attention_mask"]
    batch = mask.shape[0]
    n_cont = len(cont_ids)
    prompt_len = mask.sum(dim=1).tolist()
    width = max(prompt_len) + max(len(ids) for ids in cont_ids)
    rows = torch.full((batch * n_cont, width), pad_id, dtype=torch.long, device=mask.device)
    row_mask = torch.zeros_like(rows)
    types = torch.zeros_like(rows) if "token_type_ids" in inputs else None
    targets = torch.zeros_like(rows)
    target_mask = torch.zeros_like(rows)
    for b in range(batch):
        length = prompt_len[b]
        for j, ids in enumerate(cont_ids):
            r = b * n_cont + j
            rows[r, :length] = inputs["input_ids"][b, :length]
            rows[r, length : length + len(ids)] = torch.tensor(ids, device=mask.device)
            row_mask[r, : length + len(ids)] = 1
            if types is not None:
                types[r, :length] = inputs["token_type_ids"][b, :length]
            # logits at P-1 .. P-2+m predict the continuation tokens
            targets[r, length - 1 : length - 1 + len(ids)] = torch.tensor(ids, device=mask.device)
            target_mask[r, length - 1 : length - 1 + len(ids)] = 1
    forward = {"input_ids": rows, "attention_mask": row_mask}
    if types is not None:
        forward["token_type_ids"] = types
    if "pixel_values" in inputs:
        forward["pixel_values"] = inputs["pixel_values"].repeat_interleave(n_cont, dim=0)
    keep = width if all_logits else width - (min(prompt_len) - 1)
    logits = model(**forward, use_cache=False, logits_to_keep=keep).logits
    logprobs = _token_logprobs(logits, targets[:, width - keep :])
    return _masked_mean(logprobs, target_mask[:, width - keep :]).view(batch, n_cont).cpu().numpy()


def _token_logprobs(logits, tokens):
    """log p(token) at each position, in float32 (logits may be bf16: logsumexp in fp32 keeps the digits)."""
    import torch

    logits = logits.float()
    picked = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def _masked_mean(values, mask):
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim=1).double() / mask.sum(dim=1).double()
