"""``gbdt``: gradient-boosted trees on cheap prompt features, in the style of Clairvoyant's router-side predictor.

Each prompt's raw text (as the proxy reads it) becomes ~40 numbers that cost microseconds: its length
(characters, words, lines, sentences), the share of digits, capitals, non-ASCII letters and
punctuation, code and list markers, question marks, how it opens (what / how / write / ...), and
whether it names a long form (essay, story, article, code ...), a short one (one word, yes or no,
briefly ...) or a word count ("500 words"). scikit-learn's :class:`HistGradientBoostingRegressor`
fits them with the absolute-error loss on every training sample (weighted 1 / K_i, so each prompt
counts once: the objective the bench scores), early-stopped on the validation prompts.

The fitted trees are saved as plain arrays (feature, threshold, children, leaf values per node), never
pickled; :func:`eval_trees` walks them for all trees at once in numpy (a few dozen microseconds for
one prompt, where the estimator's own ``predict`` costs ~1 ms of input checks), and a test checks
that it matches scikit-learn's ``predict``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from lenpred.errors import DataError
from lenpred.predictors.base import Inputs, Predictor, check_param
from lenpred.predictors.ngram import texts_of
from lenpred.predictors.targets import Targets

__all__ = ["GBDTHead", "prompt_features", "FEATURE_NAMES", "eval_trees", "export_trees"]

_OPENERS = ("what", "how", "why", "who", "when", "where", "which", "is", "are", "can", "could", "do", "does",
            "write", "explain", "describe", "list", "give", "create", "generate", "translate", "summarize",
            "rewrite", "tell", "make", "please", "i")
_LONG = re.compile(r"\b(essay|story|article|blog|report|letter|script|poem|song|lyrics|chapter|outline|plan|"
                   r"guide|tutorial|code|program|function|implement|detailed|in detail|step[- ]by[- ]step|"
                   r"examples?|paragraphs?|pages?|lesson|proposal|speech|description|email)\b")
_SHORT = re.compile(r"\b(one word|one sentence|yes or no|briefly|brief|short|concise|single|only the|just the|"
                    r"true or false|choose|which of|answer with|in a word|name of|how many|what is the)\b")
_WORDS = re.compile(r"\b(\d{2,5})\s*(words|word|sentences|paragraphs|lines|items|points|bullet)")
_CODE = re.compile(r"```|\bdef |\bclass |\bimport |;\s*$|\{|\}|=>|</?\w+>", re.M)
_LISTS = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022])\s", re.M)
_SENT = re.compile(r"[.!?](?:\s|$)")

FEATURE_NAMES: tuple[str, ...] = (
    "log_chars", "log_words", "log_lines", "log_sentences", "mean_word_len", "digit_share", "upper_share",
    "nonascii_share", "punct_share", "space_share", "n_question", "ends_question", "code_marks", "list_marks",
    "long_words", "short_words", "count_asked", "log_count_asked", "n_colon", "n_quotes",
    *(f"opens_{w}" for w in _OPENERS),
)


def _one(text: str, max_chars: int) -> list[float]:
    n = len(text)
    t = text[:max_chars]
    m = max(len(t), 1)
    low = t.lower()
    words = low.split()
    nw = len(words)
    first = words[0].strip(",.:;!?\"'") if words else ""
    asked = [int(g.group(1)) for g in _WORDS.finditer(low)]
    digits = sum(c.isdigit() for c in t)
    upper = sum(c.isupper() for c in t)
    nonascii = sum(not c.isascii() for c in t)
    spaces = t.count(" ") + t.count("\n")
    punct = sum(t.count(c) for c in ",.;:!?()[]\"'")
    return [
        float(np.log1p(n)), float(np.log1p(nw)), float(np.log1p(t.count("\n"))), float(np.log1p(len(_SENT.findall(t)))),
        (m - spaces) / max(nw, 1), digits / m, upper / m, nonascii / m, punct / m, spaces / m,
        float(t.count("?")), float(t.rstrip().endswith("?")), float(len(_CODE.findall(t))),
        float(len(_LISTS.findall(t))), float(len(_LONG.findall(low))), float(len(_SHORT.findall(low))),
        float(bool(asked)), float(np.log1p(max(asked))) if asked else 0.0, float(t.count(":")), float(t.count('"')),
        *(float(first == w) for w in _OPENERS),
    ]


def prompt_features(texts: Sequence[str], max_chars: int = 4000) -> np.ndarray:
    """(n, len(FEATURE_NAMES)) float32: the cheap features of each prompt text (the first ``max_chars``
    characters are read; the length features count the whole text)."""
    return np.asarray([_one(t, max_chars) for t in texts], dtype=np.float32).reshape(len(texts), len(FEATURE_NAMES))


# ---------------------------------------------------------------- the trees as arrays
_TREE_FIELDS = ("feature", "threshold", "left", "right", "leaf", "value", "missing_left")


def export_trees(est: Any) -> dict[str, np.ndarray]:
    """A fitted single-output HistGradientBoostingRegressor's trees as (T, N) arrays (padded with leaves)
    and its baseline. Reads the fitted predictors' node tables (no categorical features are used here)."""
    trees = [p[0].nodes for p in est._predictors]  # one TreePredictor per iteration (1 output)
    if any(bool(t["is_categorical"].any()) for t in trees):
        raise DataError("gbdt: categorical splits are not exported", "fit the trees on numeric features")
    n = max(len(t) for t in trees)
    out = {"feature": np.zeros((len(trees), n), np.int32), "threshold": np.zeros((len(trees), n), np.float64),
           "left": np.zeros((len(trees), n), np.int32), "right": np.zeros((len(trees), n), np.int32),
           "leaf": np.ones((len(trees), n), np.bool_), "value": np.zeros((len(trees), n), np.float64),
           "missing_left": np.zeros((len(trees), n), np.bool_)}
    for i, t in enumerate(trees):
        k = len(t)
        out["feature"][i, :k] = t["feature_idx"]
        out["threshold"][i, :k] = t["num_threshold"]
        out["left"][i, :k] = t["left"]
        out["right"][i, :k] = t["right"]
        out["leaf"][i, :k] = t["is_leaf"].astype(bool)
        out["value"][i, :k] = t["value"]
        out["missing_left"][i, :k] = t["missing_go_to_left"].astype(bool)
    out["baseline"] = np.asarray(est._baseline_prediction, dtype=np.float64).reshape(-1)[:1]
    out["depth"] = np.array([max(int(t["depth"].max()) for t in trees)], dtype=np.int32)
    return out


