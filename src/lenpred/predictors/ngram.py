"""``ngram``: hashed word n-grams of the prompt text -> a ridge regression. A router-side head of ~0.1 ms.

The prompt's raw text (as the proxy reads it: no chat template) is cut to its first ``max_chars``
characters and turned into hashed n-gram counts by scikit-learn's :class:`HashingVectorizer` (stateless:
nothing about the vocabulary is fitted or stored), weighted by inverse document frequency fitted on the
training prompts (:class:`TfidfTransformer`; the ``idf`` vector is saved), L2-normalised; the log of the
whole prompt's length in characters is appended as one more column. A :class:`~sklearn.linear_model.Ridge`
maps that to the prompt's median length in log1p space (standardised, as ``ridge`` does); the penalty is
the candidate with the lowest validation MAE in tokens (the training prompts' own LOO MAE when there is
no validation set is not computed: the middle candidate is used).

``X`` is a sequence of prompt texts, or the sparse matrix :meth:`NgramHead.encode` made of them.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from lenpred.errors import DataError
from lenpred.predictors.base import Inputs, Predictor, check_param
from lenpred.predictors.nn import LogScale
from lenpred.predictors.targets import Targets

__all__ = ["NgramHead", "texts_of"]

DEFAULT_ALPHAS = (0.3, 1.0, 3.0, 10.0, 30.0)


def texts_of(X: Any, name: str) -> list[str]:
    """``X`` as a list of prompt texts, or a one-line error."""
    if isinstance(X, str | bytes):
        raise DataError(f"{name}: X must be a sequence of prompt texts, got one string", "pass [text]")
    texts = list(X)
    if not all(isinstance(t, str) for t in texts):
        raise DataError(f"{name}: X must be prompt texts", "pass a list of strings")
    return texts


@functools.cache
def _hash_fn() -> Any:
    """scikit-learn's hashing of features (what :class:`HashingVectorizer` calls), or None where it moved."""
    try:
        from sklearn.feature_extraction._hashing_fast import transform
    except ImportError:  # pragma: no cover - another scikit-learn layout
        return None
    return transform


