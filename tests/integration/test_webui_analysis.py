# ruff: noqa: F811 (the fixtures imported from webui_support are parameters here)
"""The WebUI's experiment page in Chromium against a live master with a finished adaptive ASHA
search: learning curves of every trial, parallel coordinates brushed to narrow the trial set,
scatters, the heat map, the trials table sorted by a metric, and comparing trials; and the
render time of 100 trials x 1,000 points (printed for docs/benchmarks.md, never asserted)."""

from __future__ import annotations

import json
import re
import statistics
import threading
from typing import Any

import pytest
import requests

from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import (  # noqa: F401 (fixtures)
    browser,
    create,
    login,
    module_db,
    page,
    screenshot,
    search,
)

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def table_ids(page: Any) -> list[int]:
    return [
        int(x)
        for x in page.locator(".trials-box tbody tr").evaluate_all(
            "rs => rs.map(r => r.dataset.trial)"
        )
    ]


def test_curves_hyperparameter_views_brushing_and_the_trials_table(
    search: tuple[ThreadedMaster, int], page: Any
) -> None:
    m, eid = search
    trials = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    by_id = {t["id"]: t for t in trials}
    assert len(trials) == 8
    login(page, m, f"/det/experiments/{eid}")
    page.wait_for_selector("figure.curves[data-ready-ms]")
    # One learning curve per trial, its points those the trial reported (every 2 batches).
    curves = page.locator("figure.curves polyline")
    assert curves.count() == 8
    points = sorted(
        len(p.split()) for p in curves.evaluate_all("ls => ls.map(l => l.getAttribute('points'))")
    )
    assert points == sorted(t["totalBatchesProcessed"] // 2 for t in trials)
    # Any metric: the training loss has a point per batch.
    page.select_option("select[aria-label='curve metric']", "training.loss")
    page.wait_for_selector("figure.curves figcaption:text('training.loss by batches')")
    points = sorted(
        len(p.split()) for p in curves.evaluate_all("ls => ls.map(l => l.getAttribute('points'))")
    )
    assert points == sorted(t["totalBatchesProcessed"] for t in trials)
    page.select_option("select[aria-label='curve metric']", "validation.validation_loss")
    page.wait_for_selector("figure.curves figcaption:text('validation.validation_loss by batches')")

    # Parallel coordinates: an axis per hyperparameter and the metric, a line per trial.
    axes = page.locator("svg.pcoords g.paxis").evaluate_all("gs => gs.map(g => g.dataset.axis)")
    assert axes[:3] == ["layers", "lr", "optimizer"] and len(axes) == 4
    assert page.locator("svg.pcoords polyline.on").count() == 8
    assert page.inner_text(".brush-state").startswith("8 of 8 trials selected")
    assert sorted(table_ids(page)) == sorted(by_id)
    screenshot(page, "experiment")
    # The kept checkpoints of every trial, best first, each with its trial.
    kept_ckpts = m.get(
        f"/api/v1/experiments/{eid}/checkpoints?states=STATE_COMPLETED&limit=100"
        "&sortByAttr=SORT_BY_SEARCHER_METRIC&orderBy=ORDER_BY_ASC"
    )["checkpoints"]
    assert kept_ckpts
    rows = page.locator(".checkpoints-box tbody tr[data-uuid]")
    assert rows.evaluate_all("rs => rs.map(r => r.dataset.uuid)") == [c["uuid"] for c in kept_ckpts]
    assert rows.first.locator("a").inner_text() == f"trial {kept_ckpts[0]['training']['trialId']}"
    assert rows.first.get_by_role("button", name="Register as model version…").count() == 1

    # Brush the upper half of the lr axis: the trials with a larger lr stay.
    lrs = [t["hparams"]["lr"] for t in trials]
    lo, hi = min(lrs), max(lrs)
    axis = page.locator("rect.brush-area[data-axis=lr]")
    axis.scroll_into_view_if_needed()
    box = axis.bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + 1)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.25, steps=4)
    page.mouse.move(x, box["y"] + box["height"] * 0.5, steps=4)
    page.mouse.up()
    page.wait_for_selector("svg.pcoords rect.brush")
    kept = table_ids(page)
    expected_min = lo + (hi - lo) * 0.47
    assert 0 < len(kept) < 8
    for t in trials:
        pos = (t["hparams"]["lr"] - lo) / (hi - lo)
        if pos > 0.53:
            assert t["id"] in kept
        if pos < 0.47:
            assert t["id"] not in kept
    assert all(by_id[k]["hparams"]["lr"] >= expected_min for k in kept)
    on = page.locator("svg.pcoords polyline.on").evaluate_all("ls => ls.map(l => +l.dataset.trial)")
    assert sorted(on) == sorted(kept)
    assert page.inner_text(".brush-state").startswith(f"{len(kept)} of 8 trials selected")
    # The range in words: from about the middle of lr's span to its largest value.
    words = page.inner_text(".brush-state .ranges")
    low, high = (float(x) for x in words.removeprefix(": lr ").split(" to "))
    assert abs(low - (lo + hi) / 2) < 0.05 * (hi - lo) and abs(high - hi) < 1e-3 * hi
    assert page.locator("figure.curves polyline.dim").count() == 8 - len(kept)
    assert page.locator("svg.scatter circle.on").count() == 3 * len(kept)
    page.evaluate("document.querySelector('.hp-box').scrollIntoView()")
    screenshot(page, "experiment-hparams")

    # The trials table is sorted by the searcher metric, best first; a click reverses it.
    values = [by_id[t]["searcherMetricValue"] for t in table_ids(page)]
    assert values == sorted(values)
    page.locator("th button[data-sort=metric]").click()
    values = [by_id[t]["searcherMetricValue"] for t in table_ids(page)]
    assert values == sorted(values, reverse=True)
    page.locator("th button[data-sort=metric]").click()
    values = [by_id[t]["searcherMetricValue"] for t in table_ids(page)]
    assert values == sorted(values)
    page.locator("th button[data-sort='hp:layers']").click()
    layers = [by_id[t]["hparams"]["layers"] for t in table_ids(page)]
    assert layers == sorted(layers)

    # A second range on the metric axis narrows further; clearing brings every trial back.
    axis = page.locator("rect.brush-area[data-axis=__metric__]")
    axis.scroll_into_view_if_needed()
    box = axis.bounding_box()
    x = box["x"] + box["width"] / 2
    page.mouse.move(x, box["y"] + box["height"] - 1)
    page.mouse.down()
    page.mouse.move(x, box["y"] + box["height"] * 0.5, steps=4)
    page.mouse.up()
    both = table_ids(page)
    assert set(both) <= set(kept)
    page.get_by_role("button", name="Clear ranges").click()
    assert len(table_ids(page)) == 8

    # Scatter of each hyperparameter against the metric, and a heat map of two of them.
    assert page.locator(".scatter-box").count() == 3
    for hp in ("lr", "layers", "optimizer"):
        assert page.locator(f".scatter-box[data-hp={hp}] circle").count() == 8
    page.select_option("select[aria-label='heat map x']", "optimizer")
    page.select_option("select[aria-label='heat map y']", "layers")
    cells = page.locator("svg.heatmap rect.cell")
    combos = {(t["hparams"]["optimizer"], t["hparams"]["layers"]) for t in trials}
    assert cells.count() == len(combos)
    titles = cells.evaluate_all("rs => rs.map(r => r.textContent)")
    assert sum(int(t.rsplit("over ", 1)[1].split()[0]) for t in titles) == 8