def eval_trees(trees: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """(n,) the sum of the trees' leaf values for each row of ``x`` (n, F), plus the baseline: every tree
    is walked at once, one level per step (a node goes left when x <= threshold, or when x is NaN and
    its missing values go left). Nodes are addressed in the flattened (T * N) tables."""
    n_trees, width = trees["feature"].shape
    flat = {k: trees[k].reshape(-1) for k in _TREE_FIELDS}
    offset = (np.arange(n_trees, dtype=np.int64) * width)[None, :]  # (1, T) each tree's first node
    node = np.broadcast_to(offset, (x.shape[0], n_trees)).copy()  # (n, T) flat index of the current node
    rows = np.arange(x.shape[0])[:, None]
    for _ in range(int(trees["depth"][0])):
        v = x[rows, flat["feature"][node]]  # (n, T)
        go_left = np.where(np.isnan(v), flat["missing_left"][node], v <= flat["threshold"][node])
        nxt = offset + np.where(go_left, flat["left"][node], flat["right"][node])
        node = np.where(flat["leaf"][node], node, nxt)
    return trees["baseline"][0] + flat["value"][node].sum(axis=1)


class GBDTHead(Predictor):
    name = "gbdt"
    input_kind = "text"

    def __init__(self, max_iter: int = 400, learning_rate: float = 0.05, max_leaf_nodes: int = 15,
                 min_samples_leaf: int = 40, l2_regularization: float = 1.0, max_chars: int = 4000,
                 seed: int = 0) -> None:
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.max_chars = max_chars  # characters read for the content features (lengths count all)
        self.seed = seed

    def _check_params(self) -> None:
        check_param(isinstance(self.max_iter, int) and self.max_iter >= 1, self.name, "max_iter", "must be >= 1")
        check_param(0 < float(self.learning_rate) <= 1, self.name, "learning_rate", "must be in (0, 1]")
        check_param(isinstance(self.max_leaf_nodes, int) and self.max_leaf_nodes >= 2, self.name, "max_leaf_nodes",
                    "must be an integer >= 2")
        check_param(isinstance(self.min_samples_leaf, int) and self.min_samples_leaf >= 1, self.name,
                    "min_samples_leaf", "must be an integer >= 1")
        check_param(float(self.l2_regularization) >= 0, self.name, "l2_regularization", "must be >= 0")
        check_param(isinstance(self.max_chars, int) and self.max_chars >= 100, self.name, "max_chars", "must be >= 100")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The (n, F) feature matrix of ``texts`` (what :meth:`predict` accepts precomputed)."""
        return prompt_features(texts_of(texts, self.name), int(self.max_chars))

    def _prepare(self, X: Any, fit: bool = False) -> Inputs:
        if isinstance(X, np.ndarray) and X.dtype.kind == "f":
            if X.ndim != 2 or X.shape[1] != len(FEATURE_NAMES):
                raise DataError(f"{self.name}: the matrix has shape {X.shape}, the head reads (n, {len(FEATURE_NAMES)})",
                                "pass texts, or the head's own encode(texts)")
            x = X
        else:
            x = self.encode(X)
        if fit:
            self.blocks_, self.side_names_, self.widths_ = None, None, {}
            self.feature_spec_ = {"text": "raw prompt", "features": "gbdt-prompt-features",
                                  "names": list(FEATURE_NAMES), "max_chars": int(self.max_chars)}
        elif list((self.feature_spec_ or {}).get("names") or FEATURE_NAMES) != list(FEATURE_NAMES):
            raise DataError(f"the {self.name} head was trained on other prompt features than this lenpred computes",
                            "retrain the head with this version of lenpred")
        return Inputs(int(x.shape[0]), x=x)

    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        assert Z.x is not None
        row, y, w = T.flat()
        kw: dict[str, Any] = {"early_stopping": False}
        val: dict[str, Any] = {}
        if Zv is not None and Tv is not None and Zv.x is not None:
            rv, yv, wv = Tv.flat()
            kw = {"early_stopping": True, "n_iter_no_change": 30, "scoring": "loss"}
            val = {"X_val": Zv.x[rv], "y_val": yv, "sample_weight_val": wv}
        est = HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=int(self.max_iter), learning_rate=float(self.learning_rate),
            max_leaf_nodes=int(self.max_leaf_nodes), min_samples_leaf=int(self.min_samples_leaf),
            l2_regularization=float(self.l2_regularization), random_state=int(self.seed), **kw)
        with threadpool_limits(1):
            est.fit(Z.x[row], y, sample_weight=w, **val)
        self.trees_ = export_trees(est)
        self.n_iter_ = int(est.n_iter_)

    def _point(self, Z: Inputs) -> np.ndarray:
        assert Z.x is not None
        return eval_trees(self.trees_, np.asarray(Z.x, dtype=np.float64))

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return dict(self.trees_), {"n_iter": self.n_iter_}

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.trees_ = {k: tensors[k] for k in (*_TREE_FIELDS, "baseline", "depth")}
        self.n_iter_ = int(info["n_iter"])
