"""What ``attnroof trace`` traces: a factory in a Python file, a Hugging Face config built by
transformers on the meta device, or a ``torch.export``-ed program. Each gives a callable and its
example arguments; the errors are one line naming what was wrong."""

from __future__ import annotations

import copy
import importlib.util
import inspect
import sys
import warnings
from pathlib import Path
from typing import Any

from attnroof.errors import InputError

FACTORY_HELP = "FILE.py:NAME (NAME() returns the module and its example inputs), a config.json, or a .pt2"


def load(source: str, batch: int, seq: int) -> tuple[Any, tuple, dict, str]:
    """The callable, its args and kwargs, and a label, for ``source``."""
    path, _, name = source.partition(":")
    p = Path(path)
    if p.suffix == ".py":
        return _factory(p, name or "make", batch, seq)
    if p.suffix == ".pt2":
        return _exported(p)
    if p.name == "config.json" or p.suffix == ".json" or (p.is_dir() and (p / "config.json").is_file()):
        return _hf(p, batch, seq)
    raise InputError(f"trace {source!r}: not one of {FACTORY_HELP}")


def _factory(path: Path, name: str, batch: int, seq: int) -> tuple[Any, tuple, dict, str]:
    if not path.is_file():
        raise InputError(f"trace {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"attnroof_trace_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # the user's file: its own error, in one line
        raise InputError(f"trace {path}: running it raised {type(e).__name__}: {e}") from None
    make = getattr(module, name, None)
    if not callable(make):
        raise InputError(f"trace {path}:{name}: the file defines no function {name!r}")
    params = inspect.signature(make).parameters
    given = {k: v for k, v in (("batch", batch), ("seq", seq)) if k in params}
    try:
        made = make(**given)
    except Exception as e:
        raise InputError(f"trace {path}:{name}: {name}() raised {type(e).__name__}: {e}") from None
    if not isinstance(made, tuple) or len(made) not in (2, 3) or not callable(made[0]):
        raise InputError(
            f"trace {path}:{name}: {name}() must return (module, inputs) or (module, args, kwargs), "
            f"got {type(made).__name__}"
        )
    fn, args, *rest = made
    kwargs = rest[0] if rest else {}
    if isinstance(args, dict):
        args, kwargs = (), {**args, **kwargs}
    elif not isinstance(args, tuple | list):
        args = (args,)
    return fn, tuple(args), dict(kwargs), f"{path.name}:{name}"


VISION = ("vit", "deit", "beit", "dinov2", "swin", "convnext", "clip_vision_model", "siglip_vision_model")


def _hf(path: Path, batch: int, seq: int) -> tuple[Any, tuple, dict, str]:
    """A Hugging Face config built by transformers with ``torch.device("meta")``: a causal LM on
    ``input_ids`` (batch × seq), an encoder-decoder on both sides' ids, a vision model on
    ``pixel_values`` at its image size."""
    import torch

    try:
        import transformers
    except ImportError:
        raise InputError("trace of a config.json needs transformers: pip install 'attnroof[trace]'") from None
    from attnroof.errors import read_json

    file = path / "config.json" if path.is_dir() else path
    fields = read_json(file, "config", InputError)
    if not isinstance(fields, dict) or not isinstance(fields.get("model_type"), str):
        raise InputError(f"trace {file}: not a Hugging Face config (no model_type)")
    fields = {k: v for k, v in fields.items() if k != "quantization_config"}  # shapes only, no weights
    transformers.logging.set_verbosity_error()
    try:
        cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    except Exception as e:
        raise InputError(f"trace {file}: transformers cannot read it: {type(e).__name__}: {e}") from None
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if cfg.model_type in VISION:
            model = from_config(transformers.AutoModel, cfg)
            size = getattr(cfg, "image_size", 224)
            kwargs = {"pixel_values": torch.empty(batch, getattr(cfg, "num_channels", 3), size, size)}
        elif getattr(cfg, "is_encoder_decoder", False):
            model = from_config(transformers.AutoModelForSeq2SeqLM, cfg)
            ids = torch.zeros(batch, seq, dtype=torch.long)
            kwargs = {"input_ids": ids, "decoder_input_ids": ids}
        else:
            model = from_config(transformers.AutoModelForCausalLM, cfg)
            # use_cache: its prompt K and V written, as attnroof model counts them (and without a cache,
            # transformers 5 looks for packed sequences with .item(), which meta tensors cannot do)
            kwargs = {"input_ids": torch.zeros(batch, seq, dtype=torch.long), "use_cache": True}
    dtype = getattr(cfg, "torch_dtype", None) or getattr(cfg, "dtype", None)
    if isinstance(dtype, torch.dtype):
        model = model.to(dtype)
    return model, (), kwargs, file.name


IMPLEMENTATIONS = (
    {"attn_implementation": "sdpa", "experts_implementation": "grouped_mm"},
    {"attn_implementation": "sdpa"},
    {"attn_implementation": "eager", "experts_implementation": "grouped_mm"},
    {"attn_implementation": "eager"},
)
"""What transformers is asked to build, the first it accepts: SDPA (one attention operator, which
attnroof costs as its own) and grouped expert GEMMs (each expert's weights read once, as a fused
MoE kernel reads them; the batched path gathers a copy of them for every token). A model that
refuses SDPA (Gemma 2's soft-capping, gpt-oss's sinks) runs eager: its attention is products."""


def from_config(factory: Any, cfg: Any) -> Any:
    """The model of the first of :data:`IMPLEMENTATIONS` transformers accepts for ``cfg`` (each
    try on a copy: a refused one leaves its choice in the config)."""
    for kw in IMPLEMENTATIONS[:-1]:
        try:
            return factory.from_config(copy.deepcopy(cfg), **kw)
        except ValueError:  # transformers' word for "not for this architecture"
            continue
    return factory.from_config(copy.deepcopy(cfg), **IMPLEMENTATIONS[-1])


def _exported(path: Path) -> tuple[Any, tuple, dict, str]:
    import torch

    if not path.is_file():
        raise InputError(f"trace {path}: no such file")
    try:
        ep = torch.export.load(str(path))
    except Exception as e:
        raise InputError(f"trace {path}: torch.export.load cannot read it: {type(e).__name__}: {e}") from None
    if ep.example_inputs is None:
        raise InputError(f"trace {path}: the exported program keeps no example inputs to run it on")
    args, kwargs = ep.example_inputs
    return ep.module(), tuple(args), dict(kwargs), path.name
