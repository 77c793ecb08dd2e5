"""Names that come from inputs are inert wherever trainperf writes them (issue 30): the report
page runs no script whatever the names, report.md opens no tag, the terminal receives no escape
sequence, and a generated sbatch script runs no command it was not asked to."""

from __future__ import annotations

import html.parser
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainperf.cli.main import main
from trainperf.records import RunRecord, StepRecord
from trainperf.records.jsonl import write_run
from trainperf.safe_text import REPORT_CSP, html_text, markdown_text, terminal_text
from trainperf.specs.workload_file import workload_from_dict

# The audit's payloads (issue 30), each a run name or directory name.
PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    '"><svg onload=alert(3)>',
    "\x1b]0;PWNED\x07\x1b[2Jforged\nline",
    "[click](javascript:alert(4)) | x |\n| y",
    "$\\foo{$ $x$",
    "\u202eevil\u2028next",
]

# Text: any code point (control characters, markup, surrogates excluded by utf-8 encoding).
names = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40)


def workload(n: int):
    return workload_from_dict({
        "model": {"preset": "llama3-8b"}, "hardware": {"device": "h100-sxm", "num_devices": n},
        "parallel": {"fsdp": n}, "training": {"seq_len": 4096, "global_batch": 2 * n, "micro_batch": 2,
                                              "precision": "bf16"}})


def hostile_runs(root: Path) -> Path:
    """One directory per payload, all on 8 devices (so all but the first are "not in the sweep"),
    and one on 16 devices: the sweep sentence, the tables, headings and figures all name them."""
    sweep = root / "sweep"
    for i, name in enumerate([*PAYLOADS, "base16"]):
        d = sweep / f"r{i}"
        d.mkdir(parents=True)
        n = 16 if name == "base16" else 8
        steps = [StepRecord(step=k + 1, step_time_s=3.0 if k == 0 else 1.0 + 0.1 * (n == 16)) for k in range(6)]
        write_run(RunRecord("bench", steps, workload(n), {"name": name}), d / "steps.jsonl")
    return sweep


class _Page(html.parser.HTMLParser):
    """Every tag and attribute of a page, and its text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _no_active_content(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    allowed = {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "b", "nav", "a",
               "div", "table", "thead", "tbody", "tr", "th", "td", "span", "figure", "img", "figcaption", "ul",
               "li"}
    for tag, attrs in p.tags:
        assert tag in allowed, tag
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "img":
            assert str(attrs["src"]).startswith("data:image/png;base64,"), attrs
        if tag == "a":
            assert str(attrs["href"]).startswith("#"), attrs
    return p


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    pytest.importorskip("matplotlib")
    from trainperf.report import build_report

    root = tmp_path_factory.mktemp("hostile")
    return build_report([hostile_runs(root)], root / "out", use_published=False)


def test_the_report_page_runs_no_script_whatever_the_names(hostile_report):
    page = hostile_report.html_path.read_text(encoding="utf-8")
    p = _no_active_content(page)
    csp = [a for t, a in p.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [{"http-equiv": "Content-Security-Policy", "content": REPORT_CSP}]
    assert "script-src 'none'" in REPORT_CSP and "default-src 'none'" in REPORT_CSP
    text = "".join(p.text)
    # the "not in the sweep" sentence (the audit's finding) names them, as text
    sentence = text[text.index("Not in the sweep"):].split("\n")[0]
    for name in PAYLOADS[1:]:
        assert terminal_text(name) in sentence
    assert "<script>alert(1)</script>" in text  # shown as written, never as a tag
    assert "\x1b" not in page and "\u202e" not in page


def test_report_md_opens_no_tag_link_or_row(hostile_report):
    md = hostile_report.markdown_path.read_text(encoding="utf-8")
    assert "\x1b" not in md and not re.search(r"(?<!\\)<(script|img|svg)", md)
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    p = _Page()
    p.feed(rendered)
    for tag, attrs in p.tags:
        assert tag not in ("script", "svg", "iframe"), tag
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        if tag == "a":
            raise AssertionError(f"a link was made: {attrs}")
        if tag == "img":
            assert re.fullmatch(r"run\d\d-[A-Za-z0-9._-]+\.png|sweep\d\d\.png|runs-overlaid\d\d\.png|predicted-vs-measured\.png",
                                str(attrs["src"])), attrs
    assert "<script>alert(1)</script>" in "".join(p.text)


def test_the_terminal_gets_no_escape_sequence_and_no_forged_line(hostile_report, capsys):
    runs = Path(hostile_report.out_dir).parent / "sweep"
    for argv in (["compare", str(runs / "r3"), str(runs / "r0")],
                 ["report", str(runs / "r3"), str(runs / "r0"), "--out",
                  str(Path(hostile_report.out_dir).parent / "again"), "--no-published", "--no-predict"]):
        assert main(argv) == 0
        out, err = capsys.readouterr()
        for stream in (out, err):
            assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream
            assert not re.search(r"^line\b", stream, re.M), stream  # the name's newline forged no line
        if argv[0] == "report":
            assert "\\x1b]0;PWNED\\x07\\x1b[2Jforged\\nline" in out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names)
def test_each_escaper_keeps_any_text_inert(name):
    h = html_text(name)
    assert "<" not in h and ">" not in h and '"' not in h and "'" not in h
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", h)
    t = terminal_text(name)
    assert not re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]", t)
    m = markdown_text(name)
    assert "\n" not in m and not re.search(r"(?<!\\)[<>|\[\]`*_]", m.replace("\\\\", "")), m


def test_a_named_run_is_shown_not_sent_by_every_printing_command(tmp_path, capsys):
    d = tmp_path / "r"
    d.mkdir()
    write_run(RunRecord("bench", [StepRecord(step=k, step_time_s=1.0) for k in range(1, 4)], workload(8),
                        {"name": PAYLOADS[3]}), d / "steps.jsonl")
    for argv in (["compare", str(d)], ["parse", str(d / "steps.jsonl")]):
        main(argv)
        out, err = capsys.readouterr()
        assert "\x1b" not in out + err and "\x07" not in out + err, argv


# ------------------------------------------------------------------------------ sbatch script
def _script(**values) -> list[str]:
    from trainperf.measure.launch import SlurmSpec, sbatch_script

    values = {"partition": "gpu", "account": "acct", **values}
    out = values.pop("out_dir", "/scratch/run")
    spec = SlurmSpec(nodes=2, gpus_per_node=8, config_path=f"{out}/run_config.json", out_dir=out, **values)
    return sbatch_script(spec, python="/opt/py 3/bin/python").splitlines()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(["job_name", "time_limit", "partition", "account", "out_dir"]),
       value=st.one_of(names, st.sampled_from(["x\ntouch PWNED", "00:10:00\ntouch PWNED", "a;b", "$(id)", "`id`",
                                               "/tmp/a b", "/tmp/a\rb", '/tmp/"q"', "/tmp/50%", "1-00:00:00"])))
def test_any_value_is_refused_or_written_inside_its_own_line(field, value):
    """Whatever the value: a one-line refusal naming the flag, or the same script with the value
    inside its own line: an ``#SBATCH --key=`` line keeps its key, a shell line its words."""
    import shlex

    from trainperf.errors import SpecError

    base = _script()
    try:
        lines = _script(**{field: value})
    except SpecError as e:
        assert "\n" not in str(e) and e.field.startswith("--")
        return
    assert len(lines) == len(base)  # no line added: nothing the script was not asked to run
    for old, new in zip(base, lines, strict=True):
        if old == new:
            continue
        if old.startswith("#SBATCH"):
            assert new.split("=", 1)[0] == old.split("=", 1)[0] and "\r" not in new, (old, new)
        else:
            assert len(shlex.split(new, comments=True)) == len(shlex.split(old, comments=True)), (old, new)
    if field != "out_dir":  # a Slurm name or time is checked against Slurm's syntax: nothing to quote
        assert re.fullmatch(r"[A-Za-z0-9_.+@:=,-]+", value), value


