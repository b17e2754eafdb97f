"""The AuthEval risk prompt and its four continuations (spec 5.1), verbatim: the scorer's numbers are
comparable with the published cache only if every character matches."""

from __future__ import annotations

import math

PROMPT_ID = "medgemma_isic_risk_v3"
BACKEND = "medgemma_mc_logits"
SEED = 20260711

PROMPT_TEMPLATE = (
    "This is a research image-assessment task, not patient-specific clinical advice. Inspect the "
    "dermoscopy image and the listed public metadata only. Rank the lesion into one of four ordinal "
    "visual-risk categories. Do not infer unavailable history, symptoms, evolution, patient preference, "
    "local policy, or service capacity. Categories: very low visual risk; low visual risk; moderate "
    "visual risk; high visual risk. Public metadata: age={age}, sex={sex}, anatomic_site={anatomic_site}. "
    "Selected visual-risk category:"
)

# Each begins with one space (the prompt ends with a colon).
CONTINUATIONS = {
    "very_low": " very low visual risk: benign-appearing without evident suspicious dermoscopic features",
    "low": " low visual risk: mostly benign-appearing with limited atypical dermoscopic features",
    "moderate": " moderate visual risk: suspicious dermoscopic features warranting specialist assessment",
    "high": " high visual risk: strongly suspicious dermoscopic features warranting urgent specialist assessment",
}

# The only inputs a proposer may see (spec 5.1); anything else in the input table is refused.
PUBLIC_COLUMNS = ("image_id", "image_path", "age", "sex", "anatomic_site")
# A metadata value in the prompt, in characters: a model's memory grows with the square of the prompt's
# length, so a 300,000-character free-text site would ask for gigabytes (the scorer refuses it in one line).
MAX_METADATA_CHARS = 200


def metadata_value(value) -> str:
    """`str.format` of the raw manifest value as pandas held it: 55.0 stays '55.0', missing is 'nan'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    return str(value)


# Declared paraphrases of the spec prompt for CCT (DermoGPT section 1: K prompt variants per case).
# Variant 0 is the spec prompt itself, unchanged (PROMPT_ID); the others ask the same question with the
# same four category names, the same public metadata and the same closing "Selected visual-risk
# category:", so the four continuations fit every variant. Each variant has its own prompt id, which
# keys the scorer's cache.
PROMPT_VARIANTS: tuple[tuple[str, str], ...] = (
    (PROMPT_ID, PROMPT_TEMPLATE),
    (
        "medgemma_isic_risk_v3_para1",
        (
            "Research image assessment only; this is not clinical advice for any patient. Look at the dermoscopy "
            "image and at the public metadata listed below, nothing else. Place the lesion in one of four ordered "
            "visual-risk categories: very low visual risk; low visual risk; moderate visual risk; high visual "
            "risk. Do not guess history, symptoms, change over time, patient preference, local policy or service "
            "capacity, none of which is given. Public metadata: age={age}, sex={sex}, "
            "anatomic_site={anatomic_site}. Selected visual-risk category:"
        ),
    ),
    (
        "medgemma_isic_risk_v3_para2",
        (
            "Task for research purposes (not patient-specific medical advice): from this dermoscopy image and the "
            "public metadata only, rank the lesion's visual risk on a four-level ordinal scale. Categories: very "
            "low visual risk; low visual risk; moderate visual risk; high visual risk. Information that is not "
            "provided (history, symptoms, evolution, patient preference, local policy, service capacity) must not "
            "be inferred. Public metadata: age={age}, sex={sex}, anatomic_site={anatomic_site}. "
            "Selected visual-risk category:"
        ),
    ),
    (
        "medgemma_isic_risk_v3_para3",
        (
            "You are assisting a research study that assesses images; you are not advising a patient. Using only "
            "the dermoscopy image and the public metadata given here, choose which of four ordinal visual-risk "
            "categories fits the lesion: very low visual risk, low visual risk, moderate visual risk or high "
            "visual risk. Leave out anything not shown, such as history, symptoms, evolution, patient "
            "preference, local policy or service capacity. Public metadata: age={age}, sex={sex}, "
            "anatomic_site={anatomic_site}. Selected visual-risk category:"
        ),
    ),
)
PROMPT_TEMPLATES = dict(PROMPT_VARIANTS)


def variant_prompt_ids(k: int) -> tuple[str, ...]:
    """The prompt ids of CCT variants 0..k-1 (variant 0 = the spec prompt)."""
    if not 1 <= k <= len(PROMPT_VARIANTS):
        raise ValueError(f"between 1 and {len(PROMPT_VARIANTS)} prompt variants are declared, asked for {k}")
    return tuple(prompt_id for prompt_id, _ in PROMPT_VARIANTS[:k])


def risk_prompt(age, sex, anatomic_site, prompt_id: str = PROMPT_ID) -> str:
    """The risk prompt of a declared variant (default: the spec prompt) with the image's public metadata."""
    if prompt_id not in PROMPT_TEMPLATES:
        raise ValueError(f"unknown prompt id {prompt_id!r}; declared: {', '.join(PROMPT_TEMPLATES)}")
    return PROMPT_TEMPLATES[prompt_id].format(
        age=metadata_value(age), sex=metadata_value(sex), anatomic_site=metadata_value(anatomic_site)
    )


def chat_messages(image, text: str) -> list[dict]:
    """One user turn whose content is [image, text], as the reference builds it."""
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
