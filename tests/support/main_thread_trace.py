"""What held the page's main thread: a Chrome trace (devtools.timeline and V8's CPU sampler) of a Playwright page,
read back as its long tasks, each with its thread (CPU) time, the kinds of work in it and the functions that
spent that time.

Wall-clock long tasks depend on what else runs on the machine; a task's thread time much less so, which makes
profiles taken under load comparable. Used by bench/long_tasks.py, and by the browser walk-through when
JDL_TRACE_DIR is set.
"""

import collections
import json
import pathlib
import re

CATEGORIES = [
    "devtools.timeline",
    "disabled-by-default-devtools.timeline",
    "disabled-by-default-devtools.timeline.frame",
    "v8.execute",
    "disabled-by-default-v8.cpu_profiler",
    "blink.user_timing",
    "toplevel",
]
LONG_TASK_MS = 50
# What a sample's stack is attributed to: the innermost frame whose script URL matches, first pattern first.
OWNERS = [
    ("live figure (live_figure.js)", re.compile(r"^blob:|live_figure")),
    ("jupyter-dl panel", re.compile(r"/extensions/jupyter-dl/")),
    ("ipywidgets", re.compile(r"/extensions/@jupyter-widgets/|jupyterlab_widgets")),
    ("anywidget", re.compile(r"/extensions/anywidget/")),
    ("plotly renderer (jupyterlab-plotly)", re.compile(r"/extensions/jupyterlab-plotly/")),
    ("JupyterLab", re.compile(r"/static/lab/|/lab/extensions/")),
]
# The trace's names of work that is not a JavaScript function.
NATIVE = {
    "Layout": "layout",
    "UpdateLayoutTree": "style",
    "ScheduleStyleRecalculation": "style",
    "Paint": "paint",
    "PrePaint": "paint",
    "Layerize": "paint",
    "MinorGC": "gc",
    "MajorGC": "gc",
    "V8.GC_SCAVENGER": "gc",
    "BlinkGC.AtomicPhase": "gc",
    "ParseHTML": "parse HTML",
    "v8.compile": "compile",
    "V8.CompileCode": "compile",
    "v8.compileModule": "compile",
    "V8.ParseFunction": "compile",
}


def start(page):
    """Trace `page`'s renderer from now on (one trace per browser at a time)."""
    page.context.browser.start_tracing(page=page, categories=CATEGORIES)


def stop(page, path) -> dict:
    """End the trace, keep it at `path` (chrome://tracing or DevTools' Performance panel opens it) and return it."""
    raw = page.context.browser.stop_tracing()
    pathlib.Path(path).write_bytes(raw)
    return json.loads(raw)


def _main_thread(events):
    """(pid, tid) of the page's renderer main thread: the one running the most long tasks."""
    names = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name" and e["args"].get("name") == "CrRendererMain"
    }
    busy = collections.Counter(
        (e["pid"], e["tid"]) for e in events if e.get("name") == "RunTask" and (e["pid"], e["tid"]) in names
    )
    return busy.most_common(1)[0][0] if busy else None


def _samples(events, thread):
    """(timestamp µs, stack of call frames innermost first) of each CPU sample taken on `thread`."""
    pid, tid = thread
    nodes, samples = {}, []
    profiles = {}  # profile id -> last timestamp
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        if e.get("pid") != pid:
            continue
        if e.get("name") == "Profile" and e.get("tid") == tid:
            profiles[e["id"]] = e["args"]["data"]["startTime"]
        elif e.get("name") == "ProfileChunk" and e.get("id") in profiles:
            data = e["args"]["data"]
            profile = data.get("cpuProfile", {})
            for node in profile.get("nodes", []):
                nodes[node["id"]] = node
            at = profiles[e["id"]]
            for node_id, delta in zip(profile.get("samples", []), data.get("timeDeltas", []), strict=False):
                at += delta
                samples.append((at, node_id))
            profiles[e["id"]] = at

    def stack(node_id):
        frames = []
        while node_id in nodes:
            frames.append(nodes[node_id]["callFrame"])
            node_id = nodes[node_id].get("parent")
        return frames

    cache = {}
    out = []
    for at, node_id in samples:
        if node_id not in cache:
            cache[node_id] = stack(node_id)
        out.append((at, cache[node_id]))
    return out


def _owner(frames):
    """Who a sample's time is for: the first of OWNERS with a frame anywhere on its stack (plotly.js drawing for
    the live figure is the live figure's)."""
    urls = [frame.get("url", "") for frame in frames]
    for owner, pattern in OWNERS:
        if any(url and pattern.search(url) for url in urls):
            return owner
    return "(browser / no script)"


def _frame_name(frame):
    name = frame.get("functionName") or "(anonymous)"
    url = frame.get("url", "")
    return f"{name} {url.rsplit('/', 1)[-1][:40]}:{frame.get('lineNumber', 0) + 1}" if url else name


