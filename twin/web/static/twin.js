// Fabric Twin web view: what every page shares (fetching JSON, the event stream, tables, numbers).
"use strict";
const twin = (() => {
  const params = new URLSearchParams(location.search);
  const listeners = { live: [], sweep: [] };
  let source = null;

  async function api(path, options) {
    // X-Twin-Request: what the server asks of a state change (twin/web/request_guard.py): a page
    // on another origin cannot send it without a preflight the server never answers.
    const opts = Object.assign({ credentials: "same-origin" }, options || {});
    opts.headers = Object.assign({ "X-Twin-Request": "1" }, opts.headers || {});
    const response = await fetch(path, opts);
    const text = await response.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = { error: { rule: text } }; }
    if (!response.ok) {
      const err = (body && body.error) || {};
      const e = new Error((err.field ? err.field + ": " : "") + (err.rule || response.statusText));
      e.status = response.status;
      throw e;
    }
    return body;
  }

  const RETRY_MS = 5000;  // twin.web.web_app.EVENT_RETRY_S

  function connect() {
    if (source) return;
    source = new EventSource("/events");
    const dot = document.getElementById("live-dot");
    source.onopen = () => dot && dot.classList.add("on");
    source.onerror = () => {
      if (dot) dot.classList.remove("on");
      // A refused stream (429 past the server's stream limit, or the server restarting) is
      // closed for good by the browser: open a new one after the Retry-After the server sends.
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        setTimeout(connect, RETRY_MS);
      }
    };
    for (const kind of Object.keys(listeners)) {
      source.addEventListener(kind, (ev) => {
        const data = JSON.parse(ev.data);
        for (const fn of listeners[kind]) fn(data);
      });
    }
  }

  function on(kind, fn) { listeners[kind].push(fn); connect(); }

  function fmt(x, digits) {
    if (x === null || x === undefined || x === "") return "–";
    if (typeof x !== "number") return String(x);
    const d = digits === undefined ? 3 : digits;
    // Never an exponent (issue 34): large numbers with separators, rates through unit() below.
    if (Math.abs(x) >= 1000) return x.toLocaleString("en-US", { maximumFractionDigits: 0 });
    return Number(x.toPrecision(Math.max(1, d))).toString();
  }
  // A quantity with an SI prefix that keeps it between 1 and 1000 (twin.core.units.human):
  // unit(2.5e10, "B/s") -> "25 GB/s", unit(0.0421, "s") -> "42.1 ms"; decimal prefixes, as rates are quoted.
  const PREFIXED = {
    "B/s": [[1e12, "TB/s"], [1e9, "GB/s"], [1e6, "MB/s"], [1e3, "kB/s"], [1, "B/s"]],
    "Gb/s": [[1e3, "Tb/s"], [1, "Gb/s"], [1e-3, "Mb/s"]],
    "GB/s": [[1e3, "TB/s"], [1, "GB/s"], [1e-3, "MB/s"]],
    "s": [[1, "s"], [1e-3, "ms"], [1e-6, "µs"]],
  };
  function unit(x, u, digits) {
    if (x === null || x === undefined || x === "") return "–";
    const scales = PREFIXED[u];
    if (typeof x !== "number" || !scales || x === 0 || !isFinite(x)) return fmt(x, digits) + (u ? " " + u : "");
    for (const [f, name] of scales) if (Math.abs(x) >= f * 0.9995) return fmt(x / f, digits) + " " + name;
    const [f, name] = scales[scales.length - 1];
    return fmt(x / f, digits) + " " + name;
  }
  function pct(x) { return x === null || x === undefined ? "–" : (100 * x).toFixed(1) + "%"; }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return node;
  }

  // A table from rows: columns [{key, label, num, fmt}], optional sort state and a header click handler.
  function table(target, columns, rows, sort, onSort) {
    const t = el("table");
    const head = el("tr");
    for (const c of columns) {
      const th = el("th", { class: (c.num ? "num " : "") + (onSort ? "sortable" : ""), "data-key": c.key }, c.label);
      if (sort && sort.key === c.key) th.classList.add("sorted-" + sort.order);
      if (onSort) th.addEventListener("click", () => onSort(c.key));
      head.append(th);
    }
    t.append(el("thead", {}, head));
    const body = el("tbody");
    for (const r of rows) {
      const tr = el("tr");
      for (const c of columns) {
        const v = typeof c.value === "function" ? c.value(r) : r[c.key];
        const td = el("td", { class: c.num ? "num" : "" });
        if (v instanceof Node) td.append(v); else td.textContent = c.fmt ? c.fmt(v, r) : fmt(v);
        tr.append(td);
      }
      body.append(tr);
    }
    t.append(body);
    target.classList.add("table-box");  // wider than its card: it scrolls there, never the page
    target.replaceChildren(t);
    return t;
  }

  // A value for a reader (the evidence panel): numbers formatted, lists and mappings as words, never JSON.
  function readable(v) {
    if (v === null || v === undefined) return "–";
    if (typeof v === "number") return fmt(v);
    if (Array.isArray(v)) return v.map(readable).join(", ");
    if (typeof v === "object") return Object.entries(v).map(([k, x]) => `${k.replace(/_/g, " ")} ${readable(x)}`).join("; ");
    return String(v);
  }

  function badge(state) { return el("span", { class: "badge " + state }, state); }

  // The job selector shared by the pages that show one job (?job=NAME, default the first).
  function jobSelect(jobs, current, onChange) {
    const box = document.getElementById("job");
    if (!box) return;
    box.replaceChildren(...jobs.map((j) => el("option", { value: j }, j)));
    box.value = current;
    box.onchange = () => {
      params.set("job", box.value);
      history.replaceState(null, "", "?" + params.toString());
      onChange(box.value);
    };
  }

  function showError(err) {
    const box = document.getElementById("error");
    if (box) box.textContent = err ? String(err.message || err) : "";
  }

  // fn as a loader that never runs twice at once: a call while it runs runs it once more after.
  function serial(fn) {
    let busy = false, again = false;
    const run = async () => {
      if (busy) { again = true; return; }
      busy = true;
      try { await fn(); } finally {
        busy = false;
        if (again) { again = false; run(); }
      }
    };
    return run;
  }

  return { api, on, serial, fmt, unit, readable, pct, el, table, badge, params, jobSelect, showError };
})();
