"""``reports/index.html``: one self-contained page (no Dagster import).

The page has no script at all: plots are SVG images (``plots.py``) embedded as data URIs,
the viewer folds with ``<details>``, and a Content-Security-Policy forbids scripts, frames,
and every fetch but those inline images. Jinja2 renders it with autoescape on, so every
text taken from a record (messages, tool names and arguments, quarantined raw lines,
source paths) is HTML-escaped; an image of a plot cannot run script either. Nothing in
the page depends on the time it was built: the same inputs give the same bytes.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import jinja2

from trajectory_assets.report.viewer import Sample

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


@dataclass
class Figure:
    name: str
    title: str
    svg: str
    caption: str = ""

    @property
    def data_uri(self) -> str:
        return "data:image/svg+xml;base64," + base64.b64encode(self.svg.encode()).decode()


@dataclass
class ExportSection:
    name: str
    family: str
    file_format: str
    rows: dict[str, int]
    samples: list[Sample]


@dataclass
class Page:
    summary: dict[str, Any]  # stats.json
    figures: list[Figure]
    exports: list[ExportSection]
    failing_tasks: list[dict[str, Any]]  # task_key, task_type, rollouts, mean_reward, prompt (a Text)
    tools: list[dict[str, Any]]  # tool, calls, failures, failure_rate
    quarantine: dict[str, list[dict[str, Any]]]  # reason -> examples
    settings: dict[str, Any] = field(default_factory=dict)  # samples per export, seed, ...


def render_page(page: Page) -> str:
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                                     trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(TEMPLATE).render(page=page, csp=CSP, s=page.summary)


TEMPLATE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{{ csp }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Trajectory report</title>
<style>
:root { --ink:#1d2330; --muted:#5d6677; --line:#d9dde5; --bg:#f5f6f8; --card:#fff;
        --system:#eceef2; --user:#e6effb; --assistant:#fff; --tool:#fbf6e3; --bad:#c0392b; --good:#2e7d32; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Liberation Sans", sans-serif;
       color:var(--ink); background:var(--bg); }
nav { position:sticky; top:0; z-index:1; background:#1d2330; padding:.5rem 1.5rem; display:flex; flex-wrap:wrap; gap:.4rem 1rem; }
nav a { color:#dfe6f3; text-decoration:none; font-size:13px; }
nav a:hover { text-decoration:underline; }
main { max-width:1280px; margin:0 auto; padding:1rem 1.5rem 4rem; }
h1 { font-size:1.5rem; margin:.5rem 0 .2rem; }
h2 { font-size:1.2rem; margin:2rem 0 .6rem; padding-bottom:.3rem; border-bottom:1px solid var(--line); }
h3 { font-size:1rem; margin:1rem 0 .4rem; }
.muted { color:var(--muted); }
.cards { display:flex; flex-wrap:wrap; gap:.6rem; margin:.8rem 0; }
.stat { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:.5rem .8rem; min-width:8rem; }
.stat b { display:block; font-size:1.3rem; }
table { border-collapse:collapse; background:var(--card); margin:.4rem 0; }
th, td { border:1px solid var(--line); padding:.25rem .55rem; text-align:left; vertical-align:top; }
th { background:#eef0f4; font-weight:600; }
td.num { text-align:right; font-variant-numeric:tabular-nums; }
.figures { display:grid; grid-template-columns:repeat(auto-fill, minmax(560px, 1fr)); gap:1rem; }
figure { margin:0; background:var(--card); border:1px solid var(--line); border-radius:6px; padding:.6rem; overflow-x:auto; }
figure img { max-width:100%; height:auto; display:block; }
figcaption { font-weight:600; margin-bottom:.4rem; }
figcaption small { display:block; font-weight:normal; color:var(--muted); }
.sample { background:var(--card); border:1px solid var(--line); border-radius:6px; padding:.7rem .9rem; margin:.8rem 0; }
.sample-head { display:flex; flex-wrap:wrap; gap:.3rem .9rem; align-items:baseline; margin-bottom:.4rem; }
.facts { font-size:12px; color:var(--muted); }
.facts code { color:var(--ink); }
.sources { font-size:12px; margin:.2rem 0 .5rem; padding-left:1.1rem; }
.sources code { word-break:break-all; }
.turn { border:1px solid var(--line); border-radius:6px; padding:.35rem .6rem; margin:.35rem 0; }
.turn.system { background:var(--system); } .turn.user { background:var(--user); }
.turn.assistant { background:var(--assistant); border-left:4px solid var(--good); }
.turn.tool { background:var(--tool); }
.role { font-size:11px; font-weight:700; text-transform:uppercase; letter-spacing:.04em; color:var(--muted); }
pre { margin:.25rem 0; white-space:pre-wrap; overflow-wrap:anywhere; font:12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; max-height:28em; overflow:auto; }
.text { white-space:pre-wrap; overflow-wrap:anywhere; margin:.2rem 0; max-height:24em; overflow:auto; }
details > summary { cursor:pointer; color:var(--muted); font-size:12px; }
details.reasoning { border-left:3px solid #b9c2d3; padding-left:.5rem; margin:.25rem 0; }
.call { border:1px dashed #b9c2d3; border-radius:5px; padding:.3rem .5rem; margin:.3rem 0; background:#fafbfd; }
.call .name { font-family:ui-monospace, monospace; font-weight:700; }
.result { background:var(--tool); border-radius:4px; padding:.1rem .4rem; margin-top:.3rem; }
.result.failed { background:#fdecea; border-left:3px solid var(--bad); }
.flag { font-size:11px; color:var(--bad); font-weight:600; }
.cut { color:var(--muted); font-style:italic; font-size:12px; }
.pair { display:grid; grid-template-columns:1fr 1fr; gap:.8rem; }
.side { border-radius:6px; padding:.3rem .5rem; }
.side.chosen { border:2px solid var(--good); } .side.rejected { border:2px solid var(--bad); }
.side h4 { margin:.1rem 0 .3rem; font-size:13px; }
.empty { color:var(--muted); font-style:italic; }
@media (max-width: 900px) { .pair { grid-template-columns:1fr; } .figures { grid-template-columns:1fr; } }
</style>
</head>
<body>
{% macro text(t) %}{{ t.shown }}{% if t.hidden %}<span class="cut"> … {{ t.hidden }} more characters</span>{% endif %}{% endmacro %}
{% macro conversation(c) %}
{% if c.tools %}<div class="facts">tools offered: {% for name in c.tools %}<code>{{ name }}</code>{{ ", " if not loop.last }}{% endfor %}</div>{% endif %}
{% for turn in c.turns %}
<div class="turn {{ turn.role }}" data-role="{{ turn.role }}">
<span class="role">{{ turn.label }}</span>{% if turn.result_of %} <span class="facts">result of {{ turn.result_of }} (no call shown answers it)</span>{% endif %}
{% if turn.reasoning %}<details class="reasoning"><summary>reasoning ({{ turn.reasoning.shown|length + turn.reasoning.hidden }} characters)</summary><div class="text">{{ text(turn.reasoning) }}</div></details>{% endif %}
{% if turn.text and turn.role == "system" and turn.text.shown|length > 400 %}<details><summary>{{ turn.text.shown[:120] }}… ({{ turn.text.shown|length + turn.text.hidden }} characters)</summary><div class="text">{{ text(turn.text) }}</div></details>
{% elif turn.text %}<div class="text">{{ text(turn.text) }}</div>{% endif %}
{% if turn.note %}<div class="facts">{{ turn.note }}</div>{% endif %}
{% for call in turn.calls %}
<div class="call"><span class="role">tool call</span> <span class="name">{{ text(call.name) }}</span>{% if call.call_id %} <span class="facts">{{ call.call_id }}</span>{% endif %}
{% if not call.arguments_parse %} <span class="flag">arguments are not JSON</span>{% endif %}
<pre>{{ text(call.arguments) }}</pre>
{% if call.result %}<div class="result{{ ' failed' if call.result_failed }}"><span class="role">result{{ ' (error)' if call.result_failed }}</span><pre>{{ text(call.result) }}</pre></div>
{% else %}<div class="facts">no result in this row</div>{% endif %}
</div>
{% endfor %}
</div>
{% endfor %}
{% if c.hidden_turns %}<div class="cut">… {{ c.hidden_turns }} more turns not shown (see the source)</div>{% endif %}
{% if not c.turns and not c.hidden_turns %}<div class="empty">(empty)</div>{% endif %}
{% endmacro %}
{% macro source_link(source) %}{% if source.href %}<a href="{{ source.href }}"><code>{{ source.uri }}</code></a>{% else %}<code>{{ source.uri }}</code>{% endif %}{% if source.line %} line {{ source.line }}{% endif %}{% endmacro %}
{% macro number(v, digits=3) %}{{ "—" if v is none else ("%.*g"|format(digits + 3, v)) }}{% endmacro %}
<nav>
<a href="#overview">Overview</a><a href="#plots">Plots</a><a href="#tasks">Failing tasks</a>
{% for section in page.exports %}<a href="#export-{{ section.name }}">{{ section.name }}</a>{% endfor %}
<a href="#quarantine">Quarantine</a>
</nav>
<main>
<h1 id="overview">Trajectory report</h1>
<p class="muted">Built by <code>stats_report</code> from {{ s.sources }} source(s); everything here is in <code>stats.json</code> beside this page. Samples: {{ page.settings.samples_per_export }} row(s) per export, picked by a hash of their trajectory ids salted with <code>{{ page.settings.seed }}</code> (<code>report</code> in the config).</p>
<div class="cards">
<div class="stat">records read<b>{{ s.records_read }}</b></div>
<div class="stat">valid<b>{{ s.records_valid }}</b></div>
<div class="stat">quarantined<b>{{ s.records_rejected }}</b></div>
<div class="stat">tasks<b>{{ s.tasks.tasks }}</b></div>
<div class="stat">with tool calls<b>{{ page.settings.with_tool_calls }}</b></div>
<div class="stat">secrets redacted in<b>{{ s.redactions.trajectories }}</b></div>
</div>
<table>
<tr><th>export</th><th>family</th><th>format</th><th>train</th><th>validation</th><th>left out</th></tr>
{% for section in page.exports %}
<tr><td><a href="#export-{{ section.name }}">{{ section.name }}</a></td><td>{{ section.family }}</td><td>{{ section.file_format }}</td>
<td class="num">{{ section.rows.get("train", 0) }}</td><td class="num">{{ section.rows.get("validation", 0) }}</td>
<td>{% for reason, n in s.excluded_by_export.get(section.name, {}).items() %}{{ reason }}: {{ n }}{{ "; " if not loop.last }}{% endfor %}</td></tr>
{% endfor %}
</table>
{% if s.get("decontamination") %}
<h3 id="decontamination">Benchmark decontamination</h3>
<p class="muted">Trajectories sharing a {{ s.decontamination.ngram }}-word n-gram of their user or assistant turns, or a task id, with an evaluation set were left out of every export (<code>decontamination</code> in the config).</p>
<table><tr><th>benchmark</th><th>path</th><th>items</th><th>n-grams</th><th>ids</th>{% for export in s.decontamination.left_out_by_export %}<th>left out of {{ export }}</th>{% endfor %}</tr>
{% for b in s.decontamination.benchmarks %}<tr><td><code>{{ b.name }}</code></td><td><code>{{ b.path }}</code></td><td class="num">{{ b.items }}</td><td class="num">{{ b.ngrams }}</td><td class="num">{{ b.ids }}</td>{% for export, counts in s.decontamination.left_out_by_export.items() %}<td class="num">{{ counts.get(b.name, 0) }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% endif %}

{% if s.quality_flags %}
<h3>Quality flags</h3>
<p class="muted">What the producers flagged (every source format): kept in the trajectory table, left out of an export where its curation says (the "left out" column above).</p>
<table><tr><th>flag</th><th>trajectories</th></tr>
{% for flag, n in s.quality_flags.items() %}<tr><td><code>{{ flag }}</code></td><td class="num">{{ n }}</td></tr>
{% endfor %}</table>
{% endif %}
{% if s.reward_components %}
<h3>Reward components</h3>
<p class="muted">Each objective of a multi-objective verifier (<code>reward_components</code>), over the rollouts scored on it.</p>
<table><tr><th>objective</th><th>rollouts</th><th>min</th><th>mean</th><th>p50</th><th>p90</th><th>max</th></tr>
{% for name, d in s.reward_components.items() %}<tr><td><code>{{ name }}</code></td><td class="num">{{ d.count }}</td>{% for k in ("min", "mean", "p50", "p90", "max") %}<td class="num">{{ number(d.get(k)) }}</td>{% endfor %}</tr>
{% endfor %}</table>
{% endif %}

<h2 id="plots">Plots</h2>
{% if page.figures %}
<div class="figures">
{% for figure in page.figures %}
<figure id="plot-{{ figure.name }}"><figcaption>{{ figure.title }}{% if figure.caption %}<small>{{ figure.caption }}</small>{% endif %}</figcaption>
<img src="{{ figure.data_uri }}" alt="{{ figure.title }}"></figure>
{% endfor %}
</div>
{% else %}<p class="empty">No data to plot.</p>{% endif %}
{% if page.tools %}
<h3>Tools</h3>
<table><tr><th>tool</th><th>calls</th><th>failed results</th><th>error rate</th></tr>
{% for tool in page.tools %}<tr><td><code>{{ tool.tool }}</code></td><td class="num">{{ tool.calls }}</td><td class="num">{{ tool.failures }}</td><td class="num">{{ "—" if tool.failure_rate is none else "%.1f%%"|format(100 * tool.failure_rate) }}</td></tr>
{% endfor %}</table>
{% endif %}

<h2 id="tasks">Tasks that never pass</h2>
{% if page.failing_tasks %}
<p class="muted">No rollout of these tasks reached the pass threshold; the most tried first (every task in <code>tasks.jsonl</code>).</p>
<table><tr><th>task_key</th><th>task_type</th><th>rollouts</th><th>mean reward</th><th>prompt (first user message)</th></tr>
{% for task in page.failing_tasks %}<tr><td><code>{{ task.task_key }}</code></td><td>{{ task.task_type or "" }}</td><td class="num">{{ task.rollouts }}</td><td class="num">{{ number(task.mean_reward) }}</td><td><div class="text">{{ text(task.prompt) }}</div></td></tr>
{% endfor %}</table>
{% else %}<p class="empty">Every task has at least one passing rollout.</p>{% endif %}

{% for section in page.exports %}
<h2 id="export-{{ section.name }}">{{ section.name }} <span class="muted">({{ section.family }} family, {{ section.file_format }}, {{ section.rows.get("train", 0) }} train / {{ section.rows.get("validation", 0) }} validation rows)</span></h2>
{% if not section.samples %}<p class="empty">No rows.</p>{% endif %}
{% for sample in section.samples %}
<div class="sample" data-export="{{ section.name }}" data-shape="{{ sample.shape }}">
<div class="sample-head"><b>{{ sample.split }} row {{ sample.position + 1 }}</b>
<span class="facts">{% for key, value in sample.facts %}{{ key }}: <code>{{ value }}</code>{{ " · " if not loop.last }}{% endfor %}</span></div>
{% if sample.sources and sample.shape != "task" %}<ul class="sources">
{% for source in sample.sources[:12] %}<li>{{ source.role }} <code>{{ source.trajectory_id }}</code>{% if source.uri %}: {{ source_link(source) }}{% else %} (not in the trajectory table){% endif %}{% if source.reward is not none %} · reward {{ number(source.reward) }}{% endif %}</li>
{% endfor %}{% if sample.sources|length > 12 %}<li>… {{ sample.sources|length - 12 }} more</li>{% endif %}
</ul>{% endif %}
{% if sample.shape == "preference" %}
{% if sample.conversation %}<h4>prompt</h4>{{ conversation(sample.conversation) }}{% endif %}
<div class="facts">margin: <b>{{ number(sample.margin) }}</b></div>
<div class="pair">
<div class="side chosen"><h4>chosen · reward {{ number(sample.reward_chosen) }}</h4>{{ conversation(sample.chosen) }}</div>
<div class="side rejected"><h4>rejected · reward {{ number(sample.reward_rejected) }}</h4>{{ conversation(sample.rejected) }}</div>
</div>
{% elif sample.shape == "task" %}
{{ conversation(sample.conversation) }}
{% if sample.rollouts %}<table><tr><th>rollout</th><th>reward</th><th>assistant turns</th><th>source</th></tr>
{% for rollout in sample.rollouts[:20] %}<tr><td><code>{{ rollout.trajectory_id }}</code></td><td class="num">{{ number(rollout.reward) }}</td><td class="num">{{ rollout.turns if rollout.turns is not none else "—" }}</td><td>{% if rollout.source.uri %}{{ source_link(rollout.source) }}{% else %}(not in the trajectory table){% endif %}</td></tr>
{% endfor %}</table>{% endif %}
{% elif sample.conversation %}
{{ conversation(sample.conversation) }}
{% endif %}
<details><summary>row as stored</summary><pre>{{ text(sample.raw) }}</pre></details>
</div>
{% endfor %}
{% endfor %}

<h2 id="quarantine">Quarantine</h2>
<p class="muted">{{ s.records_rejected }} record(s) could not become trajectories; all of them are in <code>quarantine/rejected.jsonl</code>.</p>
{% if s.rejected_by_reason %}
<table><tr><th>reason</th><th>records</th></tr>
{% for reason, n in s.rejected_by_reason.items() %}<tr><td><a href="#reason-{{ reason }}">{{ reason }}</a></td><td class="num">{{ n }}</td></tr>
{% endfor %}</table>
{% for reason, examples in page.quarantine.items() %}
<h3 id="reason-{{ reason }}">{{ reason }}</h3>
{% for example in examples %}
<div class="sample"><div class="facts"><code>{{ example.source }}</code>{% if example.line %} line {{ example.line }}{% endif %}: {{ text(example.detail) }}</div>
<pre>{{ text(example.raw) }}</pre></div>
{% endfor %}
{% endfor %}
{% else %}<p class="empty">Nothing was quarantined.</p>{% endif %}
</main>
</body>
</html>
"""