def long_tasks(trace: dict, start_us=None, end_us=None, over_ms=LONG_TASK_MS) -> list[dict]:
    """The main thread's tasks over `over_ms` (between the trace timestamps start_us and end_us), each as
    {at_ms, wall_ms, cpu_ms, kinds: {kind: ms}, owners: {owner: ms}, functions: [(name, ms)], entry}."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    thread = _main_thread(events)
    if thread is None:
        return []
    on_thread = [e for e in events if (e.get("pid"), e.get("tid")) == thread and e.get("ph") == "X"]
    tasks = sorted(
        (e for e in on_thread if e["name"] == "RunTask" and e.get("dur", 0) >= over_ms * 1000),
        key=lambda e: e["ts"],
    )
    if start_us is not None:
        tasks = [t for t in tasks if start_us <= t["ts"] <= (end_us if end_us is not None else float("inf"))]
    samples = _samples(events, thread)
    first = min((e["ts"] for e in events if e.get("ts")), default=0)
    out = []
    for task in tasks:
        begin, end = task["ts"], task["ts"] + task["dur"]
        inside = [e for e in on_thread if begin <= e["ts"] < end and e is not task]
        if any(e["name"] == "V8.InvokeApiInterruptCallbacks" and e["dur"] > task["dur"] / 2 for e in inside):
            continue  # the CPU profiler starting (the trace's own cost)
        kinds = collections.Counter()
        for e in inside:
            kind = NATIVE.get(e["name"])
            if kind:
                kinds[kind] += e.get("dur", 0) / 1000
        entry = next(
            (
                _entry_name(e)
                for e in sorted(inside, key=lambda e: (e["ts"], -e.get("dur", 0)))
                if e["name"] in ("TimerFire", "FireAnimationFrame", "EventDispatch", "FunctionCall", "v8.callFunction")
                or e["name"].startswith("XHR")
            ),
            "?",
        )
        owners, functions = collections.Counter(), collections.Counter()
        chosen = [(at, frames) for at, frames in samples if begin <= at < end]
        for (at, frames), nxt in zip(chosen, [*chosen[1:], (end, None)], strict=False):
            ms = (nxt[0] - at) / 1000
            if not frames or frames[0].get("functionName") in ("(idle)", "(program)", "(root)"):
                continue
            owners[_owner(frames)] += ms
            functions[_frame_name(frames[0])] += ms
        out.append(
            {
                "at_ms": (begin - first) / 1000,
                "wall_ms": task["dur"] / 1000,
                "cpu_ms": task.get("tdur", task["dur"]) / 1000,
                "entry": entry,
                "kinds": dict(kinds.most_common()),
                "owners": dict(owners.most_common()),
                "functions": functions.most_common(8),
            }
        )
    return out


def _entry_name(event):
    data = event.get("args", {}).get("data", {})
    if event["name"] == "FunctionCall":
        return f"FunctionCall {data.get('functionName') or '?'} {data.get('url', '').rsplit('/', 1)[-1][:40]}"
    if event["name"] == "EventDispatch":
        return f"EventDispatch {data.get('type', '?')}"
    return event["name"]


def marks(trace: dict) -> dict:
    """performance.mark() names -> their time in ms from the trace's start (as long_tasks' at_ms)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    first = min((e["ts"] for e in events if e.get("ts")), default=0)
    return {
        e["name"]: (e["ts"] - first) / 1000
        for e in events
        if "blink.user_timing" in e.get("cat", "") and e.get("name", "").startswith("jdl-")
    }


def phase(at_ms, marks: dict) -> str:
    """The phase of the walk-through a task at `at_ms` fell in, by the marks before it."""
    passed = [name for name, ms in sorted(marks.items(), key=lambda m: m[1]) if ms <= at_ms]
    return passed[-1] if passed else "start"


def by_phase(tasks, marks: dict) -> dict:
    """Per phase of the walk-through: how many long tasks, the longest (wall) and their CPU time."""
    groups = collections.defaultdict(list)
    for t in tasks:
        groups[phase(t["at_ms"], marks)].append(t)
    out = {}
    for name, group in groups.items():
        cpu = sorted(t["cpu_ms"] for t in group)
        out[name] = {
            "count": len(group),
            "longest_wall_ms": round(max(t["wall_ms"] for t in group)),
            "cpu_max_ms": round(cpu[-1]),
            "cpu_median_ms": round(cpu[len(cpu) // 2]),
            "cpu_sum_ms": round(sum(cpu)),
        }
    return out


def report(tasks, over_ms=150, marks=None) -> str:
    """One paragraph per task over `over_ms` (by wall time), then per phase (by marks) the long tasks' count, longest
    and CPU time, and totals by owner over all the long tasks."""
    marks = marks or {}
    lines = [f"marks: {marks}"]
    for t in tasks:
        if t["wall_ms"] < over_ms:
            continue
        kinds = ", ".join(f"{k} {v:.0f}" for k, v in t["kinds"].items() if v >= 1)
        owners = ", ".join(f"{k} {v:.0f}" for k, v in t["owners"].items() if v >= 1)
        lines.append(
            f"@{t['at_ms'] / 1000:7.1f} s [{phase(t['at_ms'], marks)}]  wall {t['wall_ms']:5.0f} ms  "
            f"cpu {t['cpu_ms']:5.0f} ms  {t['entry']}\n"
            f"      kinds: {kinds}\n      owners: {owners}\n      "
            + "; ".join(f"{name} {ms:.0f}" for name, ms in t["functions"][:6])
        )
    for name, summary in by_phase(tasks, marks).items():
        lines.append(
            f"{name}: {summary['count']} long tasks, longest wall {summary['longest_wall_ms']:.0f} ms, cpu max "
            f"{summary['cpu_max_ms']:.0f} median {summary['cpu_median_ms']:.0f} sum {summary['cpu_sum_ms']:.0f} ms"
        )
    totals = collections.Counter()
    for t in tasks:
        totals.update(t["owners"])
    cpu = sorted(t["cpu_ms"] for t in tasks)
    lines.append(
        f"{len(tasks)} tasks over {LONG_TASK_MS} ms; cpu ms: max {cpu[-1] if cpu else 0:.0f}, "
        f"median {cpu[len(cpu) // 2] if cpu else 0:.0f}, sum {sum(cpu):.0f}; by owner (wall ms the CPU sampler saw): "
        + ", ".join(f"{k} {v:.0f}" for k, v in totals.most_common())
    )
    return "\n".join(lines)
