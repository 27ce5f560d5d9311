"""The router-side text heads (ngram, gbdt): they learn a planted law from prompt text, survive a save /
load round trip bit for bit, refuse what they cannot read; gbdt's exported trees give scikit-learn's answers;
a faster variant of a head is refused when it moves predictions beyond the tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from lenpred.errors import ConfigError, DataError
from lenpred.predictors.gbdt import FEATURE_NAMES, GBDTHead, eval_trees, export_trees, prompt_features
from lenpred.predictors.io import load_head
from lenpred.predictors.ngram import NgramHead
from lenpred.predictors.proxy_runtime import check_variant, variant_deviation
from lenpred.predictors.targets import Targets

CAP = 1024.0


def _data(n: int, seed: int) -> tuple[list[str], Targets]:
    """Long answers for prompts that ask for an essay, short ones for a one-word answer, K = 2 samples."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)
    texts = [["Answer with one word: is {i} even?", "Explain briefly what topic {i} is.",
              "Write a detailed long essay with many sections about topic {i}."][k].format(i=i)
             for i, k in enumerate(kind)]
    mu = np.array([8.0, 120.0, 700.0])[kind]
    y = np.clip(np.round(rng.normal(mu[:, None], 0.1 * mu[:, None] + 2, (n, 2))), 1, CAP)
    return texts, Targets(y, np.zeros_like(y, dtype=bool), CAP)


@pytest.mark.parametrize("cls", [NgramHead, GBDTHead])
def test_text_head_learns_and_round_trips(tmp_path, cls):
    texts, t = _data(300, 0)
    tv_texts, tv = _data(60, 1)
    head = cls().fit(texts, t, X_val=tv_texts, y_val=tv)
    probe = ["Answer with one word: is 7 even?", "Write a detailed long essay with many sections about topic 9."]
    short, long_ = head.predict(probe)
    assert short < 40 and 450 < long_ < 900  # the planted 8 and 700 tokens, up to the head's error
    d = head.predict_dist(probe)
    assert np.all(d.q10 <= d.q50) and np.all(d.q50 <= d.q90)
    point, dist = head.predict_with_dist(head.encode(probe))  # encoded once, the same answers
    np.testing.assert_allclose(point, head.predict(probe))
    np.testing.assert_allclose(dist.q90, d.q90)
    head.save(tmp_path / "h")
    back = load_head(tmp_path / "h")
    np.testing.assert_array_equal(back.predict(probe), head.predict(probe))
    assert back.input_kind == "text"


def test_text_heads_refuse_a_single_string_and_foreign_matrices():
    texts, t = _data(120, 0)
    g = GBDTHead(max_iter=20).fit(texts, t)
    with pytest.raises(DataError, match="one string"):
        g.predict("Write a poem.")
    with pytest.raises(DataError, match=f"\\(n, {len(FEATURE_NAMES)}\\)"):
        g.predict(np.zeros((1, 3), dtype=np.float32))
    n = NgramHead(n_features_log2=12).fit(texts, t)
    import scipy.sparse as sp

    with pytest.raises(DataError, match="columns"):
        n.predict(sp.csr_matrix((1, 10)))
    with pytest.raises(ConfigError, match="ngram_max"):
        NgramHead(ngram_max=5).fit(texts, t)


def test_exported_trees_match_sklearn():
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5))
    x[rng.random(x.shape) < 0.05] = np.nan  # missing values take each node's learned side
    y = 3 * np.nan_to_num(x[:, 0]) + np.sin(np.nan_to_num(x[:, 1])) + rng.normal(0, 0.1, 400)
    est = HistGradientBoostingRegressor(max_iter=30, max_leaf_nodes=9, random_state=0).fit(x, y)
    np.testing.assert_allclose(eval_trees(export_trees(est), x), est.predict(x), rtol=1e-9, atol=1e-9)


def test_prompt_features_known_values():
    f = prompt_features(["What is 2+2?\nTell me.", "Write a 500 words essay."])
    col = {n: i for i, n in enumerate(FEATURE_NAMES)}
    assert f.shape == (2, len(FEATURE_NAMES))
    assert f[0, col["n_question"]] == 1 and f[0, col["opens_what"]] == 1 and f[0, col["log_lines"]] == pytest.approx(np.log1p(1))
    assert f[1, col["count_asked"]] == 1 and f[1, col["log_count_asked"]] == pytest.approx(np.log1p(500))
    assert f[1, col["long_words"]] == 1 and f[1, col["opens_write"]] == 1
    assert f[0, col["log_chars"]] == pytest.approx(np.log1p(len("What is 2+2?\nTell me.")))


def test_variant_refused_beyond_tolerance():
    """A deliberately perturbed variant (every prediction x 1.3) is refused at 10%; the head itself passes."""
    texts, t = _data(120, 0)
    head = GBDTHead(max_iter=30).fit(texts, t)
    probe = texts[:20]
    assert variant_deviation(head.predict(probe), 1.3 * head.predict(probe)) == pytest.approx(0.3)
    with pytest.raises(ConfigError, match=r"up to 30\.0% on 20 check prompts, over the tolerance of 10\.0%"):
        check_variant(head.predict, lambda x: 1.3 * head.predict(x), probe, 0.10, "the perturbed variant")
    assert check_variant(head.predict, head.predict, probe, 0.10, "the head itself") == 0.0


@pytest.mark.parametrize("fast", [True, False])
def test_ngram_text_path_matches_the_design_matrix(monkeypatch, fast):
    """A prediction from texts (prompt by prompt, sklearn's hashing, no matrix) gives the design matrix's
    answers: repeated n-grams, a 2**10-column head where distinct n-grams collide, an empty prompt, one past
    max_chars, a batch; and without the fast hashing function (another scikit-learn), the public path."""
    import lenpred.predictors.ngram as ngram_mod

    texts, t = _data(200, 0)
    head = NgramHead(n_features_log2=10, max_chars=2000).fit(texts, t)
    if not fast:
        monkeypatch.setattr(ngram_mod, "_hash_fn", lambda: None)
    words = " ".join(f"w{i}" for i in range(400))  # 799 n-grams in 1024 columns: collisions certain
    probe = ["essay essay essay essay about topic 3", "", "Write a detailed long essay " * 80, words,
             "Answer with one word: is 4 even?"]
    assert head._counts([words]).nnz < 799  # some columns hold two n-grams
    x = head.encode(probe)
    assert x.shape[1] == 2 ** 10 + 1
    np.testing.assert_allclose(head.predict(probe), head.predict(x), rtol=1e-12)
    for p in probe:  # one at a time, as the router's inline estimator calls it
        np.testing.assert_allclose(head.predict([p]), head.predict(head.encode([p])), rtol=1e-12)


@pytest.mark.parametrize("cls", [NgramHead, GBDTHead])
def test_predict_quantiles_are_the_distributions(cls):
    texts, t = _data(200, 0)
    head = cls().fit(texts, t)
    probe = ["Answer with one word: is 7 even?", "Explain briefly what topic 2 is.", "Write a long essay."]
    point, q10, q50, q90 = head.predict_quantiles(probe)
    p, d = head.predict_with_dist(probe)
    for got, want in ((point, p), (q10, d.q10), (q50, d.q50), (q90, d.q90)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.all(q10 <= q50) and np.all(q50 <= q90) and np.all(q90 <= CAP)
