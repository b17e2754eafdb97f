"""Skin tone estimated from pixels where no Fitzpatrick type is recorded: the individual typology angle
(ITA, Chardon et al. 1991) of the skin around the lesion, binned into the six standard ITA categories.

ITA = arctan((L* - 50) / b*) * 180 / pi over CIE L*a*b* (D65, scikit-image's `rgb2lab`). Computed as
`arctan2(L* - 50, b*)`, which is the standard formula wherever b* > 0 (all skin) and stays defined at
b* = 0.

The declared rule (ITA_METHOD), the same for every image:

1. the image is decoded (JPEG draft mode: a reduced DCT decode when the file is large) and reduced to
   ANALYSIS_SIZE x ANALYSIS_SIZE pixels by box averaging;
2. the skin is looked for away from the lesion, in the outer frame: the pixels whose distance from the
   image's centre, in either axis, is at least FRAME_FROM of the image's half side (the outer 20 % on
   each side; dermoscopy centres the lesion);
3. darker-than-skin pixels are excluded: only the frame's brighter half counts (its pixels ranked by
   L*, so that a field of equal values is split too), which drops lesion parts that reach the frame,
   hairs, the dark corners of a vignette and a dermoscope's black field while the skin is at least a
   quarter of the frame;
4. ITA is the median of the per-pixel ITA over those pixels, and its category is the bin it falls in
   (edges right-closed: ITA in (41, 55] is `light`, exactly 55 too, above 55 `very_light`; exactly -30
   is `dark`);
5. skin has colour: where the median b* of those pixels is below MIN_B_STAR (a black, grey or
   grayscale image, a fully transparent one, a bluish cast: b* <= 0 is outside ITA's formula) there is
   no estimate (null ITA and category), never the +-90 degrees that arctan2 gives a neutral pixel.

Any image mode is read at its own depth: 16-bit grey reduced to its high byte (Pillow's convert
would clip it to white), CMYK and palette images converted, and an alpha channel composited over
black (a transparent pixel has no colour, like a dermoscope's black field, and is left out by steps 3
and 5). 32-bit pixels (modes I and F: no declared range) have no estimate.

It is an estimate, not a label: lighting, a dermoscope's colour cast (white balance), vignetting,
specular glare and lesions that fill the frame all move it, and ITA categories are not Fitzpatrick
types. The grouping is named `ita_category` for that reason, beside `fitzpatrick_skin_type` where a
source records the type.

Vectorised: every chunk of images is one (n, S, S, 3) array through one `rgb2lab` call and array
medians; only the decoding is per image (in threads: Pillow's decoder releases the GIL).
"""

from __future__ import annotations

import io
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
from PIL import Image
from skimage.color import rgb2lab

from autheval.raw.phash import read_image_bytes

ITA_METHOD = (
    "ita_v2: outer frame (20 %) at 64 x 64, brighter half of L*, median per-pixel ITA; "
    "none where the median b* is below 1 (no colour)"
)
ANALYSIS_SIZE = 64
FRAME_FROM = 0.6  # of the half side: pixels at least this far from the centre in x or y form the frame
CHUNK = 256  # images per rgb2lab call (about 25 MB of float64 at 64 x 64)
MIN_B_STAR = 1.0  # step 5: skin has b* of 4 or more even at its darkest; a neutral grey or black has 0

# The six standard ITA categories, darkest first, and their upper edges (degrees; right-closed).
ITA_CATEGORIES = ("dark", "brown", "tan", "intermediate", "light", "very_light")
ITA_EDGES = (-30.0, 10.0, 28.0, 41.0, 55.0)
SKIN_TONE_SCHEMA = pa.schema(
    [("image_id", pa.string()), ("ita", pa.float64()), ("ita_category", pa.string()), ("ita_method", pa.string())]
)


def ita_degrees(lightness, b_star) -> np.ndarray:
    """ITA in degrees of L* and b* (arrays of any shape)."""
    return np.degrees(np.arctan2(np.asarray(lightness, float) - 50.0, np.asarray(b_star, float)))


def ita_category(ita) -> np.ndarray:
    """The ITA category of each angle (object array; None where the angle is not finite)."""
    ita = np.asarray(ita, float)
    index = np.searchsorted(np.asarray(ITA_EDGES), ita, side="left")  # x <= edge: the lower bin
    names = np.asarray(ITA_CATEGORIES, dtype=object)[np.minimum(index, len(ITA_CATEGORIES) - 1)]
    # numpy's stubs give where() no None value (numpy takes it: None in an object array), so mypy picks the
    # one-argument overload and its tuple
    return np.where(np.isfinite(ita), names, None)  # type: ignore[return-value]