def test_the_audit_s_injections_are_one_line_and_exit_2(tmp_path, capsys):
    for flag, value in [("--job-name", "x\ntouch PWNED"), ("--time", "00:10:00\ntouch PWNED"),
                        ("--partition", "gpu\ntouch PWNED"), ("--time", "banana"), ("--account", "a b"),
                        ("--out", str(tmp_path / "o\ntouch PWNED"))]:
        argv = ["slurm", "--nodes", "2", "--device", "h100-sxm", "--out", str(tmp_path / "run"), flag, value]
        assert main(argv) == 2, (flag, value)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{flag}=" in err, err
    assert not (tmp_path / "run").exists()


def test_every_path_in_the_script_is_quoted(tmp_path):
    lines = _script(out_dir=str(tmp_path / "a b%c"))
    out = [x for x in lines if x.startswith("#SBATCH --output=")]
    assert out == [f'#SBATCH --output="{tmp_path}/a b%%c/slurm-%j.out"']
    assert f"OUT='{tmp_path}/a b%c'" in lines
    assert any(x.startswith("srun --kill-on-bad-exit=1 '/opt/py 3/bin/python' -m") for x in lines)
    assert any(x.startswith("'/opt/py 3/bin/python' -m trainperf.measure.results") for x in lines)


@pytest.mark.parametrize(("value", "ok"), [
    ("00:30:00", True), ("30", True), ("30:15", True), ("1-0", True), ("2-12:30", True), ("7-23:59:59", True),
    ("UNLIMITED", True), ("infinite", True), ("banana", False), ("1-24", False), ("10:60", False),
    ("1:2:3:4", False), ("-5", False), ("", False), ("00:30:00 ", False)])
def test_time_limits_follow_slurm_s_formats(value, ok):
    from trainperf.errors import SpecError

    if ok:
        _script(time_limit=value)
    else:
        with pytest.raises(SpecError, match="--time"):
            _script(time_limit=value)


# ------------------------------------------------------------------------------ other name fields
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=names)
def test_a_profile_name_is_refused_or_read_back_as_written(name):
    """``calibrate-model --name``: a name the profile file can carry, which ``--stack`` reads back
    (issue 30: a newline wrote a profile its own --stack rejected)."""
    import tomllib

    from trainperf.cli.calibrate_model import PROFILE_NAME
    from trainperf.predict.stacks import Profile, profile_from_dict

    if PROFILE_NAME.fullmatch(name):
        text = Profile(name=name, description=name).to_toml()
        assert profile_from_dict(tomllib.loads(text), "x.toml").name == name
    else:
        assert "\n" in name or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+@-]{0,63}", name)


def test_a_profile_file_round_trips_any_description():
    import tomllib

    from trainperf.predict.stacks import Profile

    text = "a\nb\x7f\"c\\\x00\u2028"
    assert tomllib.loads(Profile(name="p", description=text).to_toml())["description"] == text


def test_an_error_line_shows_the_value_s_escape_sequences_not_sends_them(capsys):
    assert main(["predict", "--model", "\x1b]0;PWNED\x07\x1b[2J", "--device", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\\x1b]0;PWNED\\x07" in err
