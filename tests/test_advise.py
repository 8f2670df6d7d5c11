"""python -m specdec_core.advise: refusals (one line, status 2, before any model loads) and a small real sample."""
import json

import pytest

from specdec_core.cli.advise import main, read_prompts

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("argv, message", [
    (["--draft", "org/not a model!!"], "is not a valid Hugging Face model id"),
    (["--draft", "not a model!!"], "unknown draft 'not a model!!': use one of feature"),
    (["--target", "some-org/some-model", "--draft", "feature"], "made for the bundled SmolLM2-135M-Instruct only"),
    (["--prompts", "/nonexistent/prompts.txt"], "--prompts /nonexistent/prompts.txt: cannot read it"),
    (["--tokens", "4"], "--tokens must be between 8 and 512"),
    (["--budget", "nan"], "--budget must be a positive number"),
    (["--threads", "-1"], "--threads must be between 0"),
])
def test_bad_input_gets_one_line_and_status_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_unusable_prompt_files_are_refused(tmp_path, capsys):
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    for path, message in ((binary, "not UTF-8 text"), (empty, "no prompt in it")):
        assert main(["--prompts", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    good = tmp_path / "good.txt"
    good.write_text("first\n\nsecond\nthird\n", encoding="utf-8")
    assert read_prompts(str(good), 2) == ["first", "second"]
    assert len(read_prompts(None, 4)) == 4


@pytest.mark.slow
def test_a_small_sample_prints_intervals_the_verdict_and_the_table(bundled, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Write a short poem about the sea at night.\nExplain how a refrigerator keeps food cold.\n"
                       "Give me three surprising facts about octopuses.\n", encoding="utf-8")
    out = tmp_path / "advice.json"
    assert main(["--prompts", str(prompts), "--tokens", "8", "--json", str(out)]) == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "acceptance:" in text and "(95 % CI" in text and "Wilson" in text and "position 1:" in text
    verdict = next(line for line in text.splitlines() if line.startswith("verdict: "))
    assert verdict.split(": ")[1] in ("pays here", "does not pay here", "can't tell yet — run more tokens")
    assert "interleaved rounds" in verdict and "best fixed K by the calibrated model" in text
    assert "this device (cpu), measured costs" in text and "NVIDIA H100 SXM" in text
    assert "3/6 runs" in captured.err or "6/6 runs" in captured.err        # the progress bar, on stderr
    data = json.loads(out.read_text())
    assert data["report"]["prompts"] == 3 and len(data["traces"]) == 3
    assert data["report"]["speedup"]["method"] == "interleaved rounds"
    assert all(row["predicted_speedup"] is not None for row in data["report"]["what_if"])


@pytest.mark.slow
def test_one_prompt_falls_back_on_its_bootstrap(bundled, tmp_path, capsys):
    prompts = tmp_path / "one.txt"
    prompts.write_text("Write a short poem about the sea at night.\n", encoding="utf-8")
    assert main(["--prompts", str(prompts), "--tokens", "8"]) == 0
    verdict = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: can't tell yet — run more tokens: ×") and "bootstrap over iterations" in verdict
