"""lenpred.config: frozen, strict about keys, one-line errors naming the field; CLI flags from fields."""

from __future__ import annotations

import argparse
import json
from typing import Literal

import pytest
from pydantic import Field, ValidationError

from lenpred.config import Config, add_arguments, from_arguments
from lenpred.errors import ConfigError


class Inner(Config):
    rate: float = Field(1.0, gt=0, description="requests per second")
    process: Literal["poisson", "gamma"] = "poisson"
    cap: int | None = None
    verbose: bool = False


class Outer(Config):
    inner: Inner = Inner()
    name: str = "x"
    arms: tuple[Inner, ...] = ()


def test_nested_unknown_key_names_path_and_valid_keys():
    with pytest.raises(ConfigError) as e:
        Outer.from_dict({"inner": {"rat": 2}}, "config")
    msg = str(e.value)
    assert msg.startswith("config.inner.rat: unknown key")
    assert "valid keys: rate, process, cap, verbose" in msg


def test_error_in_list_item_names_index():
    with pytest.raises(ConfigError, match=r"^config\.arms\[1\]\.rate: .*greater than 0, got -1"):
        Outer.from_dict({"arms": [{"rate": 1}, {"rate": -1}]}, "config")


def test_frozen_and_replace_validates():
    c = Outer.from_dict({"inner": {"rate": 2.5}})
    with pytest.raises(ValidationError):
        c.name = "y"  # type: ignore[misc]
    assert c.replace(name="y").name == "y" and c.name == "x"
    with pytest.raises(ConfigError):
        c.replace(name=["not", "a", "string"])


def test_load_reports_json_position(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"name": "a",\n "inner": {"rate": }}')
    with pytest.raises(ConfigError, match=r"line 2, column"):
        Outer.load(p)
    with pytest.raises(ConfigError, match="is a directory"):
        Outer.load(tmp_path)
    p.write_text(json.dumps({"inner": {"rate": 3}}))
    assert Outer.load(p).inner.rate == 3.0


def test_round_trip_json():
    c = Outer.from_dict({"inner": {"rate": 2, "cap": 7}, "arms": [{"process": "gamma"}]})
    assert Outer.from_dict(json.loads(c.to_json())) == c
    assert c.to_dict()["arms"][0]["process"] == "gamma"


def test_cli_flags_from_fields():
    p = argparse.ArgumentParser()
    names = add_arguments(p, Inner)
    assert names == ["rate", "process", "cap", "verbose"]
    a = p.parse_args(["--rate", "2", "--process", "gamma", "--cap", "none", "--verbose"])
    c = from_arguments(Inner, a)
    assert c == Inner(rate=2.0, process="gamma", cap=None, verbose=True)
    assert from_arguments(Inner, p.parse_args([])) == Inner()
    with pytest.raises(SystemExit):  # Literal -> argparse choices
        p.parse_args(["--process", "uniform"])
    with pytest.raises(ConfigError, match="rate"):  # the model still validates what argparse let through
        from_arguments(Inner, p.parse_args(["--rate", "0"]))
    assert "requests per second" in p.format_help()


def test_direct_construction_gets_the_one_line_error():
    with pytest.raises(ConfigError, match=r"^Inner\.rate: .*greater than 0, got 0 -- fix: set Inner\.rate to a value > 0$"):
        Inner(rate=0)
    with pytest.raises(ConfigError, match=r"^Outer\.inner\.bogus: unknown key"):
        Outer(inner={"bogus": 1})


@pytest.mark.parametrize(("data", "fix"), [
    ({"inner": {"rate": -1}}, "fix: set config.inner.rate to a value > 0"),
    ({"inner": {"process": "uniform"}}, "fix: use one of: 'poisson' or 'gamma'"),
    ({"inner": {"cap": "many"}}, "fix: set config.inner.cap to a whole number"),
    ({"inner": {"verbose": "perhaps"}}, "fix: set config.inner.verbose to true or false"),
    ({"name": 3}, "fix: set config.name to text"),
])
def test_pydantic_errors_name_the_fix(data, fix):
    with pytest.raises(ConfigError) as e:
        Outer.from_dict(data, "config")
    assert str(e.value).endswith(fix), str(e.value)
