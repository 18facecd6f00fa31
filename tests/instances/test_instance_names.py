"""One name, one instance: a built instance's name carries every parameter that differs from
its model's defaults, the catalog builds the same instance back from that name, and the
default builds keep the names the bundled files and results already use."""

from __future__ import annotations

import pytest

import slackswap
from slackswap.cli import main
from slackswap.instances.catalog import (
    BUNDLED,
    UnknownInstanceError,
    build_model,
    catalog_names,
    load,
    parse_name,
)


def test_a_non_default_build_is_not_named_as_the_default() -> None:
    default = build_model("llama-7b", "h100", "pcie5")
    longer = build_model("llama-7b", "h100", "pcie5", seq=8192, batch=1)
    assert default.ideal_step_s != longer.ideal_step_s  # two different instances ...
    assert default.name == "llama-7b@h100-pcie5"  # ... so two names
    assert longer.name == "llama-7b@h100-pcie5,seq=8192,batch=1"


@pytest.mark.parametrize(
    ("model", "kwargs", "name"),
    [
        ("gpt2-xl", {"layers": 8}, "gpt2-xl@a100-pcie4,layers=8"),
        (
            "gpt2-xl",
            {"layers": 2, "seq": 128, "batch": 1, "link_bw_Bps": 12e9},
            "gpt2-xl@a100-pcie4,layers=2,seq=128,batch=1,link-gbps=12",
        ),
        ("llama-7b", {"link_bw_Bps": 12.8e9}, "llama-7b@a100-pcie4,link-gbps=12.8"),
        ("vgg16", {"batch": 4}, "vgg16@a100-pcie4,batch=4"),
    ],
)
def test_names_carry_the_parameters_and_load_back(model: str, kwargs: dict, name: str) -> None:
    inst = build_model(model, **kwargs)
    assert inst.name == name
    back = load(name)
    assert back.name == name and back.content_hash == inst.content_hash


def test_parameters_equal_to_the_defaults_leave_the_name_alone() -> None:
    same = build_model("llama-7b", "h100", seq=4096, batch=2, layers=32, link_bw_Bps=50e9)
    assert same.name == "llama-7b@h100-pcie5"
    assert same.content_hash == build_model("llama-7b", "h100").content_hash


def test_default_builds_and_bundled_files_keep_their_names() -> None:
    for model in catalog_names():
        assert build_model(model).name == f"{model}@a100-pcie4"
    for model in BUNDLED:
        assert load(model).name == model
        assert load(f"{model}@a100-pcie4").content_hash == build_model(model).content_hash
    assert parse_name("llama-7b@h100-pcie5,seq=8192") == ("llama-7b", "h100", "pcie5")
    assert parse_name("gpt2-xl@h100") == ("gpt2-xl", "h100", None)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("gpt2-xl@a100-pcie4,width=3", "'width=3' is not a parameter"),
        ("gpt2-xl,seq", "'seq' is not a parameter"),
        ("gpt2-xl,seq=abc", "seq='abc': expected a positive integer"),
        ("gpt2-xl,layers=0", "layers='0': expected a positive integer"),
        ("gpt2-xl,link-gbps=-5", "link-gbps='-5': expected a positive number"),
        ("vgg16,seq=512", "vgg16,seq=512: vgg16 takes no --seq"),
        ("gpt2-xl,seq=64,seq=128", "seq given twice"),
    ],
)
def test_bad_parameters_are_one_line_errors(name: str, message: str) -> None:
    with pytest.raises(UnknownInstanceError, match=message):
        load(name)


def test_cli_build_names_info_shows_seq_and_batch_help_shows_defaults(tmp_path, capsys) -> None:
    out = tmp_path / "llama.json"
    argv = ["instance", "build", "llama-7b", "--gpu", "h100", "--link", "pcie5"]
    assert main([*argv, "--seq", "8192", "--batch", "1", "-o", str(out)]) == 0
    assert "llama-7b@h100-pcie5,seq=8192,batch=1" in capsys.readouterr().out
    assert slackswap.load(str(out)).name == "llama-7b@h100-pcie5,seq=8192,batch=1"

    assert main(["instance", "info", str(out)]) == 0
    info = dict(
        (line[:26].strip(), line[26:].strip()) for line in capsys.readouterr().out.splitlines()
    )
    assert info["sequence length"] == "8,192" and info["batch"] == "1" and info["layers"] == "32"
    assert info["hardware"] == "h100 / pcie5 (50 GB/s)"

    assert main(["instance", "info", "gpt2-xl@a100-pcie4,layers=2", "--json"]) == 0
    assert '"layers": 2,' in capsys.readouterr().out

    assert main(["instance", "info", "gpt2-xl,seq=0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "seq='0': expected a positive integer" in err

    with pytest.raises(SystemExit):
        main(["instance", "build", "--help"])
    text = capsys.readouterr().out
    assert "llama-7b      32 layers, seq  4096, batch 2" in text
    assert "gpt2-xl       48 layers, seq  1024, batch 8" in text
    assert "pcie4 25" in text  # the link's default bandwidth
