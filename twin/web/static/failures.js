// Failures page: criticality ranking, effective training time and the redundancy table of the job's scenario.
"use strict";
(() => {
  const state = { job: twin.params.get("job") || "", data: null, charts: {} };
  window.twinFailures = state;

  function render(d) {
    state.data = d;
    document.getElementById("ett").textContent = twin.fmt(d.effective_training_time_pct, 4) + " %";
    document.getElementById("interruptions").textContent = twin.fmt(d.expected_interruptions_per_day, 3);
    document.getElementById("mtbi").textContent = twin.fmt(d.mean_time_between_interruptions_h, 3) + " h";
    document.getElementById("checkpoint").textContent = twin.fmt(d.optimal_checkpoint_interval_s / 60, 3) + " min";
    document.getElementById("formula").textContent = `${d.scenario}, ${d.num_gpus.toLocaleString()} GPUs, step ` +
      `${twin.fmt(d.step_time_s, 4)} s. ${d.formula || ""}. Planned: ${d.planned_source || ""}`;
    twin.table(document.getElementById("ranking"), [
      { key: "component", label: "component" }, { key: "count", label: "count", num: true },
      { key: "events_per_day", label: "events/day", num: true },
      { key: "expected_cost_h_per_day", label: "cost h/day", num: true },
      { key: "share_pct", label: "share %", num: true, fmt: (v) => twin.fmt(v, 3) },
      { key: "cost_per_event_s", label: "cost/event (s)", num: true }, { key: "outcome", label: "outcome" },
      { key: "worst_mode", label: "worst mode" }], d.ranking);
    twin.table(document.getElementById("redundancy"), [
      { key: "variant", label: "variant" }, { key: "description", label: "what" },
      { key: "effective_training_time_pct", label: "ETT %", num: true, fmt: (v) => twin.fmt(v, 5) },
      { key: "delta_ett_pct_points", label: "Δ ETT (points)", num: true },
      { key: "goodput_gain_pct", label: "goodput gain %", num: true },
      { key: "goodput_per_gpu_owned_gain_pct", label: "per GPU owned %", num: true }], d.redundancy);
    document.getElementById("notes").replaceChildren(...(d.notes || []).map((n) => twin.el("li", { class: "muted" }, n)));
    const lost = d.time_lost_pct || {};
    const labels = Object.keys(lost);
    const data = { labels, datasets: [{ label: "% of wall time lost", data: labels.map((k) => lost[k]), backgroundColor: "#d62728" }] };
    if (state.charts.lost) { state.charts.lost.data = data; state.charts.lost.update("none"); return; }
    state.charts.lost = new Chart(document.getElementById("lost-chart"), { type: "bar", data,
      options: { animation: false, maintainAspectRatio: false, plugins: { legend: { display: false } },
        scales: { y: { title: { display: true, text: "% of wall-clock time" } } } } });
  }

  const load = twin.serial(async () => {
    try {
      const d = await twin.api("/api/failures" + (state.job ? "?job=" + encodeURIComponent(state.job) : ""));
      state.job = d.job;
      twin.jobSelect(d.jobs, d.job, (job) => { state.job = job; load(); });
      render(d);
      twin.showError(null);
      state.loaded = (state.loaded || 0) + 1;
    } catch (err) { twin.showError(err); }
  });
  twin.on("live", () => { if (!state.data) load(); });
  load();
})();
