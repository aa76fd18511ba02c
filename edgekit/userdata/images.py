"""Calibration from a folder of images (JPEG, PNG, BMP, WebP) through a declared preprocessing.

    --calib photos/ --calib-preprocess resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225

or the same keys in a TOML file (``--calib-preprocess preprocess.toml``: ``resize = 256``,
``crop = 224``, ``mean = [0.485, 0.456, 0.406]``, ...). Every image goes through these steps, in
this order (torchvision's ``Resize`` -> ``CenterCrop`` -> ``ToTensor`` -> ``Normalize``):

  ``resize=S``      the shorter side to S pixels, the aspect kept; ``resize=HxW``: exactly H x W.
                    Default: the smallest size that covers the crop (the shorter side to the crop's).
  ``crop=S|HxW``    the centre S x S (H x W) pixels. Default: the model input's H x W.
  ``range=LO:HI``   pixel values 0..255 mapped linearly onto LO..HI (default ``0:1``).
  ``mean=``, ``std=``  per channel (``R:G:B``, or one value for all), in range units:
                    ``(x - mean) / std`` (default 0 and 1: no normalisation).
  ``color=``        ``rgb`` | ``bgr`` | ``gray`` (default: rgb, gray for a 1-channel input).
  ``layout=``       ``nchw`` | ``nhwc`` (default: read from the model input's shape).
  ``dtype=``        ``float32`` | ``float16`` | ``uint8`` (default: the model input's; uint8 is the
                    raw pixels, with no range, mean or std).
  ``interpolation=``  ``bilinear`` (default) | ``bicubic`` | ``nearest`` | ``lanczos`` (PIL's).

EXIF orientation is not applied (neither PIL nor torchvision's loaders apply it).
The folder is walked in sorted order, sub-folders included (a class-per-folder layout works);
hidden files and folders (``.DS_Store``) are skipped, any other file that is not an image is refused,
and so is an image Pillow cannot decode (a truncated JPEG) or one over ``MAX_PIXELS``. Images are
decoded one at a time into one batch, so memory does not grow with the number of images.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from edgekit.core.input_spec import InputSpec
from edgekit.core.errors import InputFileError, UsageError, first_line
from edgekit.formats.limits import MAX_CALIB_FILES

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
MAX_PIXELS = 64_000_000  # per image, before it is decoded (a decompression bomb is refused)
MAX_IMAGES = 1_000_000
MAX_SIDE = 16384
KEYS = ("resize", "crop", "range", "mean", "std", "color", "layout", "dtype", "interpolation")
COLORS = ("rgb", "bgr", "gray")
LAYOUTS = ("nchw", "nhwc")
IMAGE_DTYPES = ("float32", "float16", "uint8")
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "lanczos")
MAX_TOML_BYTES = 64 * 1024


# The decoder a suffix allows, and the bytes its files start with: an image is opened only when its
# name and its content agree, and only by that decoder (Pillow's other plug-ins, such as EPS, which
# starts Ghostscript, or TIFF, never see a calibration file).
DECODERS = {".jpg": "JPEG", ".jpeg": "JPEG", ".png": "PNG", ".bmp": "BMP", ".webp": "WEBP"}
_MAGIC = {"JPEG": (b"\xff\xd8\xff",), "PNG": (b"\x89PNG\r\n\x1a\n",), "BMP": (b"BM",)}


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES


def _content_format(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    return next((fmt for fmt, magics in _MAGIC.items() if any(head.startswith(m) for m in magics)), None)


def open_image(path: Path):
    """``path`` opened by the one decoder its suffix names, after its first bytes prove it is that
    kind of file; anything else is refused in one line (InputFileError)."""
    from PIL import Image

    expected = DECODERS.get(path.suffix.lower())
    if expected is None:
        raise InputFileError(f"calibration image {path}: {path.suffix or 'no suffix'} is not an image suffix edgekit "
                             f"reads ({', '.join(IMAGE_SUFFIXES)})")
    with open(path, "rb") as handle:
        head = handle.read(16)
    found = _content_format(head)
    if found != expected:
        what = f"a {found} file" if found else "not a PNG, JPEG, BMP or WebP file (by its first bytes)"
        raise InputFileError(f"calibration image {path} is named {path.suffix} but is {what}; "
                             f"give it the suffix of its content or convert it to {expected}")
    img = Image.open(path, formats=[expected])
    if img.format != expected:  # a decoder answering for another format is refused too
        img.close()
        raise InputFileError(f"calibration image {path} decoded as {img.format}, not {expected}")
    return img


# ---------------------------------------------------------------------------------------------
# the declaration


@dataclass(frozen=True)
class ImagePreprocess:
    """What ``--calib-preprocess`` declares; sizes are (height, width), ``resize`` an int for
    "the shorter side"."""

    resize: int | tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    range: tuple[float, float] = (0.0, 1.0)
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    color: str | None = None
    layout: str | None = None
    dtype: str | None = None
    interpolation: str = "bilinear"
    given: tuple[str, ...] = ()  # the keys the user set

    def __post_init__(self) -> None:
        for name, allowed in (("color", COLORS), ("layout", LAYOUTS), ("dtype", IMAGE_DTYPES)):
            value = getattr(self, name)
            if value is not None and value not in allowed:
                raise UsageError(f"--calib-preprocess {name}={value}: choose one of {', '.join(allowed)}")
        if self.interpolation not in INTERPOLATIONS:
            raise UsageError(f"--calib-preprocess interpolation={self.interpolation}: "
                             f"choose one of {', '.join(INTERPOLATIONS)}")
        low, high = self.range
        if not (math.isfinite(low) and math.isfinite(high) and low < high and max(abs(low), abs(high)) <= 1e6):
            raise UsageError(f"--calib-preprocess range={low:g}:{high:g}: give LOW:HIGH with LOW < HIGH, e.g. 0:1 or -1:1")
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) not in (1, 3) or not all(math.isfinite(v) and abs(v) <= 1e6 for v in values):
                raise UsageError(f"--calib-preprocess {name}: give one value or three (R:G:B), finite numbers")
        if not all(v > 0 for v in self.std):
            raise UsageError("--calib-preprocess std: every value must be above 0")
        if isinstance(self.resize, int) and self.crop is not None and max(self.crop) > self.resize:
            raise UsageError(f"--calib-preprocess crop={_size(self.crop)} is larger than resize={self.resize} "
                             "(the shorter side after resizing)")
        if isinstance(self.resize, tuple) and self.crop is not None and \
                (self.crop[0] > self.resize[0] or self.crop[1] > self.resize[1]):
            raise UsageError(f"--calib-preprocess crop={_size(self.crop)} does not fit in resize={_size(self.resize)}")
        if self.dtype == "uint8" and {"range", "mean", "std"} & set(self.given):
            raise UsageError("--calib-preprocess dtype=uint8 feeds the raw pixels: drop range, mean and std")


def _size(hw) -> str:
    return f"{hw[0]}x{hw[1]}" if hw[0] != hw[1] else str(hw[0])


def _side(key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIDE:
        raise UsageError(f"--calib-preprocess {key}={value!r}: sizes are whole pixels, 1 to {MAX_SIDE}")
    return value


def _hw(key: str, value, allow_side: bool) -> int | tuple[int, int]:
    """``224`` / ``"224"`` (one side), ``"224x200"`` / ``[224, 200]`` (height x width)."""
    if isinstance(value, str):
        parts = value.lower().split("x")
        if not all(p.strip().isdigit() for p in parts) or len(parts) not in (1, 2):
            raise UsageError(f"--calib-preprocess {key}={value}: give S or HxW in pixels, e.g. 224 or 224x224")
        value = [int(p) for p in parts] if len(parts) == 2 else int(parts[0])
    if isinstance(value, (list, tuple)):
        if len(value) != 2:
            raise UsageError(f"--calib-preprocess {key}: give S or [H, W]")
        return (_side(key, value[0]), _side(key, value[1]))
    side = _side(key, value)
    return side if allow_side else (side, side)


def _numbers(key: str, value) -> tuple[float, ...]:
    if isinstance(value, str):
        value = [v for v in value.split(":")]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise UsageError(f"--calib-preprocess {key}: give numbers separated by ':' (e.g. 0.485:0.456:0.406)")
    out = []
    for item in value:
        try:
            if isinstance(item, bool):
                raise ValueError
            out.append(float(item))
        except (TypeError, ValueError):
            raise UsageError(f"--calib-preprocess {key}: {str(item)[:40]!r} is not a number") from None
    return tuple(out)


def _word(key: str, value) -> str:
    if not isinstance(value, str):
        raise UsageError(f"--calib-preprocess {key}: give a word, not {value!r}"[:160])
    return value.strip().lower()


def make_preprocess(values: dict) -> ImagePreprocess:
    unknown = sorted(k for k in values if k not in KEYS)
    if unknown:
        raise UsageError(f"--calib-preprocess does not take {', '.join(map(str, unknown))[:120]}; "
                         f"it takes: {', '.join(KEYS)}")
    fields: dict = {"given": tuple(sorted(values))}
    for key, value in values.items():
        if key == "resize":
            fields[key] = _hw(key, value, allow_side=True)
        elif key == "crop":
            fields[key] = _hw(key, value, allow_side=False)
        elif key == "range":
            pair = _numbers(key, value)
            if len(pair) != 2:
                raise UsageError("--calib-preprocess range: give LOW:HIGH, e.g. 0:1")
            fields[key] = pair
        elif key in ("mean", "std"):
            fields[key] = _numbers(key, value)
        else:
            fields[key] = _word(key, value)
    return ImagePreprocess(**fields)


def parse_preprocess(text: str | os.PathLike | ImagePreprocess | None) -> ImagePreprocess | None:
    """``--calib-preprocess``: ``key=value,key=value`` or a TOML file of the same keys (top level or
    a ``[preprocess]`` table)."""
    if text is None or isinstance(text, ImagePreprocess):
        return text
    raw = os.fspath(text)
    if raw.lower().endswith(".toml") or ("=" not in raw and Path(raw).is_file()):
        from edgekit.core.fileio import read_toml

        path = Path(raw)
        if not path.is_file():
            raise InputFileError(f"--calib-preprocess file not found: {path}")
        doc = read_toml(path, "--calib-preprocess file", max_bytes=MAX_TOML_BYTES)
        table = doc.get("preprocess", doc) if isinstance(doc.get("preprocess"), dict) else doc
        return make_preprocess(dict(table))
    values: dict = {}
    for part in raw.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise UsageError(f"--calib-preprocess {part.strip()[:60]!r}: write key=value pairs separated by commas, "
                             "e.g. resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225")
        if key in values:
            raise UsageError(f"--calib-preprocess gives {key} twice")
        values[key] = value.strip()
    if not values:
        raise UsageError("--calib-preprocess is empty: e.g. resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225")
    return make_preprocess(values)


# ---------------------------------------------------------------------------------------------
# the declaration, fitted to one model input


@dataclass(frozen=True)
class ImagePlan:
    """Everything settled: what one image becomes, as the model input ``spec`` takes it."""

    spec_name: str
    resize: int | tuple[int, int] | None
    crop: tuple[int, int]
    range: tuple[float, float]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    color: str
    layout: str
    dtype: str
    interpolation: str

    @property
    def channels(self) -> int:
        return 1 if self.color == "gray" else 3

    @property
    def sample_shape(self) -> tuple[int, ...]:
        h, w = self.crop
        return (self.channels, h, w) if self.layout == "nchw" else (h, w, self.channels)

    def describe(self) -> dict:
        out = asdict(self)
        out.pop("spec_name")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}

    def load(self, path: Path) -> np.ndarray:
        """One image as the model takes it (no batch axis)."""
        from PIL import Image

        try:
            with open_image(path) as img:
                if img.width * img.height > MAX_PIXELS:
                    raise InputFileError(f"calibration image {path} is {img.width}x{img.height} pixels "
                                         f"(over {MAX_PIXELS:,}); resize it first")
                img.load()
                rgb = img.convert("L" if self.color == "gray" else "RGB")
        except InputFileError:
            raise
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - PIL raises OSError, SyntaxError, ValueError, DecompressionBombError...
            raise InputFileError(f"calibration image {path} cannot be decoded ({first_line(exc, 160)})") from None
        rgb = self._resized(rgb, Image, path)
        width, height = rgb.size
        ch, cw = self.crop
        top, left = int(round((height - ch) / 2.0)), int(round((width - cw) / 2.0))
        pixels = np.asarray(rgb, dtype=np.uint8)
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        pixels = pixels[top:top + ch, left:left + cw]
        if self.color == "bgr":
            pixels = pixels[:, :, ::-1]
        if self.dtype == "uint8":
            values = pixels
        else:
            low, high = self.range
            values = np.float32(low) + pixels.astype(np.float32) / np.float32(255.0) * np.float32(high - low)
            mean = np.asarray(self.mean, dtype=np.float32)
            std = np.asarray(self.std, dtype=np.float32)
            values = (values - mean) / std
        if self.layout == "nchw":
            values = values.transpose(2, 0, 1)
        return np.ascontiguousarray(values, dtype=self.dtype)

    def _resized(self, img, Image, path: Path):
        resample = getattr(Image.Resampling, self.interpolation.upper())
        width, height = img.size
        ch, cw = self.crop
        if isinstance(self.resize, tuple):
            size = (self.resize[1], self.resize[0])
        elif isinstance(self.resize, int):
            size = _shorter_side(width, height, self.resize)
        elif cw / width >= ch / height:  # cover the crop: the side that needs more scaling sets it
            size = (cw, max(ch, int(cw * height / width)))
        else:
            size = (max(cw, int(ch * width / height)), ch)
        if size != (width, height):
            img = img.resize(size, resample)
        if img.size[0] < cw or img.size[1] < ch:
            raise InputFileError(f"calibration image {path} resized to {img.size[1]}x{img.size[0]} is smaller than "
                                 f"the crop {ch}x{cw}: give a larger resize=")
        return img


def _shorter_side(width: int, height: int, side: int) -> tuple[int, int]:
    """torchvision's Resize(int): the shorter side to ``side``, the longer one truncated in proportion."""
    if width <= height:
        return side, int(side * height / width)
    return int(side * width / height), side