def focused(page: Any) -> str:
    return str(page.evaluate("document.activeElement.getAttribute('aria-label')"))


def test_brushing_the_parallel_coordinates_from_the_keyboard(
    search: tuple[ThreadedMaster, int], page: Any
) -> None:
    m, eid = search
    trials = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    lrs = {t["id"]: t["hparams"]["lr"] for t in trials}
    lo, hi = min(lrs.values()), max(lrs.values())
    pos = {t: (v - lo) / (hi - lo) for t, v in lrs.items()}
    optimizer = {t["id"]: t["hparams"]["optimizer"] for t in trials}
    assert set(optimizer.values()) == {"adam", "sgd"}
    login(page, m, f"/det/experiments/{eid}")
    page.wait_for_selector(".trials-box tbody tr")

    # Each axis has a lower and an upper bound, sliders in the tab order.
    lower = page.get_by_role("slider", name="lr lower bound")
    assert lower.get_attribute("aria-valuenow") == "0"
    lower.focus()
    for _ in range(10):  # a twentieth of the axis each
        page.keyboard.press("ArrowUp")
    kept = set(table_ids(page))
    assert kept == {t for t, p in pos.items() if p >= 0.5 - 1e-9} and 0 < len(kept) < 8
    on = page.locator("svg.pcoords polyline.on").evaluate_all("ls => ls.map(l => +l.dataset.trial)")
    assert set(on) == kept
    assert page.inner_text(".brush-state").startswith(f"{len(kept)} of 8 trials selected")
    # The bound keeps the focus through the redraw and says where it is, in lr's terms.
    assert focused(page) == "lr lower bound"
    assert lower.get_attribute("aria-valuenow") == "50"
    assert abs(float(lower.get_attribute("aria-valuetext")) - (lo + hi) / 2) < 1e-3 * hi

    # Tab to the upper bound; Page Down twice: the range is the middle tenth (or less).
    page.keyboard.press("Tab")
    assert focused(page) == "lr upper bound"
    page.keyboard.press("PageDown")
    page.keyboard.press("PageDown")
    assert set(table_ids(page)) == {t for t, p in pos.items() if 0.5 - 1e-9 <= p <= 0.6 + 1e-9}
    assert page.get_by_role("slider", name="lr upper bound").get_attribute("aria-valuenow") == "60"
    # Escape clears the axis: every trial again.
    page.keyboard.press("Escape")
    assert len(table_ids(page)) == 8
    assert page.locator("svg.pcoords rect.brush").count() == 0
    assert focused(page) == "lr upper bound"

    # A categorical axis steps by category: the lower bound up one keeps sgd alone.
    page.keyboard.press("Tab")
    assert focused(page) == "optimizer lower bound"
    page.keyboard.press("ArrowUp")
    assert set(table_ids(page)) == {t for t, o in optimizer.items() if o == "sgd"}
    assert page.inner_text(".brush-state .ranges") == ": optimizer in sgd"
    page.keyboard.press("Home")
    assert len(table_ids(page)) == 8


