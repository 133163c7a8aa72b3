// Sweeps page: start a sweep (the server's sweep engine) or load a rows file; progress, a sortable table, plots.
"use strict";
(() => {
  const EXAMPLE = `name: tp-pp-on-256-h100
base:
  cluster: {system: DGX-H100, num_gpus: 256}
  model: llama3.1-70b
  plan: {gbs: 256, precision: bf16}
axes:
  - {path: plan.tp, values: [2, 4, 8]}
  - {path: plan.pp, values: [1, 2, 4]}
mode: grid
objective: {metric: step_time_s, top: 5}
`;
  const state = { current: null, sort: null, order: "asc", data: null, charts: {} };
  window.twinSweeps = state;
  const spec = document.getElementById("spec");
  spec.value = EXAMPLE;

  function progress(job) {
    const bar = document.getElementById("progress");
    bar.max = Math.max(1, job.total);
    bar.value = job.done;
    document.getElementById("current").textContent =
      `${job.name} (${job.id}): ${job.state}, ${job.done.toLocaleString()} of ${job.total.toLocaleString()} points, ` +
      `${job.failed.toLocaleString()} infeasible, ${twin.fmt(job.elapsed_s, 3)} s` + (job.error ? ` — ${job.error}` : "");
    document.getElementById("current").dataset.state = job.state;
  }

  function listing(sweeps) {
    twin.table(document.getElementById("sweeps"), [
      { key: "id", label: "id" }, { key: "name", label: "name" }, { key: "state", label: "state" },
      { key: "done", label: "done", num: true }, { key: "total", label: "points", num: true },
      { key: "open", label: "", value: (r) => { const b = twin.el("button", { type: "button" }, "show"); b.onclick = () => show(r.id); return b; } }],
      sweeps);
  }

  function chart(id, config) {
    if (state.charts[id]) state.charts[id].destroy();
    state.charts[id] = new Chart(document.getElementById(id), config);
  }

  // Pareto: one series per value of the sweep's first non-numeric axis (a fabric, a system: the server's
  // pareto.group), each its own colour and marker, and the front as a line over them.
  const MARKERS = ["circle", "triangle", "rect", "rectRot", "star", "crossRot", "cross", "rectRounded", "line", "dash"];
  function paretoSeries(p, front) {
    const pts = p.pareto.points.map(([x, y, id, g]) => ({ x, y, id, g }));
    const groups = [...new Set(pts.map((q) => q.g))];
    const name = p.pareto.group ? p.pareto.group.replace(/^axis:/, "") : "";
    const series = groups.map((g, i) => ({
      label: name ? `${name} = ${g}` : "feasible points", data: pts.filter((q) => q.g === g),
      backgroundColor: name ? PALETTE[i % PALETTE.length] : "rgba(9,105,218,0.35)",
      borderColor: name ? PALETTE[i % PALETTE.length] : "rgba(9,105,218,0.35)",
      pointStyle: MARKERS[i % MARKERS.length], pointRadius: 4 }));
    series.push({ label: "Pareto front", data: pts.filter((q) => front.has(q.id)).sort((a, b) => a.x - b.x),
      borderColor: "#1f2328", backgroundColor: "rgba(0,0,0,0)", pointRadius: 7, pointStyle: "circle", showLine: true });
    return series;
  }
  const PALETTE = ["#0969da", "#d62728", "#2e9d4a", "#ff7f0e", "#8250df", "#bf8700", "#54aeff", "#a475f9",
    "#57606a", "#e69500", "#6e7781", "#cf222e"];

  function plots(p) {
    const front = new Set(p.pareto.front);
    chart("pareto", { type: "scatter", data: { datasets: paretoSeries(p, front) },
      options: { animation: false, maintainAspectRatio: false, scales: {
        x: { title: { display: true, text: "average power (kW)" } }, y: { title: { display: true, text: "tokens/s" } } } } });
    const palette = ["#0969da", "#54aeff", "#d62728", "#ff7f0e", "#e69500", "#bf8700", "#8250df", "#a475f9", "#57606a",
      "#2e9d4a", "#6e7781", "#cf222e"];
    const parts = p.breakdown.parts.filter((part) => p.breakdown.points.some((q) => q[part.key] > 0));
    chart("breakdown", { type: "bar", data: { labels: p.breakdown.points.map((q) => "#" + q.point_id),
      datasets: parts.map((part, i) => ({ label: part.label, data: p.breakdown.points.map((q) => q[part.key]),
        backgroundColor: palette[i % palette.length] })) },
      options: { animation: false, maintainAspectRatio: false, scales: { x: { stacked: true },
        y: { stacked: true, title: { display: true, text: "seconds per step" } } },
        plugins: { legend: { position: "bottom", labels: { boxWidth: 10, font: { size: 10 } } } } } });
    const xLabel = p.scaling.x ? p.scaling.x.replace(/^axis:/, "") : "";
    document.getElementById("scaling-note").textContent = p.scaling.x
      ? `best throughput per ${xLabel}` : "no numeric axis and one GPU count: nothing scales";
    chart("scaling", { type: "scatter", data: { datasets: [{ label: "best tokens/s", data: p.scaling.points.map(([x, y]) => ({ x, y })),
      showLine: true, borderColor: "#2e9d4a", backgroundColor: "#2e9d4a" }] },
      options: { animation: false, maintainAspectRatio: false, scales: {
        x: { title: { display: true, text: xLabel || "–" } }, y: { title: { display: true, text: "tokens/s" } } } } });
  }

  function rowsTable(d) {
    const axes = d.axes.map((a) => ({ key: "axis:" + a, label: a }));
    const cols = [{ key: "point_id", label: "#", num: true }, ...axes,
      { key: "step_time_s", label: "step (s)", num: true, fmt: (v) => twin.fmt(v, 4) },
      { key: "tokens_per_s", label: "tokens/s", num: true }, { key: "mfu", label: "MFU", num: true, fmt: (v) => twin.pct(v) },
      { key: "memory_gib", label: "GiB/GPU", num: true }, { key: "power_kw", label: "kW", num: true },
      { key: "reason", label: "infeasible because", value: (r) => (r.feasible ? "" : r.reason || "infeasible") }];
    document.getElementById("row-count").textContent = `${d.table.length.toLocaleString()} of ${d.rows_total.toLocaleString()}`;
    twin.table(document.getElementById("table"), cols, d.table, { key: d.sort, order: d.order }, (key) => {
      state.order = state.sort === key && state.order === "asc" ? "desc" : "asc";
      state.sort = key;
      show(state.current);
    });
  }

  const show = async (id) => {
    try {
      state.current = id;
      const q = new URLSearchParams({ order: state.order });
      if (state.sort) q.set("sort", state.sort);
      const d = await twin.api(`/api/sweeps/${id}?` + q.toString());
      state.data = d;
      state.sort = d.sort;
      progress(d);
      rowsTable(d);
      plots(d.plots);
      state.shown = (state.shown || 0) + 1;
      twin.showError(null);
    } catch (err) { twin.showError(err); }
  };

  document.getElementById("start").addEventListener("click", async () => {
    try {
      const job = await twin.api("/api/sweeps", { method: "POST", body: spec.value, headers: { "Content-Type": "application/yaml" } });
      state.current = job.id;
      state.sort = null;
      progress(job);
      twin.showError(null);
    } catch (err) { twin.showError(err); }
  });
  document.getElementById("stop").addEventListener("click", async () => {
    if (state.current) await twin.api(`/api/sweeps/${state.current}`, { method: "DELETE" }).catch(twin.showError);
  });
  document.getElementById("file").addEventListener("change", async (ev) => {
    const file = ev.target.files[0];
    if (!file) return;
    try {
      const job = await twin.api("/api/sweeps/load?name=" + encodeURIComponent(file.name), { method: "POST", body: file });
      state.sort = null;
      await show(job.id);
    } catch (err) { twin.showError(err); }
  });

  twin.on("sweep", (data) => {
    listing(data.sweeps);
    const job = data.sweeps.find((s) => s.id === state.current);
    if (!job) return;
    progress(job);
    if (job.state !== "running" && state.shownFor !== job.id + job.state) {
      state.shownFor = job.id + job.state;
      show(job.id);
    }
  });
  twin.api("/api/sweeps").then((d) => listing(d.sweeps)).catch(twin.showError);
})();