def plan_for(preprocess: ImagePreprocess, specs: tuple[InputSpec, ...]) -> ImagePlan:
    """Fit the declaration to the model's one image input; refuse what cannot fit, in one line."""
    if len(specs) != 1:
        raise UsageError(f"a folder of images calibrates a model with one input; this one has "
                         f"{len(specs)} ({', '.join(s.name for s in specs)}): give .npz files with one array per input")
    spec = specs[0]
    shape = tuple(spec.shape)
    if len(shape) != 4:
        raise UsageError(f"a folder of images calibrates an image input (N, C, H, W or N, H, W, C); "
                         f"input {spec.name!r} has {len(shape)} dimensions {_shape(shape)}")
    layout = preprocess.layout or _layout(shape)
    c_axis, h_axis, w_axis = (1, 2, 3) if layout == "nchw" else (3, 1, 2)
    channels = shape[c_axis]
    color = preprocess.color or ("gray" if channels == 1 else "rgb")
    want = 1 if color == "gray" else 3
    if channels is not None and channels != want:
        raise UsageError(f"input {spec.name!r} {_shape(shape)} takes {channels} channel(s) in {layout.upper()}; "
                         f"color={color} makes {want}" + ("" if preprocess.layout else " (set layout=nchw|nhwc?)"))
    for name in ("mean", "std"):
        values = getattr(preprocess, name)
        if len(values) not in (1, want):
            raise UsageError(f"--calib-preprocess {name} has {len(values)} values; {color} images have {want} channel(s)")
    crop = preprocess.crop
    if crop is None:
        if shape[h_axis] is not None and shape[w_axis] is not None:
            crop = (shape[h_axis], shape[w_axis])
        elif isinstance(preprocess.resize, tuple):
            crop = preprocess.resize
        else:
            raise UsageError(f"input {spec.name!r} {_shape(shape)} has no fixed height and width: "
                             "give --calib-preprocess crop=HxW")
    for axis, got in ((h_axis, crop[0]), (w_axis, crop[1])):
        if shape[axis] is not None and shape[axis] != got:
            raise UsageError(f"--calib-preprocess makes {crop[0]}x{crop[1]} images; input {spec.name!r} "
                             f"takes {_shape(shape)} ({layout.upper()}): set crop={shape[h_axis]}x{shape[w_axis]}")
    if isinstance(preprocess.resize, int) and max(crop) > preprocess.resize:
        raise UsageError(f"--calib-preprocess resize={preprocess.resize} is smaller than the crop {crop[0]}x{crop[1]}")
    dtype = preprocess.dtype or spec.dtype
    if dtype not in IMAGE_DTYPES:
        raise UsageError(f"input {spec.name!r} takes {spec.dtype}; images become float32, float16 or uint8")
    if dtype != spec.dtype:
        raise UsageError(f"--calib-preprocess dtype={dtype}, but input {spec.name!r} takes {spec.dtype}")
    if dtype == "uint8" and {"range", "mean", "std"} & set(preprocess.given):
        raise UsageError(f"input {spec.name!r} takes uint8: the raw pixels, with no range, mean or std")
    return ImagePlan(spec.name, preprocess.resize, tuple(crop), preprocess.range, preprocess.mean, preprocess.std,
                     color, layout, dtype, preprocess.interpolation)