class NgramHead(Predictor):
    name = "ngram"
    input_kind = "text"

    def __init__(self, ngram_max: int = 2, n_features_log2: int = 18, max_chars: int = 4000,
                 alphas: tuple[float, ...] | None = None, min_df: int = 2) -> None:
        self.ngram_max = ngram_max  # word n-grams 1..ngram_max
        self.n_features_log2 = n_features_log2  # hashed columns: 2 ** n_features_log2
        self.max_chars = max_chars  # only the first max_chars characters are read for n-grams
        self.alphas = alphas  # ridge penalties tried (default 0.3 .. 30), picked on validation MAE
        self.min_df = min_df  # a hashed column seen in fewer training prompts gets weight 0

    def _check_params(self) -> None:
        check_param(isinstance(self.ngram_max, int) and 1 <= self.ngram_max <= 3, self.name, "ngram_max", "must be 1, 2 or 3")
        check_param(isinstance(self.n_features_log2, int) and 10 <= self.n_features_log2 <= 22, self.name,
                    "n_features_log2", "must be an integer in 10..22")
        check_param(isinstance(self.max_chars, int) and self.max_chars >= 100, self.name, "max_chars", "must be >= 100")
        a = DEFAULT_ALPHAS if self.alphas is None else self.alphas
        check_param(len(a) > 0 and all(float(v) > 0 for v in a), self.name, "alphas", "must be positive numbers")
        check_param(isinstance(self.min_df, int) and self.min_df >= 1, self.name, "min_df", "must be an integer >= 1")

    # ---------------------------------------------------------------- text -> matrix
    def _vectorizer(self) -> Any:
        from sklearn.feature_extraction.text import HashingVectorizer

        return HashingVectorizer(ngram_range=(1, int(self.ngram_max)), n_features=2 ** int(self.n_features_log2),
                                 alternate_sign=False, norm=None, lowercase=True, dtype=np.float32)

    def _counts(self, texts: Sequence[str]) -> Any:
        vec = getattr(self, "_vec", None)
        if vec is None:
            vec = self._vec = self._vectorizer()
        return vec.transform([t[: self.max_chars] for t in texts])

    def encode(self, texts: Sequence[str]) -> Any:
        """The (n, 2**k + 1) sparse design of ``texts``: idf-weighted, L2-normalised n-grams, log length."""
        self._check_fitted()
        return self._encode(texts_of(texts, self.name))

    def _encode(self, texts: list[str]) -> Any:
        """The design built straight from the hashed counts' CSR arrays (scikit-learn's normalize / hstack
        cost ~0.3 ms of input checks per call here; this is the same arithmetic)."""
        import scipy.sparse as sp

        c = self._counts(texts)  # CSR (n, 2**k): counts
        data = c.data.astype(np.float64) * self.idf_[c.indices]
        row_len = np.diff(c.indptr)
        rows = np.repeat(np.arange(len(texts)), row_len)
        norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(texts)))
        data /= np.maximum(norms, 1e-12)[rows]
        length = (np.log1p(np.array([len(t) for t in texts], dtype=np.float64)) - self.len_mu_) / self.len_sd_
        width = 2 ** int(self.n_features_log2)
        # one more column per row (the length), at the end of each row's entries
        at = c.indptr[1:]  # insert positions: the end of each row
        data = np.insert(data, at, length)
        indices = np.insert(c.indices.astype(np.int64), at, width)
        indptr = c.indptr.astype(np.int64) + np.arange(len(texts) + 1)
        return sp.csr_matrix((data, indices, indptr), shape=(len(texts), width + 1))

    def _prepare(self, X: Any, fit: bool = False) -> Inputs:
        import scipy.sparse as sp

        if fit:
            self.blocks_, self.side_names_, self.widths_ = None, None, {}
            self.feature_spec_ = {"text": "raw prompt", "vectorizer": "hashing-words", "ngram_max": int(self.ngram_max),
                                  "n_features_log2": int(self.n_features_log2), "max_chars": int(self.max_chars)}
            texts = texts_of(X, self.name)
            return Inputs(len(texts), text=texts)
        if sp.issparse(X):
            if X.shape[1] != 2 ** int(self.n_features_log2) + 1:
                raise DataError(f"{self.name}: the matrix has {X.shape[1]} columns, the head reads "
                                f"{2 ** int(self.n_features_log2) + 1}", "pass texts, or the head's own encode(texts)")
            return Inputs(int(X.shape[0]), x=X)
        texts = texts_of(X, self.name)
        return Inputs(len(texts), text=texts)  # encoded in _point (the idf is fitted after the inputs are read)

    # ---------------------------------------------------------------- fit / predict
    def _fit(self, Z: Inputs, T: Targets, Zv: Inputs | None, Tv: Targets | None) -> None:
        from sklearn.feature_extraction.text import TfidfTransformer
        from sklearn.linear_model import Ridge

        assert Z.text is not None
        counts = self._counts(Z.text)
        df = np.asarray((counts > 0).sum(axis=0)).ravel()
        idf = TfidfTransformer(smooth_idf=True, sublinear_tf=False).fit(counts).idf_
        self.idf_ = np.where(df >= self.min_df, idf, 0.0).astype(np.float32)  # (2**k,) rare columns off
        lens = np.log1p(np.array([len(t) for t in Z.text], dtype=np.float64))
        self.len_mu_, self.len_sd_ = float(lens.mean()), float(max(lens.std(), 1e-6))
        x = self._encode(Z.text)
        med = T.median()
        self.tscale_ = LogScale.fit(med, True)
        t = self.tscale_.forward(med)
        xv = self._encode(Zv.text) if Zv is not None and Zv.text is not None else None
        alphas = [float(a) for a in (DEFAULT_ALPHAS if self.alphas is None else self.alphas)]
        best: tuple[float, float, Any] | None = None
        for a in alphas:
            r = Ridge(alpha=a, solver="sparse_cg", tol=1e-5).fit(x, t)
            if xv is None or Tv is None:
                best = (0.0, a, r) if a == alphas[len(alphas) // 2] else best
                continue
            row, yv, w = Tv.flat()
            mae = float(np.average(np.abs(self.tscale_.inverse(r.predict(xv))[row] - yv), weights=w))
            if best is None or mae < best[0]:
                best = (mae, a, r)
        assert best is not None
        self.alpha_ = best[1]
        self.coef_ = np.asarray(best[2].coef_, dtype=np.float32)  # (2**k + 1,)
        self.intercept_ = float(best[2].intercept_)

    def _point(self, Z: Inputs) -> np.ndarray:
        if Z.x is None:
            return self.tscale_.inverse(self._scores(Z.text or []))
        return self.tscale_.inverse(np.asarray(Z.x @ self.coef_, dtype=np.float64).ravel() + self.intercept_)

    def _scores(self, texts: list[str]) -> np.ndarray:
        """``_encode(texts) @ coef_ + intercept_`` (log1p space, standardised), prompt by prompt, reading only
        the columns a prompt hits. The matrix path costs ~1 ms on an idle router (cold caches): the sparse
        product casts all 2**k coefficients to float64 on every call (2 MB written, 1 MB read at k = 18), and
        the vectorizer's checks, analyzer and hasher, built anew on every call, were half of what was left."""
        fast = _hash_fn()
        if fast is None:  # a scikit-learn without it: the public path, same numbers
            return np.asarray(self._encode(texts) @ self.coef_, dtype=np.float64).ravel() + self.intercept_
        an = getattr(self, "_analyzer", None)
        if an is None:
            an = self._analyzer = self._vectorizer().build_analyzer()
        width, m = 2 ** int(self.n_features_log2), int(self.max_chars)
        idf, coef = self._views()
        out = np.empty(len(texts), dtype=np.float64)
        for i, t in enumerate(texts):
            idx = fast([((f, 1) for f in an(t[:m]))], width, np.float32, False, seed=0)[0]
            dot = sq = 0.0
            # a column's count is its n-grams' (colliding ones summed); a prompt hits tens to hundreds of
            # columns: plain floats beat numpy's per-call cost here
            for j, c in Counter(idx.tolist()).items():
                w = c * idf[j]
                dot += w * coef[j]
                sq += w * w
            length = (math.log1p(len(t)) - self.len_mu_) / self.len_sd_
            out[i] = dot / max(math.sqrt(sq), 1e-12) + length * coef[width] + self.intercept_
        return out

    def _views(self) -> tuple[memoryview, memoryview]:
        """The idf and coefficients as memoryviews (an item is a Python float, with no numpy scalar made)."""
        v = getattr(self, "_mv", None)
        if v is None or v[0] is not self.idf_ or v[1] is not self.coef_:  # made once per fitted / loaded state
            v = self._mv = (self.idf_, self.coef_, memoryview(np.ascontiguousarray(self.idf_, dtype=np.float32)),
                            memoryview(np.ascontiguousarray(self.coef_, dtype=np.float32)))
        return v[2], v[3]

    def _get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return ({"idf": self.idf_, "coef": self.coef_},
                {"alpha": self.alpha_, "intercept": self.intercept_, "len_mu": self.len_mu_, "len_sd": self.len_sd_,
                 "target": self.tscale_.to_json()})

    def _set_state(self, tensors: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.idf_, self.coef_ = tensors["idf"], tensors["coef"]
        self.alpha_, self.intercept_ = float(info["alpha"]), float(info["intercept"])
        self.len_mu_, self.len_sd_ = float(info["len_mu"]), float(info["len_sd"])
        self.tscale_ = LogScale(**info["target"])