def frame_mask(shape=(ANALYSIS_SIZE, ANALYSIS_SIZE)) -> np.ndarray:
    """The boolean mask of the outer frame of an image of `shape` (rows, columns): step 2 of the rule."""
    rows, cols = (np.abs((np.arange(n) + 0.5) / n * 2 - 1) >= FRAME_FROM for n in shape)  # centres in [-1, 1]
    return rows[:, None] | cols[None, :]


def ita_of_images(rgb: np.ndarray) -> np.ndarray:
    """Estimated ITA (degrees) of each image of an (n, S, S, 3) uint8 or [0, 1] float array (steps 2-5);
    NaN where the skin has no colour."""
    frame = np.asarray(rgb)[:, frame_mask(rgb.shape[1:3])]  # (n, pixels of the frame, 3): only these converted
    lab = rgb2lab(frame.astype(np.float64) / 255.0 if frame.dtype == np.uint8 else frame, channel_axis=-1)
    brighter = np.argsort(lab[..., 0], axis=1, kind="stable")[:, lab.shape[1] // 2 :]  # by rank: ties split too
    lightness = np.take_along_axis(lab[..., 0], brighter, axis=1)
    b_star = np.take_along_axis(lab[..., 2], brighter, axis=1)
    ita = np.median(ita_degrees(lightness, b_star), axis=1)
    return np.where(np.median(b_star, axis=1) >= MIN_B_STAR, ita, np.nan)  # step 5: no colour, no ITA


def _rgb8(image: Image.Image) -> Image.Image:
    """An image of any mode as 8-bit RGB at its own depth: 16-bit grey reduced to its high byte (as
    Pillow reduces 16-bit RGB, and as the scorer's models/scorer_batches.open_rgb does) instead of
    clipped to white, alpha (and a palette's transparency) composited over black; 32-bit pixels (modes
    I and F) have no declared range: no estimate."""
    if image.mode.startswith("I;16"):
        grey = (np.asarray(image).astype(np.uint16) >> 8).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if image.mode in ("I", "F"):
        raise ValueError(f"32-bit pixels (mode {image.mode}) have no declared range")
    if image.mode in ("RGBA", "LA", "La", "RGBa", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = np.asarray(image.convert("RGBA"), dtype=np.float64)
        return Image.fromarray((rgba[..., :3] * rgba[..., 3:] / 255.0).round().astype(np.uint8), "RGB")
    return image.convert("RGB")


def analysis_pixels(data: bytes, size: int = ANALYSIS_SIZE) -> np.ndarray:
    """One image's bytes as a (size, size, 3) uint8 array (step 1)."""
    with Image.open(io.BytesIO(data)) as image:
        image.draft("RGB", (size * 2, size * 2))  # JPEG: decode at the smallest DCT scale at least twice the size
        rgb = _rgb8(image)
    return np.asarray(rgb.resize((size, size), Image.Resampling.BOX), np.uint8)


def _pixels_or_none(path: str | None) -> np.ndarray | None:
    if path is None:
        return None
    try:
        return analysis_pixels(read_image_bytes(path))
    except Exception:  # an unreadable image has no estimate (the raw path reports it as unreadable_image)
        return None


def skin_tones(images: pa.Table, workers: int | None = None) -> pa.Table:
    """image_id, ita, ita_category, ita_method for every row of `images` (columns image_id, path);
    ita and ita_category are null for an image that cannot be decoded and for one whose skin has no
    colour (step 5)."""
    ids = images.column("image_id").to_pylist()
    paths = images.column("path").to_pylist()
    ita = np.full(len(ids), np.nan)
    workers = max(1, workers or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for start in range(0, len(ids), CHUNK):
            pixels = list(pool.map(_pixels_or_none, paths[start : start + CHUNK]))
            good = [i for i, p in enumerate(pixels) if p is not None]
            if good:
                ita[[start + i for i in good]] = ita_of_images(np.stack([p for p in pixels if p is not None]))
    finite = np.isfinite(ita)
    return pa.table(
        {
            "image_id": pa.array(ids, pa.string()),
            "ita": pa.array(np.where(finite, ita, 0.0), pa.float64(), mask=~finite),
            "ita_category": pa.array(ita_category(ita).tolist(), pa.string()),
            "ita_method": pa.array([ITA_METHOD] * len(ids), pa.string()),
        },
        schema=SKIN_TONE_SCHEMA,
    )


def with_skin_tone(images: pa.Table, workers: int | None = None) -> pa.Table:
    """`images` with the estimated ita, ita_category and ita_method columns appended (replaced where
    present), row for row."""
    tones = skin_tones(images, workers)
    for name in SKIN_TONE_SCHEMA.names[1:]:
        if name in images.column_names:
            images = images.drop_columns([name])
        images = images.append_column(SKIN_TONE_SCHEMA.field(name), tones.column(name))
    return images