def test_comparing_two_trials_side_by_side(search: tuple[ThreadedMaster, int], page: Any) -> None:
    m, eid = search
    trials = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    a, b = trials[0], trials[-1]
    login(page, m, f"/det/experiments/{eid}")
    page.wait_for_selector("figure.curves[data-ready-ms]")
    page.get_by_role("checkbox", name=f"compare trial {a['id']}", exact=True).check()
    assert "Pick two" in page.inner_text(".trials-box .compare")
    page.get_by_role("checkbox", name=f"compare trial {b['id']}", exact=True).check()
    page.get_by_role("link", name="Compare 2 trials").click()
    page.wait_for_url(f"**/det/compare?trials={a['id']},{b['id']}")
    page.wait_for_selector("figure.curves[data-ready-ms]")
    # the searcher metric, not "validation.batches" (which sorts first)
    chosen = page.get_by_role("combobox", name="compare metric").input_value()
    assert chosen == "validation.validation_loss"
    assert page.locator("figure.curves polyline").count() == 2
    hp = page.locator("table.hparams")
    assert f"trial {a['id']}" in hp.inner_text() and f"trial {b['id']}" in hp.inner_text()
    for name in ("lr", "layers", "optimizer"):
        cells = hp.locator("tr", has=page.locator(f"th:text-is('{name}')")).locator("td")
        assert cells.all_inner_texts() == [
            page.evaluate("v => num(v)", t["hparams"][name]) for t in (a, b)
        ]
    metrics = page.locator("table.metrics")
    row = metrics.locator("tr", has=page.locator("th:text-is('validation.validation_loss')"))
    assert row.locator("td").all_inner_texts() == [
        page.evaluate(
            "v => num(v)", t["summaryMetrics"]["validation_metrics"]["validation_loss"]["last"]
        )
        for t in (a, b)
    ]
    screenshot(page, "compare")


RUNNING = """
name: running-curves
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss, max_length: {batches: 8}}
hyperparameters: {lr: 0.5}
max_restarts: 0
"""


