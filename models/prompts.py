"""The AuthEval risk prompt and its four continuations (spec 5.1), verbatim: the scorer's numbers are
comparable with the published cache only if every character matches."""

from __future__ import annotations

import math

from models.slates import LEVELS  # noqa: F401  (very_low..high, the order of the continuations)

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


def metadata_value(value) -> str:
    """`str.format` of the raw manifest value as pandas held it: 55.0 stays '55.0', missing is 'nan'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "nan"
    return str(value)


def risk_prompt(age, sex, anatomic_site) -> str:
    return PROMPT_TEMPLATE.format(age=metadata_value(age), sex=metadata_value(sex),
                                  anatomic_site=metadata_value(anatomic_site))


def chat_messages(image, text: str) -> list[dict]:
    """One user turn whose content is [image, text], as the reference builds it."""
    return [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": text}]}]