def _layout(shape) -> str:
    first, last = shape[1], shape[3]
    if last in (1, 3) and first not in (1, 3):
        return "nhwc"
    return "nchw"


def _shape(shape) -> str:
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"


# ---------------------------------------------------------------------------------------------
# the folder


def scan_images(root: Path) -> tuple[tuple[Path, ...], Path | None]:
    """(every image under ``root`` in sorted order, the first other file) (hidden entries skipped)."""
    if root.is_file():
        return ((root,), None) if is_image(root) else ((), root)

    found: list[Path] = []
    foreign = None
    seen = 0
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        seen += len(names) + len(dirs)
        if seen > MAX_CALIB_FILES:  # before a stat or a header read per file
            raise InputFileError(f"calibration folder {root} holds over {MAX_CALIB_FILES:,} files and folders; "
                                 "a few hundred representative images are enough")
        for name in sorted(names):
            path = Path(folder) / name
            if name.startswith(".") or not path.is_file():
                continue
            if not is_image(path):
                foreign = foreign or path
                continue
            found.append(path)
            if len(found) > MAX_IMAGES:
                raise InputFileError(f"calibration folder {root} holds over {MAX_IMAGES:,} images; "
                                     "a few hundred representative ones are enough")
    return tuple(found), foreign


def image_files(root: Path) -> tuple[Path, ...]:
    """Every image under ``root`` in sorted order; a folder that also holds other files is refused."""
    found, foreign = scan_images(root)
    if found and foreign is not None:
        raise InputFileError(
            f"calibration folder {root} mixes images with other files: {foreign.relative_to(root)} is not an "
            f"image ({', '.join(IMAGE_SUFFIXES)}); move it out (hidden files are skipped)")
    return found


