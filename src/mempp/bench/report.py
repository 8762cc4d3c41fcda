"""Writing a run's results: ``results.json``, ``results.md`` (tables) and PNG plots.

matplotlib is imported only when plots are drawn (with the Agg backend, no display), so the
library and the JSON / Markdown output never need it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

JSON_NAME = "results.json"
MARKDOWN_NAME = "results.md"
CATEGORY_PLOT = "categories.png"
K_PLOT = "recall_vs_k.png"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}"


def _cell(summary: Mapping[str, Any] | None, ci: bool = False) -> str:
    if not summary or summary.get("mean") is None:
        return "–"
    text = _pct(summary["mean"])
    if ci and summary.get("lo") is not None:
        text += f" [{_pct(summary['lo'])}, {_pct(summary['hi'])}]"
    return text


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def markdown(results: Mapping[str, Any]) -> str:
    """The tables of one run, in percent (question-weighted means, 95% bootstrap CIs)."""
    info, run = results["benchmark"], results["run"]
    aggregates = results["aggregates"]
    systems = [s["name"] for s in results["systems"]]
    categories: dict[str, str] = results["categories"]
    ks = run["ks"]
    lines = [
        f"## {info['title']}",
        "",
        f"- data: `{info['root']}` (digest `{info['digest'][:16]}`, {info['items']} items, "
        f"{info['scopes']} scope(s), {run['questions_run']} questions)",
        f"- encoder: `{run['encoder']['name']}`; RAG tokens: {run['tokenizer']}",
        f"- answer window: first {run['window_chars']:,} characters of the evidence "
        f"(style `{run['evidence_style']}`); all figures in %, mean over questions "
        f"[95% bootstrap CI, {run['bootstrap']['resamples']} resamples, "
        f"seed {run['bootstrap']['seed']}]",
        "",
        "### Overall",
        "",
    ]
    timing = results["timings"]["systems"]
    visible = any("gold_visible" in aggregates[n]["overall"] for n in systems)
    header = ["system", "window", "window (full)"] + (["gold text"] if visible else [])
    header += [f"R@{k}" for k in ks] + ["MRR", "nDCG@10", "ms/q"]
    rows = []
    for name in systems:
        overall = aggregates[name]["overall"]
        row = [name, _cell(overall.get("window"), ci=True), _cell(overall.get("window_full"))]
        if visible:
            row.append(_cell(overall.get("gold_visible")))
        row += [_cell(overall.get(f"recall@{k}")) for k in ks]
        row += [_cell(overall.get("mrr")), _cell(overall.get("ndcg@10"))]
        row.append(f"{timing.get(name, {}).get('mean_ms', 0):.1f}")
        rows.append(row)
    lines += _table(header, rows)
    if visible:
        lines += [
            "",
            "`gold text`: share of the gold records' characters shown inside the window "
            "(– for chunks).",
        ]
    packed = [s for s in results["systems"] if s.get("packing")]
    if packed:
        lines += _packing_section(results, packed)

    counts = _category_counts(results)
    per_category = [("window", "Window recall"), ("recall@10", "Recall@10")]
    if visible:
        per_category.append(("gold_visible", "Gold text visible"))
    llm = results.get("llm") or {}
    if llm.get("answers"):
        lines += _answer_section(results, llm)
        per_category.append(("answer_score", "Answer score"))
    for metric, title in per_category:
        lines += ["", f"### {title} by category", ""]
        header = ["system", "overall"] + [
            f"{code} {name} (n={counts.get(code, 0)})"
            if name != code
            else f"{code} (n={counts.get(code, 0)})"
            for code, name in categories.items()
        ]
        rows = []
        for name in systems:
            agg = aggregates[name]
            if metric == "answer_score" and metric not in agg["overall"]:
                continue  # a system that was not answered
            row = [name, _cell(agg["overall"].get(metric), ci=True)]
            row += [_cell(agg["by_category"][code].get(metric)) for code in categories]
            rows.append(row)
        lines += _table(header, rows)

    if any(f"session_recall@{ks[0]}" in aggregates[n]["overall"] for n in systems):
        lines += ["", "### Session recall", ""]
        rows = [
            [name] + [_cell(aggregates[name]["overall"].get(f"session_recall@{k}")) for k in ks]
            for name in systems
        ]
        lines += _table(["system"] + [f"R@{k}" for k in ks], rows)

    sweep = run.get("sweep") or []
    swept = (
        [n for n in systems if f"sweep_window@{sweep[0]}" in aggregates[n]["overall"]]
        if sweep
        else []
    )
    if swept:
        lines += ["", "### k sweep (mempp systems return k rows)", ""]
        header = ["system", "metric"] + [f"k={k}" for k in sweep]
        rows = []
        for name in swept:
            overall = aggregates[name]["overall"]
            rows.append([name, "recall"] + [_cell(overall.get(f"sweep_recall@{k}")) for k in sweep])
            rows.append([name, "window"] + [_cell(overall.get(f"sweep_window@{k}")) for k in sweep])
        lines += _table(header, rows)

    deltas = results.get("deltas_vs_reference", {})
    if deltas.get("systems"):
        reference = deltas["reference"]
        lines += ["", f"### Difference to {reference} (paired bootstrap)", ""]
        rows = [
            [name, _delta(values.get("window")), _delta(values.get("recall@10"))]
            for name, values in deltas["systems"].items()
        ]
        lines += _table(["system", "Δ window", "Δ R@10"], rows)

    lines += _supersession_section(results)

    hooked = not llm.get("answers")
    if hooked and any("answer_score" in aggregates[n]["overall"] for n in systems):
        lines += ["", "### Answer score (hook)", ""]
        rows = [
            [name, _cell(aggregates[name]["overall"].get("answer_score"), ci=True)]
            for name in systems
            if "answer_score" in aggregates[name]["overall"]
        ]
        lines += _table(["system", "score"], rows)
    lines += [
        "",
        f"Run time: {results['timings']['total_s']:.1f} s "
        f"(ingest {results['timings']['ingest_s']:.1f} s, "
        f"reused: {run['cache'].get('reused')})",
        "",
    ]
    return "\n".join(lines)


HEADLINE_SYSTEM = "mempp-default"


def _packing_section(results: Mapping[str, Any], packed: list[Mapping[str, Any]]) -> list[str]:
    """The note that the headline is whole documents, and the packed rows beside it."""
    aggregates = results["aggregates"]
    window = results["run"]["window_chars"]
    names = [p["name"] for p in packed]
    lines = [
        "",
        f"The headline is whole documents (`{HEADLINE_SYSTEM}`); "
        + ", ".join(f"`{n}`" for n in names)
        + " is an option (evidence packing, `mempp.search.packing`): records longer than a "
        "threshold are shown as query-focused excerpts, each marked with the record id of its "
        "full text, so more records fit the window.",
        "",
        "### Evidence packing (option)",
        "",
    ]
    shown = ([HEADLINE_SYSTEM] if HEADLINE_SYSTEM in aggregates else []) + names
    settings = {p["name"]: p["packing"] for p in packed}
    rows = []
    for name in shown:
        overall = aggregates[name]["overall"]
        own = [r for r in results["questions"] if r["system"] == name]
        entries = [r["window_entries"] for r in own if "window_entries" in r]
        mean = f"{sum(entries) / len(entries):.1f}" if entries else "–"
        options = settings.get(name)
        how = (
            f"first {options.get('whole_first', 0)} whole; others over "
            f"{options['threshold']} chars as excerpts of ≤ {options['cap']} "
            f"(passages ≤ {options['passage']})"
            if options
            else "whole documents"
        )
        rows.append(
            [
                name,
                how,
                _cell(overall.get("window"), ci=True),
                _cell(overall.get("gold_visible"), ci=True),
                mean,
            ]
        )
    lines += _table(
        ["system", "evidence", "window", "gold text visible", f"entries in {window:,} chars"],
        rows,
    )
    return lines


def _failures(count: int, overflows: int) -> str:
    return f"{count} ({overflows} context overflow)" if overflows else str(count)


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _answer_section(results: Mapping[str, Any], llm: Mapping[str, Any]) -> list[str]:
    """The answer + judge tables: scores on 0-100, failures counted, never averaged in."""
    settings = llm["settings"]
    benchmark = results["benchmark"]["name"]
    aggregates = results["aggregates"]
    deltas = results.get("deltas_vs_reference", {})
    reference = deltas.get("reference")
    if reference not in llm["answers"]:
        reference = None  # no answers to compare with
    usage = llm.get("usage") or {}
    calls = ", ".join(
        f"{role} {u.get('requests', 0)} requests ({u.get('cache_hits', 0)} cached)"
        for role, u in usage.items()
    )
    judge = f"judge `{settings['judge_model']}`"
    if benchmark == "orgmembench":
        judge += f", rubric, {settings['judge_runs']} run(s) at temperature 0"
        metric = "rubric score (0-100), mean over judge runs ± sd across runs"
    elif benchmark == "locomo":
        judge += ", CORRECT/WRONG at temperature 0"
        metric = "% CORRECT; token F1 and BLEU-1 against the gold answer"
    else:
        judge += ", yes/no by question type at temperature 0"
        metric = "% judged correct"
    lines = [
        "",
        "### Answer and judge",
        "",
        f"- answerer `{settings['answer_model']}` (OrgMemBench basic answerer, first "
        f"{llm['answer_window_chars']:,} characters of the evidence); {judge}; "
        f"endpoint `{settings['base_url']}`",
        f"- score: {metric}; [95% bootstrap CI over questions]; failed answers or judgements "
        "are counted as failures, not as 0",
    ]
    if calls:
        lines.append(f"- LLM calls this run: {calls}")
    if llm.get("aborted"):
        lines.append(f"- **stopped early**: {llm['aborted']}")
    lines.append("")
    header = ["system", "score", "95% CI"]
    if benchmark == "orgmembench":
        header.append("± sd over judge runs")
    if benchmark == "locomo":
        header += ["F1", "BLEU-1"]
    header += ["scored", "answer failures", "judge failures", "not attempted"]
    if reference:
        header.append(f"Δ vs {reference}")
    rows = []
    for name, summary in llm["answers"].items():
        overall = aggregates.get(name, {}).get("overall", {}).get("answer_score") or {}
        interval = (
            f"[{_pct(overall['lo'])}, {_pct(overall['hi'])}]"
            if overall.get("lo") is not None
            else "–"
        )
        row = [name, _num(summary.get("score")), interval]
        if benchmark == "orgmembench":
            row.append(_num(summary.get("sd")))
        if benchmark == "locomo":
            row += [_num(summary.get("f1")), _num(summary.get("bleu1"))]
        row += [
            f"{summary['scored']}/{summary['questions']}",
            _failures(summary["answer_failures"], summary.get("context_overflows", 0)),
            str(summary["judge_failures"]),
            str(summary["not_attempted"]),
        ]
        if reference:
            delta = deltas.get("systems", {}).get(name, {}).get("answer_score")
            row.append("–" if name == reference else _delta(delta))
        rows.append(row)
    lines += _table(header, rows)
    consolidation, graph = llm.get("consolidation"), llm.get("graph")
    fact_index = llm.get("fact_index")
    if consolidation or graph or fact_index:
        lines += ["", "LLM ablations:", ""]
    if consolidation:
        labels = ", ".join(f"{n} {label}" for label, n in consolidation["labels"].items())
        lines.append(
            f"- mempp-consolidated: `{consolidation['model']}`, threshold "
            f"{consolidation['threshold']}, {consolidation['scopes']} scope(s), "
            f"{consolidation['rows']} rows, {consolidation['groups']} groups ({labels or 'none'}, "
            f"{consolidation['failures']} failed); superseded {consolidation['superseded']}, "
            f"archived {consolidation['archived']}, merged {consolidation['merged']}; "
            f"{'reused' if consolidation['reused'] else 'built now'}"
        )
    if graph:
        lines.append(
            f"- mempp-graph: `{graph['model']}`, {graph['pending']} row(s) extracted this run "
            f"({graph['triples_now']} triples, {graph['failures']} failed); "
            f"{'reused' if graph['reused'] else 'extended now'}"
        )
    if fact_index:
        lines.append(
            f"- mempp-fact-index: `{fact_index['model']}`, {fact_index['pending']} document(s) "
            f"asked this run ({fact_index['facts_now']} facts, {fact_index['failures']} failed, "
            f"left pending); {fact_index.get('left_pending', 0)} more not asked (--fact-limit); "
            f"{fact_index['documents']} document(s) indexed with "
            f"{fact_index['facts']} facts; {'reused' if fact_index['reused'] else 'extended now'}"
        )
    return lines


def _supersession_section(results: Mapping[str, Any]) -> list[str]:
    """Layered minus plain, per metric, overall and per category (``--supersession-layer``)."""
    section = results.get("supersession")
    if not section:
        return []
    layer, categories = section["layer"], results["categories"]
    lines = [
        "",
        "### Supersession layer (paired bootstrap: with the layer minus without)",
        "",
        f"{layer['links']} links ({layer['superseded_records']} records superseded) along "
        f"{len(layer['chains'])} version chains; pairs by source: "
        + ", ".join(f"{k} {v}" for k, v in layer["pairs_by_source"].items()),
        "",
    ]
    names = {"window": "window", "window_full": "window (full)", "gold_visible": "gold text"}
    header = ["system", "metric", "overall", *[f"{c} {n}" for c, n in categories.items()]]
    rows = [
        [system, names.get(metric, metric), _delta(values["overall"][metric])]
        + [_delta(values["by_category"][c].get(metric)) for c in categories]
        for system, values in section["deltas"].items()
        for metric in values["overall"]
    ]
    return lines + _table(header, rows)


def _delta(summary: Mapping[str, Any] | None) -> str:
    if not summary or summary.get("mean") is None:
        return "–"
    sign = lambda v: f"{100.0 * v:+.1f}"  # noqa: E731 - local formatter
    return f"{sign(summary['mean'])} [{sign(summary['lo'])}, {sign(summary['hi'])}]"


def _category_counts(results: Mapping[str, Any]) -> dict[str, int]:
    systems = [s["name"] for s in results["systems"]]
    if not systems:
        return {}
    counts: dict[str, int] = {}
    for row in results["questions"]:
        if row["system"] == systems[0]:
            counts[row["category"]] = counts.get(row["category"], 0) + 1
    return counts


def plot(results: Mapping[str, Any], out: Path) -> list[Path]:
    """Per-category bars per system and recall-vs-k curves, as PNG files in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    aggregates = results["aggregates"]
    systems = [s["name"] for s in results["systems"]]
    categories = list(results["categories"])
    labels = ["overall", *categories]
    written: list[Path] = []
    # tab10 repeats after ten systems and a full run compares twelve.
    palette = plt.get_cmap("tab20").colors
    color = {name: palette[i % len(palette)] for i, name in enumerate(systems)}

    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.6 * len(labels) + 3), 9), sharex=True)
    width = 0.8 / max(1, len(systems))
    positions = np.arange(len(labels))
    for ax, metric, title in zip(
        axes, ("window", "recall@10"), ("window recall", "recall@10"), strict=True
    ):
        for i, name in enumerate(systems):
            agg = aggregates[name]
            values = [agg["overall"].get(metric)] + [
                agg["by_category"][c].get(metric) for c in categories
            ]
            heights = [100 * v["mean"] if v and v.get("mean") is not None else 0 for v in values]
            offset = (i - (len(systems) - 1) / 2) * width
            ax.bar(positions + offset, heights, width, label=name, color=color[name])
        ax.set_ylabel(f"{title} (%)")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xticks(positions, labels, rotation=20)
    axes[0].legend(ncol=4, fontsize=8)
    axes[0].set_title(results["benchmark"]["title"])
    fig.tight_layout()
    path = out / CATEGORY_PLOT
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    ks = results["run"]["ks"]
    sweep = results["run"].get("sweep") or []
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    for name in systems:
        overall = aggregates[name]["overall"]
        values = [overall.get(f"recall@{k}") for k in ks]
        if all(v and v.get("mean") is not None for v in values):
            heights = [100 * v["mean"] for v in values]
            axes[0].plot(ks, heights, marker="o", label=name, color=color[name])
        swept = [overall.get(f"sweep_window@{k}") for k in sweep]
        if sweep and all(v and v.get("mean") is not None for v in swept):
            heights = [100 * v["mean"] for v in swept]
            axes[1].plot(sweep, heights, marker="o", label=name, color=color[name])
    axes[0].set(xscale="log", xlabel="k (prefix of the ranked list)", ylabel="recall@k (%)")
    axes[0].set_xticks(ks, [str(k) for k in ks])
    axes[1].set(xlabel="k (rows returned)", ylabel="window recall (%)")
    for ax in axes:
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(results["benchmark"]["title"])
    fig.tight_layout()
    path = out / K_PLOT
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written


def write(results: Mapping[str, Any], out: Path, *, plots: bool = True) -> list[Path]:
    """Write JSON, Markdown and (optionally) plots into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / JSON_NAME
    json_path.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", "utf-8")
    md_path = out / MARKDOWN_NAME
    md_path.write_text(markdown(results), encoding="utf-8")
    written = [json_path, md_path]
    if plots:
        try:
            written += plot(results, out)
        except ImportError:  # matplotlib is optional (the ``bench`` extra): keep the rest
            print(
                "mempp bench: matplotlib is not installed, plots skipped "
                "(pip install 'mempp[bench]')",
                file=sys.stderr,
            )
    return written