def test_a_running_experiments_curves_follow_new_validations(
    search: tuple[ThreadedMaster, int], page: Any
) -> None:
    m, _ = search
    go, halfway = threading.Event(), threading.Event()
    more, release = threading.Event(), threading.Event()

    def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        env = spec["env"]
        s = requests.Session()
        s.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
        trial = int(env["DET_TRIAL_ID"])

        def validate(steps: range) -> None:
            for step in steps:
                body = {
                    "trialId": trial,
                    "trialRunId": int(env["DET_TRIAL_RUN_ID"]),
                    "stepsCompleted": step,
                    "metrics": {"avgMetrics": {"validation_loss": 1 / step}},
                }
                r = s.post(
                    f"{master}/api/v1/trials/{trial}/metrics",
                    json={"group": "validation", "metrics": body},
                    timeout=10,
                )
                r.raise_for_status()

        while not (go.is_set() or killed.is_set()):
            killed.wait(0.1)
        validate(range(1, 5))
        halfway.set()
        while not (more.is_set() or killed.is_set()):
            killed.wait(0.1)
        validate(range(5, 9))
        while not (release.is_set() or killed.is_set()):
            killed.wait(0.1)
        return 0

    agent = SimAgent(m.url, m.agent_token, "sim-curves", train=train).start()
    try:
        eid = create(m, RUNNING)
        # Opened before anything is reported: no curve, no error, and the page keeps reading.
        login(page, m, f"/det/experiments/{eid}")
        page.wait_for_selector("h1:has-text('running-curves')")
        page.wait_for_selector(".trials-box > *")  # the trial list is in
        assert page.locator("figure.curves").count() == 0
        assert page.locator(".curve-chart p.muted").count() == 1
        go.set()
        assert halfway.wait(60), "the trial did not report its first validations"
        line = page.locator("figure.curves polyline")

        def points() -> int:
            return len(str(line.get_attribute("points")).split()) if line.count() == 1 else 0

        wait_for(lambda: points() == 4, 30, what="the first validations' curve")
        assert "RUNNING" in page.inner_text(".trials-box tbody tr")
        # The page refreshes itself while the experiment runs: the curve grows.
        more.set()
        wait_for(lambda: points() == 8, 30, what="the curve to follow the new validations")
        release.set()
        page.wait_for_selector("h1 .state-COMPLETED", timeout=60_000)
        assert points() == 8
    finally:
        for event in (go, more, release):
            event.set()
        agent.stop()


def seed_big_experiment(m: ThreadedMaster, db_url: str, trials: int, points: int) -> int:
    """An experiment of ``trials`` trials with ``points`` validations each, written straight
    into the tables (as the ingest path stores them): the render benchmark's input."""
    import psycopg

    eid = create(
        m,
        "name: big\nentrypoint: x\nsearcher: {name: single, metric: loss, max_length: 1000}\n"
        "hyperparameters: {lr: {type: double, minval: 0.001, maxval: 1}}\n",
        activate=False,
    )
    # The searcher creates the single trial of its own (at once or on its next pass).
    wait_for(
        lambda: m.get(f"/api/v1/experiments/{eid}/trials")["trials"], 30, what="the first trial"
    )
    with psycopg.connect(db_url, autocommit=True) as c:
        have = c.execute("SELECT count(*) FROM trials WHERE experiment_id = %s", (eid,)).fetchone()
        c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state,"
            " summary_metrics, searcher_metric, steps_completed)"
            " SELECT %s, 'big-' || g, 'big-' || %s || '-' || g,"
            " jsonb_build_object('lr', g / 1000.0), g, 'COMPLETED',"
            " jsonb_build_object('validation_metrics', jsonb_build_object('loss',"
            "   jsonb_build_object('last', 1.0 / g, 'min', 1.0 / g, 'max', 1.0, 'count', %s,"
            "   'type', 'number'))), 1.0 / g, %s"
            " FROM generate_series(1, %s) g",
            (eid, eid, points, points, trials - have[0]),
        )
        # Finished, so the page does not refresh it while it is measured.
        c.execute("UPDATE experiments SET state = 'COMPLETED' WHERE id = %s", (eid,))
        c.execute(
            "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
            " SELECT t.id, 'validation', s,"
            " jsonb_build_object('avg_metrics', jsonb_build_object('loss',"
            "   1.0 / (1 + s / 100.0) + (t.id %% 17) / 100.0))"
            " FROM trials t, generate_series(1, %s) s WHERE t.experiment_id = %s",
            (points, eid),
        )
    return eid


