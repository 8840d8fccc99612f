// The status page: polls /api/status every second and redraws; fetches each
// task's loss series for its sparkline (running tasks every few seconds,
// finished ones once). Text from the host is only ever set as textContent.
"use strict";

const POLL_MS = 1000;
const SPARK_REFRESH_MS = 5000;
const SPARK_POINTS = 60;

let token = null;
const sparks = new Map(); // task id -> {fetched: ms, steps, values, metric, final}

function readToken() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem("tli-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);
  }
  token = sessionStorage.getItem("tli-token");
}

async function getJson(path) {
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const r = await fetch(path, { headers, cache: "no-store" });
  if (r.status === 401) throw Object.assign(new Error("token required"), { auth: true });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status + " " + (await r.text()).trim());
  return r.json();
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)) + " " + u[i];
}

function duration(s) {
  if (s === null || s === undefined || !isFinite(s)) return "–";
  s = Math.round(s);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

// A data file's name without its directories (the whole path is the cell's tooltip).
function shortAsset(asset) {
  const i = asset.lastIndexOf("/");
  return i >= 0 ? asset.slice(i + 1) : asset;
}

const SHOWN_METRICS = 6;

// Which metrics a person looks for first: the task's loss, then other losses and the usual
// figures of merit, then the rest by name.
function rank(task, name) {
  if (name === task.loss_metric) return 0;
  if (/loss/.test(name)) return 1;
  if (/return|skill|sharpe|pnl|reward/.test(name)) return 2;
  return 3;
}

function num(x) {
  if (x === null || x === undefined) return "–";
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return x.toExponential(3);
  return x.toPrecision(4).replace(/\.?0+$/, "");
}

function progressBar(fraction, label, attrs) {
  const pct = Math.max(0, Math.min(1, fraction)) * 100;
  return el("div", Object.assign({ class: "bar", role: "progressbar", "aria-label": label,
    "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": pct.toFixed(1) }, attrs),
    el("span", { class: "done", style: "width:" + pct + "%" }));
}

function renderDevices(devices) {
  const root = document.getElementById("devices");
  root.replaceChildren(el("h2", { text: "Device memory" }));
  for (const d of devices) {
    const scale = Math.max(d.budget_bytes, d.reserved_bytes, 1);
    const w = (b) => (100 * b / scale).toFixed(2) + "%";
    const bar = el("div", { class: "bar", "data-device": d.name, role: "img",
      "aria-label": d.name + ": " + bytes(d.reserved_bytes) + " reserved of " + bytes(d.budget_bytes) },
      el("span", { class: "reserved", style: "width:" + w(d.reserved_bytes) }),
      el("span", { class: "measured", style: "width:" + w(d.measured_bytes) }),
      el("span", { class: "budget-line", style: "left:calc(" + w(d.budget_bytes) + " - 2px)" }));
    const head = el("div", { class: "job-head" },
      el("span", { class: "name", text: d.name }),
      el("span", { class: "muted", text: "strategy " + d.strategy }), bar,
      el("span", { class: "pct", text: bytes(d.reserved_bytes) + " / " + bytes(d.budget_bytes) }));
    const legend = el("div", { class: "legend" },
      el("span", {}, el("i", { style: "background:var(--sky)" }), "reserved by " + d.reservations.length + " running task(s)"),
      el("span", {}, el("i", { style: "background:var(--green)" }), "measured " + bytes(d.measured_bytes)),
      el("span", {}, el("i", { style: "background:var(--ink)" }), "budget " + bytes(d.budget_bytes)));
    if (d.total_bytes) legend.append(el("span", { class: "muted",
      text: "device: " + bytes(d.free_bytes) + " free of " + bytes(d.total_bytes) }));
    root.append(el("div", { class: "card" }, head, legend));
  }
}

function sparkline(taskId) {
  const s = sparks.get(taskId);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", "120");
  svg.setAttribute("height", "28");
  svg.setAttribute("data-spark-task", taskId);
  if (!s || !s.values || s.values.length < 2) return svg;
  const clean = (xs) => xs.map((v) => (v === null ? NaN : v));
  const vals = clean(s.values);
  const finite = vals.filter(isFinite);
  if (finite.length < 2) return svg;
  // The validation twin (valid_loss beside train_loss), dashed, on the same scale.
  const twin = s.twin && s.twin.values ? clean(s.twin.values) : [];
  const both = finite.concat(twin.filter(isFinite));
  const lo = Math.min(...both), hi = Math.max(...both);
  const x0 = s.steps[0], x1 = s.steps[s.steps.length - 1] || x0 + 1;
  const points = (steps, values) => {
    const pts = [];
    values.forEach((v, i) => {
      if (!isFinite(v)) return;
      const x = 2 + 116 * Math.min(Math.max((steps[i] - x0) / Math.max(x1 - x0, 1), 0), 1);
      const y = 26 - 24 * (hi > lo ? (v - lo) / (hi - lo) : 0.5);
      pts.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    return pts;
  };
  const pts = points(s.steps, vals);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts.join(" "));
  const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
  title.textContent = s.metric + ": " + num(finite[0]) + " → " + num(finite[finite.length - 1]);
  svg.append(title, line);
  svg.setAttribute("data-points", String(pts.length));
  const twinPts = twin.length ? points(s.twin.steps, twin) : [];
  if (twinPts.length >= 2) {
    const valid = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    valid.setAttribute("class", "valid");
    valid.setAttribute("points", twinPts.join(" "));
    const finiteTwin = twin.filter(isFinite);
    title.textContent += "; " + s.twin.metric + " (dashed): " + num(finiteTwin[0]) + " → " +
      num(finiteTwin[finiteTwin.length - 1]);
    svg.append(valid);
    svg.setAttribute("data-valid-points", String(twinPts.length));
  }
  return svg;
}

function renderJobs(jobs) {
  const root = document.getElementById("jobs");
  document.getElementById("no-jobs").hidden = jobs.length > 0;
  root.replaceChildren();
  for (const j of jobs) {
    const head = el("div", { class: "job-head" },
      el("span", { class: "name", text: "job " + j.job_id + " · " + j.name }),
      progressBar(j.weighted_fraction, "job " + j.job_id + " progress", { "data-job-progress": j.job_id }),
      el("span", { class: "pct", text: (100 * j.weighted_fraction).toFixed(1) + " %" }));
    const table = el("table", {},
      el("thead", {}, el("tr", {},
        el("th", { text: "task" }), el("th", { text: "plugin / asset" }), el("th", { text: "state" }),
        el("th", { class: "num", text: "steps" }), el("th", { text: "progress" }),
        el("th", { class: "num", text: "steps/s" }), el("th", { class: "num", text: "ETA" }),
        el("th", { text: "loss" }), el("th", { text: "latest metrics" }))));
    const body = el("tbody");
    for (const t of j.tasks) {
      const all = Object.entries(t.metrics).sort(([a], [b]) => rank(t, a) - rank(t, b) || (a < b ? -1 : 1))
        .map(([k, v]) => k + " " + num(v));
      const metrics = all.slice(0, SHOWN_METRICS).join(" · ") +
        (all.length > SHOWN_METRICS ? " · +" + (all.length - SHOWN_METRICS) + " more" : "");
      const running = t.state === "running" || t.state === "checkpointing";
      body.append(el("tr", { "data-task-id": t.task_id, "data-state": t.state },
        el("td", { text: String(t.task_id) }),
        el("td", { text: t.plugin + " / " + shortAsset(t.asset), title: t.asset }),
        el("td", {}, el("span", { class: "state " + t.state, text: t.state }),
          t.error ? el("div", { class: "error", text: t.error }) : null),
        el("td", { class: "num steps", text: t.steps_done + " / " + t.total_steps }),
        el("td", {}, progressBar(t.total_steps ? t.steps_done / t.total_steps : 0,
          "task " + t.task_id + " progress")),
        el("td", { class: "num rate", text: running ? num(t.steps_per_second) : "–" }),
        el("td", { class: "num eta", text: running ? duration(t.eta_seconds) : "–" }),
        el("td", {}, sparkline(t.task_id)),
        el("td", { class: "metrics", text: metrics, title: all.join("\n") })));
    }
    table.append(body);
    root.append(el("div", { class: "card", "data-job-id": j.job_id }, head, table));
  }
}

async function refreshSparks(jobs) {
  const now = Date.now();
  const wanted = [];
  for (const j of jobs) for (const t of j.tasks) {
    if (!t.loss_metric) continue;
    const s = sparks.get(t.task_id);
    const running = t.state === "running" || t.state === "checkpointing";
    if (!s || (running && now - s.fetched > SPARK_REFRESH_MS) || (!running && !s.final)) {
      const twin = t.loss_metric.startsWith("train_") ? "valid_" + t.loss_metric.slice(6) : null;
      wanted.push([t.task_id, t.loss_metric, !running && t.state !== "queued",
        twin && twin in t.metrics ? twin : null]);
    }
  }
  const series = (id, metric) => getJson("api/series?task=" + id + "&metric=" +
    encodeURIComponent(metric) + "&points=" + SPARK_POINTS);
  await Promise.all(wanted.slice(0, 16).map(async ([id, metric, final, twin]) => {
    try {
      const [s, v] = await Promise.all([series(id, metric), twin ? series(id, twin) : null]);
      sparks.set(id, { fetched: Date.now(), steps: s.steps, values: s.values, metric: s.metric, final,
        twin: v ? { steps: v.steps, values: v.values, metric: v.metric } : null });
    } catch (e) { /* the next poll tries again */ }
  }));
}

async function poll() {
  const conn = document.getElementById("connection");
  if (!document.hidden) {
    try {
      const status = await getJson("api/status");
      document.getElementById("auth").hidden = true;
      renderDevices(status.devices);
      await refreshSparks(status.jobs);
      renderJobs(status.jobs);
      document.getElementById("more-jobs").hidden = !status.more_jobs;
      conn.textContent = "live · tli " + status.version;
      conn.className = "conn ok";
      document.getElementById("updated").textContent =
        "updated " + new Date(status.now_ms).toLocaleTimeString();
    } catch (e) {
      conn.className = "conn bad";
      conn.textContent = e.auth ? "token required" : "host unreachable: " + e.message;
      if (e.auth) document.getElementById("auth").hidden = false;
    }
  }
  setTimeout(poll, POLL_MS);
}

document.getElementById("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem("tli-token", document.getElementById("token-input").value.trim());
  readToken();
});
readToken();
poll();
