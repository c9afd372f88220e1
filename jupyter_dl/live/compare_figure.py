"""How the notebook shows a comparison of runs (the dict of jupyter_dl.jobs.comparison.compare_jobs): one plotly figure
that overlays the runs' curves (losses above, other metrics below; one colour per run) in the live view's theme, and
the table as HTML and as text."""

import html

from jupyter_dl.jobs.comparison import BATCH_LOSS
from jupyter_dl.live.theme import frame

SECTION_TITLES = {
    "settings": "settings that differ",
    "final metrics": "final metrics (last epoch)",
    "performance": "performance",
}
FALLBACK_COLORS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692", "#b6e880")


def _is_loss(metric):
    return metric == BATCH_LOSS or metric.endswith("loss")


def _colors(template):
    try:
        import plotly.io as pio

        return tuple(pio.templates[template].layout.colorway) or FALLBACK_COLORS
    except (ImportError, KeyError, ValueError, TypeError):
        return FALLBACK_COLORS


def figure(data, template="plotly_white", x=None):
    """A plotly Figure of the comparison's curves against `x` (default: the axis the comparison was asked for)."""
    from plotly.subplots import make_subplots

    x = x or data["x"]
    with_metrics = any(not _is_loss(c["metric"]) for c in data["curves"])
    rows = 2 if with_metrics else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    colors = _colors(template)
    runs = {run["id"]: (run, colors[i % len(colors)]) for i, run in enumerate(data["runs"])}
    for curve in data["curves"]:
        run, color = runs[curve["run"]]
        batch = curve["kind"] == "batch"
        fig.add_scatter(
            x=curve[x],
            y=curve["y"],
            name=f"{run['label']}: {curve['metric']}",
            legendgroup=run["id"],  # a click on the legend hides or shows all of one run's curves
            mode="lines" if batch else "lines+markers",
            opacity=0.45 if batch else 1.0,
            line=dict(color=color, width=1 if batch else 2, dash="dot" if curve["metric"].startswith("val_") else None),
            row=1 if _is_loss(curve["metric"]) else 2,
            col=1,
        )
    title = "compared: " + " vs ".join(r["label"] for r in data["runs"])
    fig.update_layout(
        **frame(template, title, 13, dict(l=50, r=30, t=40, b=40), height=300 + 220 * (rows - 1)),
        # Under the x axis title (which sits about 0.15 of the plot height below the axis), not over it.
        legend=dict(orientation="h", yanchor="top", y=-0.3 if rows == 1 else -0.16),
    )
    fig.update_yaxes(title_text="loss", row=1, col=1)
    if with_metrics:
        fig.update_yaxes(title_text="metrics", row=2, col=1)
    fig.update_xaxes(title_text=data["x_titles"][x], row=rows, col=1)
    return fig


def _sections(data):
    sections = {}
    for row in data["table"]:
        sections.setdefault(row["section"], []).append(row)
    return sections


def table_text(data) -> str:
    header = ["", *(r["label"] for r in data["runs"])]
    lines = []
    sections = _sections(data)
    if "settings" not in sections:
        lines.append(["settings: the same in every run"])
    for section, rows in sections.items():
        lines.append([SECTION_TITLES.get(section, section) + ":"])
        lines += [[f"  {row['name']}", *row["text"]] for row in rows]
    widths = [
        max(len(line[i]) for line in [header, *lines] if len(line) > i and len(line) > 1) for i in range(len(header))
    ]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(header, widths)).rstrip()]
    for line in lines:
        out.append(line[0] if len(line) == 1 else "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
    return "\n".join(out)


def table_html(data) -> str:
    columns = len(data["runs"]) + 1
    head = "".join(f"<th>{html.escape(r['label'])}<br><small>{html.escape(r['id'])}</small></th>" for r in data["runs"])
    body = []
    sections = _sections(data)
    if "settings" not in sections:
        body.append(f"<tr><th colspan='{columns}' style='text-align:left'>settings: the same in every run</th></tr>")
    for section, rows in sections.items():
        body.append(
            f"<tr><th colspan='{columns}' style='text-align:left'>"
            f"{html.escape(SECTION_TITLES.get(section, section))}</th></tr>"
        )
        body += [
            "<tr><td>"
            + html.escape(row["name"])
            + "</td>"
            + "".join(f"<td>{html.escape(text)}</td>" for text in row["text"])
            + "</tr>"
            for row in rows
        ]
    return f"<table class='jp-dl-compare'><thead><tr><th></th>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Comparison:
    """What %dl_compare and jupyter_dl.compare return: `data` (the JSON-able comparison), `figure` (plotly) and the
    table. Shown in a notebook as the figure and then the table; as the text table elsewhere."""

    def __init__(self, data, template="plotly_white"):
        self.data = data
        self.template = template
        self.figure = figure(data, template)

    def table_text(self) -> str:
        return table_text(self.data)

    def table_html(self) -> str:
        return table_html(self.data)

    def _ipython_display_(self):
        from IPython.display import display

        from jupyter_dl.live.view import static_figure_bundle

        # A plain plotly bundle, as the live view leaves: it shows without a widget manager (nbconvert, nbclient).
        display(static_figure_bundle(self.figure), raw=True)
        display({"text/plain": self.table_text(), "text/html": self.table_html()}, raw=True)

    def __repr__(self):
        return self.table_text()