# What one load of the page spent, from its own clock (ms since the navigation began) and its
# resource timings: the page and its scripts (DOMContentLoaded), GetExperiment, the time-series
# requests (first start, last end, bytes), the trial list (start, end), when the drawing began
# and how long building the chart took, and the curves laid out and painted (two animation
# frames after the chart is in).
LOAD_FIGURES = """fig => {
  const res = performance.getEntriesByType('resource');
  const series = res.filter(e => e.name.includes('/trials/time-series'));
  const exp = res.find(e => /\\/experiments\\/\\d+$/.test(e.name));
  const list = res.find(e => /\\/experiments\\/\\d+\\/trials$/.test(e.name));
  const nav = performance.getEntriesByType('navigation')[0];
  return {
    ready: +fig.dataset.readyMs,
    start: +fig.dataset.startMs,
    draw: +fig.dataset.drawMs,
    dom: nav.domContentLoadedEventEnd,
    experiment: [exp.startTime, exp.responseEnd],
    series: [Math.min(...series.map(e => e.startTime)), Math.max(...series.map(e => e.responseEnd))],
    seriesBytes: series.reduce((a, e) => a + e.transferSize, 0),
    list: [list.startTime, list.responseEnd],
  };
}"""


def test_render_time_of_100_trials_by_1000_points(
    search: tuple[ThreadedMaster, int], module_db: str, page: Any
) -> None:
    m, _ = search
    eid = seed_big_experiment(m, module_db, 100, 1000)
    login(page, m, "/det/")
    runs = []
    for _ in range(5):
        page.goto(f"{m.url}/det/experiments/{eid}")
        fig = page.wait_for_selector("figure.curves[data-ready-ms]", timeout=60_000)
        page.wait_for_selector(".trials-box tbody tr", timeout=60_000)  # the list's timings too
        runs.append(fig.evaluate(LOAD_FIGURES))
    # The chart of 100 curves: a canvas under the SVG axes, every curve on it, each sampled by
    # the master to 500 points (a budget of 50,000 over 100 trials), first and last batches
    # kept: every curve spans batches 1 to 1000.
    fig = page.locator("figure.curves")
    assert fig.get_attribute("data-series") == "100", page.inner_text("#error")
    assert set(fig.get_attribute("data-series-points").split(",")) == {"500"}
    assert fig.get_attribute("data-x") == "1,1000"
    assert fig.locator("polyline").count() == 0
    painted = fig.locator("canvas").evaluate(
        "c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        " let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n / (d.length / 4); }"
    )
    assert painted > 0.05, painted
    # No per-line titles on a canvas: the point nearest the pointer is named in the caption.
    plot = fig.locator(".plot").bounding_box()
    readout = fig.locator(".readout")
    x = plot["x"] + plot["width"] * 0.5
    for step in range(60):
        page.mouse.move(x, plot["y"] + plot["height"] * step / 60)
        if readout.inner_text():
            break
    named = re.fullmatch(r"trial (\d+): [\d.e-]+ at (\d+)", readout.inner_text())
    assert named and 1 <= int(named[2]) <= 1000, readout.inner_text()
    trial_ids = {t["id"] for t in m.get(f"/api/v1/experiments/{eid}/trials?limit=200")["trials"]}
    assert int(named[1]) in trial_ids
    # The rest of the page, which waits for the trial list: a row per trial.
    assert page.locator(".trials-box tbody tr").count() == 100
    screenshot(page, "experiment-large")
    # A range on lr: the canvas is redrawn with the trials outside it in grey.
    page.get_by_role("slider", name="lr lower bound").focus()
    page.keyboard.press("PageUp")
    kept = page.locator(".trials-box tbody tr").count()
    assert 0 < kept < 100
    assert fig.get_attribute("data-dimmed") == str(100 - kept)
    # How long a brush takes to redraw the page (curves, parallel coordinates, scatters, heat
    # map, table) and have it painted: a key on lr's upper bound, three times.
    redraws = [
        page.evaluate(
            """() => new Promise((done) => {
              const bound = [...document.querySelectorAll('svg.pcoords .handle')]
                .find((x) => x.getAttribute('aria-label') === 'lr upper bound');
              const t0 = performance.now();
              bound.dispatchEvent(new KeyboardEvent('keydown', { key: 'ArrowDown', bubbles: true }));
              requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t0)));
            })"""
        )
        for _ in range(3)
    ]
    assert page.get_by_role("slider", name="lr upper bound").get_attribute("aria-valuenow") == "85"

    def med(f: Any) -> float:
        return round(statistics.median(f(r) for r in runs), 1)

    figures = {
        "ready_ms": med(lambda r: r["ready"]),
        "page_and_scripts_ms": med(lambda r: r["dom"]),
        "experiment_get_ms": med(lambda r: r["experiment"][1] - r["experiment"][0]),
        "series_start_ms": med(lambda r: r["series"][0]),
        "series_end_ms": med(lambda r: r["series"][1]),
        "series_requests_ms": med(lambda r: r["series"][1] - r["series"][0]),
        # API: from the page's first request to the last series answer (what the curves wait
        # for); render: from there to the curves painted (JSON parsing, drawing, layout).
        "api_ms": med(lambda r: r["series"][1] - r["experiment"][0]),
        "render_ms": med(lambda r: r["ready"] - r["series"][1]),
        # render = parse (the answers' JSON into points) + draw + layout and paint
        "parse_ms": med(lambda r: r["start"] - r["series"][1]),
        "draw_ms": med(lambda r: r["draw"]),
        "layout_paint_ms": med(lambda r: r["ready"] - r["start"] - r["draw"]),
        "trial_list_ms": med(lambda r: r["list"][1] - r["list"][0]),
        "trial_list_end_ms": med(lambda r: r["list"][1]),
        "series_bytes": med(lambda r: r["seriesBytes"]),
        "brush_redraw_ms": round(statistics.median(redraws), 1),
    }
    print(
        f"\nBENCH webui 100 trials x 1000 points (median of {len(runs)} loads): "
        + json.dumps(figures)
        + "\nBENCH loads (painted; the first with the master's series cache cold): "
        + json.dumps([round(r["ready"]) for r in runs])
        + "\nBENCH first load: "
        + json.dumps(
            {
                "ready_ms": round(runs[0]["ready"]),
                "api_ms": round(runs[0]["series"][1] - runs[0]["experiment"][0]),
                "render_ms": round(runs[0]["ready"] - runs[0]["series"][1]),
            }
        )
    )