def check_headers(files: tuple[Path, ...]) -> None:
    """Every file opens as an image (its header only: cheap); decoding errors come with the pass."""
    for path in files:
        try:
            with open_image(path) as img:
                width, height = img.size
        except (MemoryError, InputFileError):
            raise
        except Exception as exc:  # noqa: BLE001 - UnidentifiedImageError, DecompressionBombError, OSError...
            raise InputFileError(f"calibration image {path} is not an image Pillow can read "
                                 f"({first_line(exc, 160)})") from None
        if width * height > MAX_PIXELS:
            raise InputFileError(f"calibration image {path} is {width}x{height} pixels (over {MAX_PIXELS:,}); resize it first")


@dataclass(frozen=True)
class ImageCalibrationSet:
    files: tuple[Path, ...]
    specs: tuple[InputSpec, ...]
    plan: ImagePlan
    batch_size: int = 32
    max_samples: int | None = None
    fixed_batch: bool = False  # the model takes exactly batch_size images

    @property
    def spec(self) -> InputSpec:
        return self.specs[0]

    @property
    def settings(self) -> dict:
        """What the samples depend on besides the files' contents (the range cache's key)."""
        return {"kind": "images", "preprocess": self.plan.describe()}

    def _files(self) -> tuple[Path, ...]:
        files = self.files if self.max_samples is None else self.files[: self.max_samples]
        return files[: len(files) - len(files) % self.batch_size] if self.fixed_batch else files

    def skipping(self, count: int) -> "ImageCalibrationSet":
        """The same set without its first ``count`` images (their files are not read)."""
        import dataclasses

        kept = self._files()[count:]
        return dataclasses.replace(self, files=kept, max_samples=None)

    def feeds(self) -> Iterator[dict[str, np.ndarray]]:
        files = self._files()
        for start in range(0, len(files), self.batch_size):
            part = files[start:start + self.batch_size]
            batch = np.empty((len(part), *self.plan.sample_shape), dtype=self.plan.dtype)
            for i, path in enumerate(part):
                batch[i] = self.plan.load(path)
            if batch.dtype.kind == "f" and not np.isfinite(batch).all():
                raise InputFileError(f"calibration images {part[0]}...: the preprocessing made NaN or Inf values")
            yield {self.spec.name: batch}

    def batches(self) -> Iterator[np.ndarray]:
        for feed in self.feeds():
            yield feed[self.spec.name]

    def count(self) -> int:
        return len(self._files())


def open_images(root: Path, specs: tuple[InputSpec, ...], preprocess, batch_size: int,
                max_samples: int | None) -> ImageCalibrationSet:
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise UsageError("calibrating from images needs Pillow (pip install pillow)") from None
    declared = parse_preprocess(preprocess)
    if declared is None:
        raise UsageError(
            f"calibration data {root} is images: declare how the model takes them with --calib-preprocess, e.g. "
            "resize=256,crop=224,mean=0.485:0.456:0.406,std=0.229:0.224:0.225 (see edgekit quantize --help)")
    plan = plan_for(declared, specs)
    files = image_files(root)
    if not files:
        raise InputFileError(f"calibration folder {root} holds no images")
    check_headers(files if max_samples is None else files[:max_samples])
    fixed = specs[0].shape[0] is not None
    if fixed:
        batch_size = specs[0].shape[0]
        if min(len(files), max_samples or len(files)) < batch_size:
            raise InputFileError(f"calibration folder {root} holds {len(files)} image(s); input {specs[0].name!r} "
                                 f"takes batches of {batch_size}")
    return ImageCalibrationSet(files, specs, plan, batch_size, max_samples, fixed)
