"""python -m specdec_core and python -m specdec_core.advise on bad input: one line on stderr (``error: …``), exit
status 2, no traceback, and every check made before a model loads (the loaders are replaced by a failure here).
The runs themselves are tested in test_bundled.py and test_advise.py."""
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specdec_core.cli import advise, command as cli


@pytest.fixture
def no_models(monkeypatch):
    """Any model load fails the test: the checks must come first."""
    def load(*a, **k):
        raise AssertionError("a model was loaded before the arguments were checked")
    monkeypatch.setattr(cli, "load_pair", load)
    monkeypatch.setattr(advise, "load_pair", load)


@pytest.fixture
def cpu_only(monkeypatch):
    """This machine as one without CUDA or MPS (whatever it really has)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def refused(main, argv, capsys) -> str:
    """Run ``main(argv)``; it must refuse with status 2 and one line on stderr. Returns that line."""
    try:
        code = main(argv)
    except SystemExit as e:           # argparse's own refusals
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


CLI = (cli.main, ["--prompt", "hi"])
ADVISE = (advise.main, [])


@pytest.mark.parametrize("tool", [CLI, ADVISE], ids=["cli", "advise"])
@pytest.mark.parametrize("device, message", [
    ("cuda", "--device cuda: CUDA is not available on this machine (available: cpu)"),
    ("cuda:1", "--device cuda:1: CUDA is not available on this machine (available: cpu)"),
    ("mps", "--device mps: MPS is not available on this machine (available: cpu)"),
    ("gpu", "--device gpu: not a device; use cpu, cuda or mps (available here: cpu)"),
    ("xla", "--device xla: not a device; use cpu, cuda or mps (available here: cpu)"),
])
def test_a_device_that_is_not_here_is_refused_up_front(tool, device, message, no_models, cpu_only, capsys):
    main, base = tool
    assert refused(main, [*base, "--device", device], capsys) == f"error: {message}"


def test_a_cuda_index_beyond_the_devices_is_refused(monkeypatch, no_models, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert "this machine has 1 CUDA device (cuda:0)" in refused(cli.main, ["--prompt", "hi", "--device", "cuda:3"],
                                                               capsys)


def unwritable_path(tmp_path) -> str:
    """A file name in a folder that cannot be written: a read-only folder, or for root (who writes anywhere)
    a file in /sys."""
    if os.geteuid() == 0:
        if not os.path.isdir("/sys/kernel"):
            pytest.skip("running as root and no /sys to refuse a write")
        return "/sys/kernel/specdec-trace.json"
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return str(ro / "trace.json")


@pytest.mark.parametrize("tool", [CLI, ADVISE], ids=["cli", "advise"])
@pytest.mark.parametrize("case", ["missing folder", "a folder", "unwritable", "empty"])
def test_a_json_path_that_cannot_be_written_is_refused_up_front(tool, case, tmp_path, no_models, capsys):
    main, base = tool
    path, message = {
        "missing folder": (str(tmp_path / "nope" / "trace.json"), f"the folder {tmp_path / 'nope'} does not exist"),
        "a folder": (str(tmp_path), "is a folder, not a file name"),
        "unwritable": (unwritable_path(tmp_path), "cannot write there"),
        "empty": ("", "--json: no file name given"),
    }[case]
    line = refused(main, [*base, "--json", path], capsys)
    assert line.startswith(f"error: --json {path}".rstrip()) and message in line
    assert sorted(os.listdir(tmp_path)) == ([] if case != "unwritable" or os.geteuid() == 0 else ["ro"])


def test_a_writable_json_path_is_left_as_it_was(tmp_path, monkeypatch, capsys):
    """The up-front check creates nothing and changes no existing file (the run writes it at the end)."""
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text("keep", encoding="utf-8")
    for path in (new, old):
        cli.check_output(str(path))
    assert not new.exists() and old.read_text(encoding="utf-8") == "keep"


@pytest.mark.parametrize("tool", [CLI, ADVISE], ids=["cli", "advise"])
@pytest.mark.parametrize("flag, name, message", [
    ("--draft", "featur", "unknown draft 'featur': use one of feature, trained, ngram, self, bundled, "
                          "a hub id (owner/name) or a local folder"),
    ("--draft", "not a model!!", "unknown draft 'not a model!!'"),
    ("--target", "bundle", "unknown target 'bundle': use bundled, a hub id (owner/name) or a local folder"),
    ("--target", "ngram", "unknown target 'ngram'"),
    ("--draft", "./no-such-draft", "--draft ./no-such-draft: no such folder"),
    ("--draft", "org/bad name", "'org/bad name' is not a valid Hugging Face model id"),
])
def test_an_unknown_model_name_lists_the_choices(tool, flag, name, message, no_models, capsys):
    main, base = tool
    assert message in refused(main, [*base, flag, name], capsys)


def test_hub_ids_and_local_folders_still_pass_the_name_check(tmp_path, monkeypatch, capsys):
    cli.check_pair("bundled", str(tmp_path))                      # a local folder
    cli.check_pair("some-org/some-model", "other-org/its-draft")  # hub ids: loading decides (network)
    import specdec_core.models.loading as models
    monkeypatch.setattr(models, "_hub_reachable", lambda timeout=3.0: False)     # as here: no network
    line = refused(cli.main, ["--prompt", "hi", "--target", "some-org/some-model", "--draft", "ngram"], capsys)
    assert "the Hugging Face Hub cannot be reached" in line


@pytest.mark.parametrize("argv, message", [
    (["--prompt", "hi", "--k", "0"], "K must be between 1 and 16"),
    (["--prompt", "hi", "--seed", "-1"], "seed must be between 0 and 9007199254740991, got -1"),
    (["--prompt", "hi", "--max-new-tokens", "99999"], "max new tokens must be between 1 and 512"),
    (["--prompt", "hi", "--temperature", "nan"], "temperature must be a number"),
    (["--prompt", "hi", "--top-p", "0"], "top-p must be in (0, 1]"),
    (["--prompt", "hi", "--k", "two"], "argument --k: invalid int value: 'two'"),
    (["--prompt", "hi", "--k-policy", "best"], "argument --k-policy: invalid choice"),
    (["--prompt", "hi", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ([], "the following arguments are required: --prompt"),
    (["--prompt", " \n "], "The prompt is empty"),
])
def test_cli_fuzzed_input_gets_one_line_and_status_2(argv, message, no_models, capsys):
    assert message in refused(cli.main, argv, capsys)


@pytest.mark.parametrize("argv, message", [
    (["--prompts", "/nonexistent/prompts.txt"], "--prompts /nonexistent/prompts.txt: cannot read it"),
    (["--prompts", "/"], "--prompts /: cannot read it"),
    (["--tokens", "many"], "argument --tokens: invalid int value: 'many'"),
    (["--budget", "inf"], "--budget must be a positive number"),
    (["--max-prompts", "0"], "--max-prompts must be between 1 and"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_advise_fuzzed_input_gets_one_line_and_status_2(argv, message, no_models, capsys):
    assert message in refused(advise.main, argv, capsys)


def test_advise_refuses_a_prompts_file_too_large_to_be_prompts(tmp_path, no_models, capsys, monkeypatch):
    monkeypatch.setattr(advise, "MAX_PROMPTS_FILE_BYTES", 100)
    big = tmp_path / "big.txt"
    big.write_text("a prompt\n" * 20, encoding="utf-8")
    assert "is larger than" in refused(advise.main, ["--prompts", str(big)], capsys)


@pytest.mark.parametrize("parser", [cli.build_parser, advise.build_parser], ids=["cli", "advise"])
def test_help_is_formatted(parser, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "%%" not in out and "usage:" in out
    if parser is advise.build_parser:
        assert "95 % intervals" in " ".join(out.split())


def test_the_installed_commands_name_themselves(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/some/venv/bin/specdec"])
    assert cli.build_parser().prog == "specdec"
    monkeypatch.setattr(sys, "argv", ["/some/venv/bin/specdec-advise"])
    assert advise.build_parser().prog == "specdec-advise"
    monkeypatch.setattr(sys, "argv", ["/repo/specdec_core/__main__.py"])
    assert cli.build_parser().prog == "python -m specdec_core"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.slow
def test_python_m_with_cuda_here_prints_one_line(tmp_path):
    """The real command in a fresh process (no monkeypatching): no traceback, one line, status 2, quickly."""
    r = subprocess.run([sys.executable, "-m", "specdec_core", "--prompt", "hi", "--device", "cuda"],
                       capture_output=True, text=True, timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: --device cuda: CUDA is not available") and r.stderr.count("\n") == 1


# --- the README's examples paste as they are, and their outputs are git-ignored -----------------------------

def readme_commands() -> list[list[str]]:
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    block = text.split("## Command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.strip().splitlines()]


def test_the_readme_command_lines_parse_and_write_ignored_files():
    root = Path(__file__).resolve().parent.parent
    commands = readme_commands()
    assert len(commands) >= 3 and any(c[2] == "specdec_core.advise" for c in commands)
    outputs = []
    for cmd in commands:
        assert cmd[:2] == [".venv/bin/python", "-m"], cmd
        args = {"specdec_core": cli, "specdec_core.advise": advise}[cmd[2]].build_parser().parse_args(cmd[3:])
        if args.json:
            outputs.append(args.json)
    assert outputs
    ignored = subprocess.run(["git", "check-ignore", *outputs], cwd=root, capture_output=True, text=True)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout")
    assert sorted(ignored.stdout.split()) == sorted(outputs)


# --- the summary: the confidence stop is a model draft's setting ------------------------------------------

def test_the_summary_names_the_confidence_stop_for_model_drafts_only(tiny_pair):
    """Prompt lookup has no confidence to stop on: its summary does not claim the setting."""
    from specdec_core import ModelDrafter, NGramDrafter, speculative_generate
    from specdec_core.config import recommended_config
    target, draft = tiny_pair
    prompt = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])

    def settings(drafter, **kw):
        trace = speculative_generate(target, drafter, prompt, recommended_config(max_new_tokens=6, **kw))
        return next(line for line in cli.summary_lines(trace) if line.startswith("settings: "))

    assert settings(NGramDrafter(), k_policy="fixed", k=3) == "settings: K = 3 (fixed), greedy"
    assert settings(ModelDrafter(draft), k_policy="fixed", k=3) == "settings: K = 3 (fixed), greedy, confidence stop 0.3"
    assert settings(ModelDrafter(draft), k_policy="heuristic", k=3, confidence_stop=0.0, temperature=0.7,
                    top_p=0.9) == "settings: K ≤ 3 (heuristic policy), temperature 0.7, top-p 0.9"


def test_the_apps_summary_names_the_confidence_stop_for_model_drafts_only(tiny_pair):
    """The page's summary label and /generate's line say the same as the CLI's settings line."""
    from components.render.summary import summary_html, summary_line
    from specdec_core import ModelDrafter, NGramDrafter, speculative_generate
    from specdec_core.config import recommended_config
    target, draft = tiny_pair
    prompt = torch.tensor([[1, 2, 3, 1, 2, 3, 1, 2]])
    cfg = recommended_config(max_new_tokens=6, k_policy="fixed", k=3)
    lookup = speculative_generate(target, NGramDrafter(), prompt, cfg)
    model = speculative_generate(target, ModelDrafter(draft), prompt, cfg)
    assert "confidence stop" not in summary_line(lookup) and "confidence stop" not in summary_html(lookup)
    assert "confidence stop 0.3" in summary_line(model) and "confidence stop 0.3" in summary_html(model)
