// Step page: the step "as designed" and "now" side by side, their parts, observations over time, calibration.
"use strict";
(() => {
  const state = { job: twin.params.get("job") || "", data: null, charts: {} };
  window.twinStep = state;
  const s = (x) => twin.unit(x, "s", 4);
  // How sure the twin is (twin.core.intervals): the 80% and 95% ranges and what they rest on.
  const range = (iv) => (iv ? `80%: ${twin.fmt(iv.p80_low_s, 3)}–${twin.fmt(iv.p80_high_s, 3)} s, ` +
    `95%: ${twin.fmt(iv.p95_low_s, 3)}–${twin.fmt(iv.p95_high_s, 3)} s (${iv.basis}` +
    `${iv.widened && iv.widened.length ? "; widened: " + iv.widened.join(", ") : ""})` : "");

  function partsChart(data) {
    const parts = data.parts.filter((p) => p.designed > 0 || p.now > 0);
    const palette = ["#0969da", "#54aeff", "#d62728", "#ff7f0e", "#e69500", "#bf8700", "#8250df", "#a475f9",
      "#57606a", "#2e9d4a", "#6e7781", "#cf222e"];
    const datasets = parts.map((p, i) => ({ label: p.label, data: [p.designed, p.now], backgroundColor: palette[i % palette.length] }));
    if (state.charts.parts) {
      state.charts.parts.data.datasets = datasets;
      state.charts.parts.update("none");
      return;
    }
    state.charts.parts = new Chart(document.getElementById("parts-chart"), {
      type: "bar", data: { labels: ["as designed", "now"], datasets },
      options: { indexAxis: "y", animation: false, maintainAspectRatio: false,
        scales: { x: { stacked: true, title: { display: true, text: "seconds per step" } }, y: { stacked: true } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 10, font: { size: 10 } } } } },
    });
  }

  function historyChart(data) {
    // The stored history spans restarts and hours: minutes on the axis past ten of them.
    const t0 = data.history.length ? data.history[0].t : 0;
    const span = data.history.length ? data.history[data.history.length - 1].t - t0 : 0;
    const [scale, unit] = span > 600 ? [60, "minutes"] : [1, "seconds"];
    const series = (key) => data.history.filter((h) => h[key] !== null).map((h) => ({ x: (h.t - t0) / scale, y: h[key] }));
    const datasets = [
      { label: "observed", data: series("observed_s"), borderColor: "#1f2328", backgroundColor: "#1f2328", showLine: true },
      { label: "predicted now", data: series("now_s"), borderColor: "#d62728", backgroundColor: "#d62728", showLine: true, stepped: true },
      { label: "as designed", data: series("designed_s"), borderColor: "#2e9d4a", backgroundColor: "#2e9d4a", showLine: true, stepped: true },
    ];
    if (state.charts.history) {
      state.charts.history.data.datasets = datasets;
      state.charts.history.options.scales.x.title.text = `${unit} since the first sample`;
      state.charts.history.update("none");
      return;
    }
    state.charts.history = new Chart(document.getElementById("history-chart"), {
      type: "scatter", data: { datasets },
      options: { animation: false, maintainAspectRatio: false,
        scales: { x: { title: { display: true, text: `${unit} since the first sample` } },
          y: { title: { display: true, text: "step time (s)" } } } },
    });
  }

  function render(data) {
    state.data = data;
    document.getElementById("designed-step").textContent = s(data.designed_step_time_s);
    document.getElementById("now-step").textContent = s(data.now_step_time_s);
    document.getElementById("designed-range").textContent = range(data.designed_interval);
    document.getElementById("now-range").textContent = range(data.now_interval);
    document.getElementById("slowdown").textContent = data.slowdown === null ? "–" : (data.slowdown >= 0 ? "+" : "") + twin.pct(data.slowdown);
    document.getElementById("observed-step").textContent = data.observations ? s(data.observed_step_time_s) : "no report yet";
    document.getElementById("divergence").textContent = data.observations
      ? `${data.observations} reports; vs now ${twin.pct(data.divergence_now)}, vs designed ${twin.pct(data.divergence_designed)}` : "";
    twin.table(document.getElementById("parts"), [
      { key: "label", label: "part" }, { key: "designed", label: "as designed (s)", num: true, fmt: (v) => twin.fmt(v, 4) },
      { key: "now", label: "now (s)", num: true, fmt: (v) => twin.fmt(v, 4) },
      { key: "delta", label: "now − designed", num: true, value: (r) => r.now - r.designed, fmt: (v) => twin.fmt(v, 3) }],
      data.parts.filter((p) => p.designed > 0 || p.now > 0));
    partsChart(data);
    historyChart(data);
    twin.table(document.getElementById("tiers"), [
      { key: "tier", label: "tier" }, { key: "capacity", label: "usable", num: true, fmt: (v) => twin.pct(v) },
      { key: "limited_by", label: "limited by" },
      { key: "down", label: "down", value: (r) => r.down.join(", ") }, { key: "degraded", label: "degraded", value: (r) => r.degraded.join(", ") }],
      data.tiers);
    document.getElementById("notes").replaceChildren(...data.notes.map((n) => twin.el("li", { class: "muted" }, n)));
    const cal = data.calibration || {};
    twin.table(document.getElementById("calibration"), [{ key: "k", label: "factor" }, { key: "v", label: "fitted", num: true },
      { key: "n", label: "now (with live tiers)", num: true }],
      ["compute_efficiency", "scale_up_bandwidth", "scale_out_bandwidth"].map((k) => ({ k, v: cal[k], n: (data.now_calibration || {})[k] })));
    twin.table(document.getElementById("calibration-history"), [
      { key: "time_ns", label: "when", fmt: (v) => (v ? new Date(v / 1e6).toLocaleString() : "–") },
      { key: "factor", label: "factor" }, { key: "old", label: "from", num: true }, { key: "new", label: "to", num: true },
      { key: "reason", label: "why" }], (data.calibration_history || []).slice().reverse());
  }

  const load = twin.serial(async () => {
    try {
      const data = await twin.api("/api/step" + (state.job ? "?job=" + encodeURIComponent(state.job) : ""));
      state.job = data.job;
      twin.jobSelect(data.jobs, data.job, (job) => { state.job = job; load(); });
      render(data);
      twin.showError(null);
      state.loaded = (state.loaded || 0) + 1;
    } catch (err) { twin.showError(err); }
  });
  twin.on("live", () => load());
  load();
})();