def test_comparing_experiments_by_their_best_trials(
    search: tuple[ThreadedMaster, int], module_db: str, page: Any
) -> None:
    m, eid = search
    other = seed_big_experiment(m, module_db, 2, 10)
    best = {e: m.get(f"/api/v1/experiments/{e}")["experiment"]["bestTrialId"] for e in (eid, other)}
    login(page, m, "/det/experiments")
    for e in (eid, other):
        page.get_by_role("checkbox", name=f"select {e}", exact=True).check()
    page.get_by_role("link", name="Compare 2").click()
    page.wait_for_url("**/det/compare?experiments=*")
    page.wait_for_selector("figure.curves[data-ready-ms]")
    assert "Compare 2 experiments" in page.inner_text("h1")
    heads = page.locator("table.hparams thead th").all_inner_texts()
    assert heads[1:] == [
        f"trial {best[eid]} (experiment {eid})",
        f"trial {best[other]} (experiment {other})",
    ]
    rows = page.locator("table.hparams tbody th").all_inner_texts()
    assert rows == ["layers", "lr", "optimizer"]


def test_forking_an_experiment_from_its_page(search: tuple[ThreadedMaster, int], page: Any) -> None:
    """Fork: the config is edited first, the new experiment records its parent, and its page
    links back to it (last in this module: the fork joins the experiment list)."""
    m, eid = search
    login(page, m, f"/det/experiments/{eid}")
    page.get_by_role("button", name="Fork", exact=True).click()
    area = page.get_by_role("textbox", name="fork config")
    assert "searcher" in area.input_value()
    area.evaluate("el => { el.value = el.value.replace(/^name: .*$/m, 'name: forked-in-ui'); }")
    page.get_by_role("button", name="Create fork").click()
    page.wait_for_url(re.compile(rf".*/det/experiments/(?!{eid}$)\d+$"))
    fork_id = int(page.url.rsplit("/", 1)[1])
    made = m.get(f"/api/v1/experiments/{fork_id}")["experiment"]
    assert (made["name"], made["forkedFrom"]) == ("forked-in-ui", eid)
    page.get_by_role("link", name=f"experiment {eid}", exact=True).wait_for()
    screenshot(page, "fork")
