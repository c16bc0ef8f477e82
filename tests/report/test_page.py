"""reports/index.html from a real run over records full of markup: every text is escaped,
nothing is injected, nothing runs (checked in the HTML, in the SVG plots, and in Chromium),
and the page is complete: plots, a sample of every export, quarantine examples."""

import base64
import json
import xml.etree.ElementTree as ElementTree
from html.parser import HTMLParser

import pytest

from tests.browser import ARTIFACTS, chromium_page, needs_chromium
from tests.conftest import call_item, make_rollout, message_item, output_item, write_jsonl
from tests.fixtures.hermes_rows import SYSTEM, call, cli_row, gpt, human, response
from trajectory_assets.cli import main
from trajectory_assets.exports.registry import EXPORTS

# every way a record's text could try to become markup, script or a template
HOSTILE = [
    "<script>alert('script')</script>",
    "<img src=x onerror=alert('img')>",
    '"><svg onload=alert(\'svg\')>',
    "</pre></details></div><script>alert('breakout')</script>",
    "<a href=\"javascript:alert('link')\">click</a>",
    "<iframe srcdoc=\"<script>alert('frame')</script>\"></iframe>",
    "{{ 'tem' ~ 'plated' }} {% raw %}",
    "<style>body{display:none}</style>",
]
EVIL_TOOL = "<b onmouseover=alert('tool')>lookup</b>"
EVIL_AGENT = "<i>agent</i><script>alert('agent')</script>"


def hostile_rollouts() -> list[dict]:
    rows = []
    for task, text in enumerate(HOSTILE):
        output = [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": f"thinking {text}"}]},
            call_item(EVIL_TOOL, json.dumps({"query": text}), f"c{task}"),
            output_item(f"c{task}", f"error: {text}"),
            message_item(f"answer {text}"),
        ]
        for rollout, reward in enumerate((1.0, 0.0)):
            rows.append(make_rollout(output if reward else [message_item(f"wrong {text}")],
                                     request_input=f"task {task}: {text}", reward=reward,
                                     agent_ref={"name": EVIL_AGENT}, _ng_task_index=task, _ng_rollout_index=rollout,
                                     task_type=f"<u>{task}</u>"))
    return rows


def hostile_hermes() -> dict:
    text = HOSTILE[0]
    return cli_row([SYSTEM, human(f"hermes {text}"),
                    gpt(f"<think>\n{HOSTILE[1]}\n</think>\n" + call("terminal", {"command": HOSTILE[2]})),
                    {"from": "tool", "value": response("x", "terminal", HOSTILE[3])},
                    gpt(f"done {HOSTILE[4]}")], metadata={"reward": 1.0})


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    source = root / "in"
    write_jsonl(source / "nemo.jsonl", hostile_rollouts())
    write_jsonl(source / "hermes.jsonl", [hostile_hermes()])
    # quarantined: not JSON, and JSON that is no rollout, both full of markup
    (source / "broken.jsonl").write_text(f"{HOSTILE[0]}\n" + json.dumps({"prompt": HOSTILE[3]}) + "\n")
    config = root / "config.yaml"  # every row of every export on the page
    config.write_text("report:\n  samples_per_export: 20\n")
    assert main(["run", "--source", str(source), "--storage", str(root / "out"), "--config", str(config)]) == 0
    return root / "out"


