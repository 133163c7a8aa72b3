// Fabric page: the topology (Cytoscape.js), coloured by live state, with evidence and the failed parts.
"use strict";
(() => {
  const COLOURS = { up: "#2e9d4a", degraded: "#e69500", down: "#d62728", nodata: "#9aa0a6" };
  const state = { job: twin.params.get("job") || "", at: twin.params.get("at") || "", data: null, cy: null };
  window.twinFabric = state;  // for the browser tests and the curious

  const cy = cytoscape({
    container: document.getElementById("graph"),
    wheelSensitivity: 0.3,
    style: [
      { selector: "node", style: {
        "background-color": (n) => COLOURS[n.data("state")] || COLOURS.nodata,
        label: "data(label)", "text-wrap": "wrap", "text-max-width": 110, "font-size": 10, "text-valign": "center",
        "text-halign": "center", color: "#fff", "text-outline-width": 1.5,
        "text-outline-color": (n) => COLOURS[n.data("state")] || COLOURS.nodata,
        shape: "round-rectangle", width: 96, height: 40 } },
      { selector: "node[kind = 'switches']", style: { shape: "rectangle", width: 220, height: 34,
        "background-color": "#57606a", "text-outline-color": "#57606a" } },
      { selector: "node[kind = 'gpu'], node[kind = 'nic']", style: { width: 64, height: 32 } },
      { selector: "node[kind = 'memory']", style: { shape: "barrel", "background-color": "#6e40c9",
        "text-outline-color": "#6e40c9" } },
      { selector: "edge", style: { width: 2.5, "curve-style": "straight",
        "line-color": (e) => COLOURS[e.data("state")] || COLOURS.nodata } },
      { selector: "edge[state = 'down']", style: { width: 5, "line-style": "dashed" } },
      { selector: "edge[state = 'degraded']", style: { width: 4 } },
      { selector: "edge[kind = 'pcie']", style: { width: 1, "line-color": "#c9d1d9" } },
      { selector: ":selected", style: { "border-width": 3, "border-color": "#0969da" } },
    ],
  });
  state.cy = cy;

  // Preset positions: the switches on top, the boxes in a grid below (node view: GPUs, NICs, leaf).
  function positions(elements) {
    const nodes = elements.filter((e) => !e.data.source);
    const pos = {};
    const boxes = nodes.filter((n) => n.data.kind === "group" || n.data.kind === "node");
    const cols = Math.max(1, Math.ceil(Math.sqrt(boxes.length * 2)));
    boxes.forEach((n, i) => { pos[n.data.id] = { x: (i % cols) * 120, y: 120 + Math.floor(i / cols) * 70 }; });
    const width = (Math.min(cols, boxes.length) - 1) * 120;
    const gpus = nodes.filter((n) => n.data.kind === "gpu");
    const nics = nodes.filter((n) => n.data.kind === "nic");
    gpus.forEach((n, i) => { pos[n.data.id] = { x: i * 80, y: 110 }; });
    nics.forEach((n, i) => { pos[n.data.id] = { x: i * 80, y: 210 }; });
    const rowWidth = Math.max(gpus.length, nics.length, 1) * 80 - 80;
    for (const n of nodes) {
      if (n.data.id === "switches") pos[n.data.id] = { x: width / 2, y: 0 };
      if (n.data.id === "scaleup") pos[n.data.id] = { x: rowWidth / 2, y: 0 };
      if (n.data.id === "leaf") pos[n.data.id] = { x: rowWidth / 2, y: 320 };
      if (n.data.id === "memory") pos[n.data.id] = { x: rowWidth + 140, y: 0 };
    }
    return pos;
  }

  function evidenceOf(data) {
    const view = state.data && state.data.view;
    const byId = {};
    for (const c of (view && view.components) || []) byId[c.id] = c;
    const box = document.getElementById("evidence");
    box.classList.remove("muted");
    const parts = [twin.el("div", {}, twin.el("b", {}, data.label || data.id), " ", twin.badge(data.state))];
    if (data.detail) {
      for (const [k, v] of Object.entries(data.detail)) {
        if (v === null || v === undefined || (typeof v === "object" && !Object.keys(v).length)) continue;
        parts.push(twin.el("div", { class: "muted" }, `${k.replace(/_/g, " ")}: ${twin.readable(v)}`));
      }
    }
    for (const id of data.components || []) {
      const c = byId[id];
      if (!c) continue;
      parts.push(twin.el("div", {}, twin.el("code", {}, c.id), " ", twin.badge(c.state),
        ` capacity ${twin.pct(c.capacity)}`));
      for (const e of c.evidence || []) {
        parts.push(twin.el("div", { class: "state-" + (e.severity === "info" ? "nodata" : e.severity) }, "• " + e.text));
      }
    }
    if (data.kind === "uplink" || (data.source && !data.components)) {
      parts.push(twin.el("div", { class: "muted" }, "the links of this group into the fabric: the worst of its ports and transceivers"));
    }
    box.replaceChildren(...parts);
  }

  cy.on("mouseover tap", "node, edge", (ev) => evidenceOf(ev.target.data()));
  cy.on("tap", "node", (ev) => {
    const at = ev.target.data("at");
    if (at) go(at);
  });
  document.getElementById("up").addEventListener("click", () => {
    const up = state.data && state.data.view.up;
    if (up) go(up);
  });

  function go(at) {
    state.at = at;
    twin.params.set("at", at);
    history.replaceState(null, "", "?" + twin.params.toString());
    load();
  }

  function render(data) {
    state.data = data;
    const view = data.view;
    document.getElementById("title").textContent = view.title;
    document.getElementById("crumb").textContent = view.band > 1 ? `(${view.items} items, ${view.band} to a box)` : "";
    document.getElementById("up").disabled = !view.up;
    document.getElementById("placement").textContent = "Placement: " + data.placement +
      (data.unplaced.length ? `; unplaced: ${data.unplaced.join(", ")}` : "");
    const key = view.at;
    if (cy.scratch("at") !== key) {
      cy.elements().remove();
      cy.add(view.elements);
      const pos = positions(view.elements);
      cy.layout({ name: "preset", positions: (n) => pos[n.id()] || { x: 0, y: 0 }, fit: true, padding: 30 }).run();
      cy.scratch("at", key);
    } else {
      for (const e of view.elements) {
        const existing = cy.getElementById(e.data.id);
        if (existing.nonempty()) existing.data(e.data); else cy.add(e);
      }
    }
    const list = document.getElementById("problems");
    document.getElementById("problem-count").textContent = data.problems.length;
    list.replaceChildren(...data.problems.map((c) => {
      const li = twin.el("li", { class: "state-" + c.state, "data-id": c.id },
        twin.badge(c.state), " ", twin.el("code", {}, c.id), ` ${c.kind} · capacity ${twin.pct(c.capacity)}`);
      for (const e of c.evidence || []) if (e.severity !== "info") li.append(twin.el("div", { class: "muted" }, e.text));
      li.addEventListener("click", () => evidenceOf({ id: c.id, label: c.id, state: c.state, components: [c.id] }));
      return li;
    }));
    const counts = Object.entries(data.counts).map(([kind, per]) => ({ kind, ...per }));
    twin.table(document.getElementById("counts"), [
      { key: "kind", label: "kind" }, { key: "up", label: "up", num: true }, { key: "degraded", label: "degraded", num: true },
      { key: "down", label: "down", num: true }], counts);
    const s = data.summary;
    const tiers = s.tiers.map((t) => ({ ...t }));
    const box = document.getElementById("summary");
    box.replaceChildren(
      twin.el("div", {}, `${s.num_gpus.toLocaleString()} GPUs in ${s.nodes.toLocaleString()} nodes of ${s.gpus_per_node}, ` +
        `${s.nics_per_node} NICs each`),
      twin.el("div", { class: "muted" }, `scale-up: ${s.scale_up.kind || "–"} ${s.scale_up.domain_gpus || ""} GPUs a domain, ` +
        `${s.scale_up.domains || "–"} domains`),
      twin.el("div", { class: "muted" }, `scale-out: ${s.scale_out.kind || "–"} ${s.scale_out.topology || ""}, ` +
        `${(s.scale_out.switches || 0).toLocaleString()} switches, ${(s.scale_out.links || 0).toLocaleString()} links`));
    const tierBox = twin.el("div");
    twin.table(tierBox, [{ key: "name", label: "tier" }, { key: "span_gpus", label: "GPUs a group", num: true },
      { key: "switches", label: "switches", num: true }, { key: "bw_GBps_per_gpu", label: "GB/s per GPU", num: true },
      { key: "oversubscription", label: "oversub.", num: true }], tiers);
    box.append(tierBox);
    if (s.optics) box.append(twin.el("div", { class: "muted" }, `optics: ${s.optics.kind}, ${s.optics.pj_per_bit} pJ/bit, ` +
      `${twin.fmt(s.optics.expected_link_failures_per_year)} link failures a year`));
    if (s.memory) box.append(twin.el("div", { class: "muted" }, `memory pool: ${s.memory.kind}, ${s.memory.devices} devices, ` +
      `${s.memory.capacity_gib_per_gpu} GiB per GPU`));
    twin.table(document.getElementById("events"), [
      { key: "time_ns", label: "time", fmt: (v) => new Date(v / 1e6).toLocaleTimeString() },
      { key: "component", label: "component" }, { key: "new", label: "now", value: (r) => twin.badge(r.new) },
      { key: "why", label: "why" }], data.events.slice(0, 12));
  }

  const load = twin.serial(async () => {
    try {
      const q = new URLSearchParams();
      if (state.job) q.set("job", state.job);
      if (state.at) q.set("at", state.at);
      const data = await twin.api("/api/fabric?" + q.toString());
      state.job = data.job;
      twin.jobSelect(data.jobs, data.job, (job) => { state.job = job; state.at = ""; cy.scratch("at", null); load(); });
      render(data);
      twin.showError(null);
      state.loaded = (state.loaded || 0) + 1;
    } catch (err) {
      twin.showError(err);
    }
  });

  twin.on("live", () => load());
  load();
})();