class Elements(HTMLParser):
    """Every element with its attributes, and the text the page shows."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html: str) -> Elements:
    parser = Elements()
    parser.feed(html)
    return parser


def test_record_text_is_shown_as_text_never_as_markup(hostile_run):
    html = (hostile_run / "reports" / "index.html").read_text()
    page = parse(html)
    tags = {tag for tag, _ in page.elements}
    assert not tags & {"script", "iframe", "object", "embed", "form", "svg", "base", "frame", "input"}
    assert [tag for tag, _ in page.elements].count("style") == 1  # the page's own
    for tag, attrs in page.elements:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        if "href" in attrs and tag == "a":
            assert attrs["href"].startswith(("#", "file:///")), attrs
        if "src" in attrs:
            assert tag == "img" and attrs["src"].startswith("data:image/svg+xml;base64,"), attrs
    shown = "".join(page.text)
    for text in [*HOSTILE, EVIL_TOOL, EVIL_AGENT]:
        assert text in shown, text  # visible, character for character
    assert "templated" not in shown  # record text is never a template
    csp = next(attrs["content"] for tag, attrs in page.elements if attrs.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "script-src" not in csp  # no script source is allowed


def test_plots_are_inert_svg_images_with_escaped_labels(hostile_run):
    page = parse((hostile_run / "reports" / "index.html").read_text())
    images = [attrs["src"] for tag, attrs in page.elements if tag == "img"]
    assert len(images) == 6  # rewards, pass rate, lengths, tools, DPO margins, GRPO spread
    labels = ""
    for src in images:
        svg = base64.b64decode(src.split(",", 1)[1]).decode()
        root = ElementTree.fromstring(svg)  # well-formed XML: no markup leaked out of a label
        for element in root.iter():
            tag = element.tag.rsplit("}", 1)[-1]
            assert tag not in ("script", "foreignObject", "iframe", "a"), tag
            assert not [name for name in element.attrib if name.startswith("on") or name.endswith("href")]
            labels += "".join(element.itertext())
    assert EVIL_AGENT[:20] in labels and EVIL_TOOL[:20] in labels  # drawn as text (long labels are cut)


def test_the_page_has_every_export_its_samples_and_the_quarantine(hostile_run):
    page = parse((hostile_run / "reports" / "index.html").read_text())
    manifests = {path.parent.name: json.loads(path.read_text())
                 for path in (hostile_run / "exports").glob("*/manifest.json")}
    assert sorted(manifests) == sorted(export.name for export in EXPORTS)
    # every export with rows has samples (these rollouts carry no token data: on_policy_tokens has none)
    exports = sorted(name for name, manifest in manifests.items() if sum(manifest["rows"].values()))
    sampled = [attrs["data-export"] for tag, attrs in page.elements if "data-export" in attrs]
    assert sorted(set(sampled)) == exports and len(exports) == len(EXPORTS) - 1
    shapes = {attrs["data-export"]: attrs["data-shape"] for tag, attrs in page.elements if "data-shape" in attrs}
    assert shapes["sft"] == shapes["trl_sft"] == shapes["sft_hermes"] == shapes["llama_factory"] == "chat"
    assert shapes["dpo"] == shapes["trl_dpo"] == "preference"
    assert shapes["grpo"] == shapes["trl_grpo"] == shapes["verl"] == "task"
    ids = {attrs["id"] for tag, attrs in page.elements if "id" in attrs}
    assert {"reason-invalid_json", "reason-not_a_rollout"} <= ids


def test_the_page_is_the_same_on_a_rerun(hostile_run, tmp_path):
    source, config = hostile_run.parent / "in", hostile_run.parent / "config.yaml"
    assert main(["run", "--source", str(source), "--storage", str(tmp_path), "--config", str(config)]) == 0
    assert (tmp_path / "reports" / "index.html").read_bytes() == (hostile_run / "reports" / "index.html").read_bytes()


def test_a_run_where_every_record_was_rejected_still_gets_its_page(tmp_path):
    (tmp_path / "in").mkdir()
    # a rollout of a known format (rejected: no reward) beside lines of none: the source was read,
    # every record rejected (a source nothing can be read from at all is an error: test_cli.py)
    no_reward = '{"responses_create_params": {"input": "hi"}, "response": {"output": []}}'
    (tmp_path / "in" / "bad.jsonl").write_text(f'not json\n{{"a": 1}}\n{no_reward}\n')
    stale = tmp_path / "out" / "reports" / "plots" / "rewards.png"  # from an earlier run with data
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    assert main(["run", "--source", str(tmp_path / "in"), "--storage", str(tmp_path / "out")]) == 0
    html = (tmp_path / "out" / "reports" / "index.html").read_text()
    assert "No data to plot." in html and html.count("No rows.") == len(EXPORTS)
    assert 'id="reason-invalid_json"' in html and 'id="reason-not_a_rollout"' in html
    assert not stale.exists()


@needs_chromium
def test_nothing_runs_in_a_real_browser(hostile_run):
    page_file = hostile_run / "reports" / "index.html"
    with chromium_page() as (page, watched):
        page.goto(page_file.as_uri(), wait_until="load")
        for summary in page.locator("details > summary").all()[:40]:  # open the folds: reasoning, raw rows
            summary.click()
        page.mouse.move(5, 5)
        for element in page.locator("code").all()[:40]:
            element.hover()
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / "report_hostile.png"), full_page=False)
        assert page.evaluate("document.scripts.length") == 0
        assert page.evaluate("document.querySelectorAll('iframe, object, embed, svg').length") == 0
        assert page.evaluate(
            "[...document.querySelectorAll('*')].flatMap(e => [...e.attributes].map(a => a.name))"
            ".filter(name => name.startsWith('on')).length") == 0
        visible = page.inner_text("body")
        for text in [HOSTILE[0], HOSTILE[1], EVIL_TOOL]:
            assert text in visible
        assert page.evaluate("getComputedStyle(document.body).display") != "none"  # no injected style applied
    assert watched.dialogs == [] and watched.page_errors == [] and watched.console_errors == []
    assert [url for url in watched.requests if not url.startswith("data:")] == [page_file.as_uri()]
