// The fleet dashboard's page: plain JavaScript, no framework, no build step, nothing fetched from
// anywhere but this gateway.  It renders the documents of /api/* and reads them again whenever the
// event stream (/api/events) announces a new revision.  Every number it shows is a number of the
// document it rendered; the document's revision is on <main data-revision>.
"use strict";

const MODES = ["free", "whole", "shared", "sliced", "partitioned"];
const VIEWS = [
  ["accelerator", "EX", "whole cards"],
  ["acceleratorShared", "SH", "shares"],
  ["acceleratorSliced", "SL", "VRAM %"],
  ["acceleratorPartitioned", "PT", "partitions"],
];
const NODES_PER_STEP = 200;

const state = {
  route: null,      // {page, arg}
  shown: -1,        // revision on screen
  latest: -1,       // revision announced
  loading: false,
  again: false,
  nodeLimit: NODES_PER_STEP,
  filter: "",
  selected: null,   // card key whose detail is shown
};

// DOM helpers ------------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function svg(tag, attrs, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children.flat(Infinity)) if (child) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

function num(value) {
  return typeof value === "number" ? value.toLocaleString("en-US", { maximumFractionDigits: 3 }) : String(value);
}

function when(iso) {
  if (!iso) return "never";
  const date = new Date(iso);
  const ago = Math.max(0, Math.round((Date.now() - date.getTime()) / 1000));
  return `${date.toLocaleTimeString()} (${ago} s ago)`;
}

function bar(used, capacity, extra) {
  const fill = h("span");
  fill.style.width = capacity > 0 ? `${Math.min(100, (100 * used) / capacity)}%` : "0%";
  return h("div", { class: `bar${extra ? " " + extra : ""}`, role: "img", "aria-label": `${num(used)} of ${num(capacity)} used` }, fill);
}

function badge(attrs, text) {
  return h("span", { class: "badge", ...attrs }, text);
}

function phases(counts) {
  const entries = Object.entries(counts || {});
  if (!entries.length) return "none";
  return entries.map(([phase, count]) => `${count} ${phase}`).join(", ");
}

function api(path) {
  return fetch(path, { headers: { accept: "application/json" }, cache: "no-store" }).then((response) => {
    if (response.status === 404) return null;
    if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
    return response.json();
  });
}

// Routing and refreshing -------------------------------------------------------------------------

function route() {
  const hash = decodeURIComponent(location.hash.replace(/^#\/?/, ""));
  if (hash.startsWith("pool/")) return { page: "pool", arg: hash.slice(5) };
  if (hash === "workloads") return { page: "workloads", arg: "" };
  return { page: "fleet", arg: "" };
}

function navigate() {
  const next = route();
  const moved = !state.route || next.page !== state.route.page || next.arg !== state.route.arg;
  state.route = next;
  if (moved) {
    state.nodeLimit = NODES_PER_STEP;
    state.selected = null;
    state.shown = -1;
  }
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === next.page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  refresh(moved);
}

async function refresh(focus) {
  if (state.loading) {
    state.again = true;
    return;
  }
  state.loading = true;
  const main = document.getElementById("main");
  const started = performance.now();
  try {
    const { page, arg } = state.route;
    let doc = null;
    let extra = null;
    if (page === "pool") {
      [doc, extra] = await Promise.all([api(`/api/pools/${encodeURIComponent(arg)}`), api(`/api/history/${encodeURIComponent(arg)}`)]);
    } else {
      doc = await api(page === "workloads" ? "/api/workloads" : "/api/fleet");
    }
    const fetched = performance.now();
    const keep = focusKey();
    const content = page === "pool" ? renderPool(arg, doc, extra) : page === "workloads" ? renderWorkloads(doc) : renderFleet(doc);
    main.replaceChildren(...content);
    if (page === "workloads") applyFilter(main);
    main.dataset.page = page;
    main.dataset.revision = doc ? String(doc.revision) : "";
    main.setAttribute("aria-busy", "false");
    state.shown = doc ? doc.revision : state.shown;
    restoreFocus(keep);
    if (focus) main.focus({ preventScroll: true });
    const done = performance.now();
    document.documentElement.dataset.fetchMs = (fetched - started).toFixed(1);
    document.documentElement.dataset.renderMs = (done - fetched).toFixed(1);
    document.documentElement.dataset.readyMs = done.toFixed(1);
    document.documentElement.dataset.rendered = String((Number(document.documentElement.dataset.rendered) || 0) + 1);
  } catch (error) {
    main.replaceChildren(h("p", { class: "empty", role: "alert" }, `The gateway did not answer: ${error.message}`));
  } finally {
    state.loading = false;
    if (state.again || state.latest > state.shown) {
      state.again = false;
      if (state.latest > state.shown) setTimeout(() => refresh(false), 0);
    }
  }
}

function focusKey() {
  const active = document.activeElement;
  return active && active.dataset && active.dataset.key ? active.dataset.key : null;
}

function restoreFocus(key) {
  if (!key) return;
  const again = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (again) again.focus({ preventScroll: true });
}

function listen() {
  const live = document.getElementById("live");
  const source = new EventSource("/api/events");
  source.addEventListener("revision", (event) => {
    const { revision } = JSON.parse(event.data);
    state.latest = revision;
    live.dataset.state = "live";
    live.textContent = `live · revision ${revision}`;
    if (revision !== state.shown) refresh(false);
  });
  source.addEventListener("error", () => {
    live.dataset.state = "reconnecting";
    live.textContent = "reconnecting…";
  });
}

// The fleet --------------------------------------------------------------------------------------

function renderFleet(doc) {
  if (!doc) return [h("p", { class: "empty" }, "No fleet document.")];
  const out = [];
  out.push(h("h2", { id: "pools-title" }, "Pools"));
  if (!doc.pools.length) out.push(h("p", { class: "empty" }, "No cluster serves a pool yet."));
  else {
    out.push(
      h("table", { class: "fleet-pools", "aria-labelledby": "pools-title" },
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Pool"), h("th", { scope: "col" }, "Clusters"),
          h("th", { scope: "col", class: "num" }, "Cards used"), h("th", { scope: "col" }, "Cards"),
          h("th", { scope: "col", class: "num" }, "Pending Workloads"))),
        h("tbody", {}, doc.pools.map((pool) =>
          h("tr", { "data-pool": pool.name, "data-used": pool.used, "data-capacity": pool.capacity, "data-pending": pool.pending },
            h("td", {}, h("a", { href: `#/pool/${encodeURIComponent(pool.name)}`, "data-key": `pool-link/${pool.name}` }, pool.name),
              pool.product ? h("div", { class: "meta" }, pool.product) : null),
            h("td", {}, pool.clusters.join(", ")),
            h("td", { class: "num" }, pool.acceleratable ? `${num(pool.used)} / ${num(pool.capacity)}` : "CPU only"),
            h("td", {}, pool.acceleratable ? bar(pool.used, pool.capacity) : null),
            h("td", { class: "num" }, num(pool.pending)))))));
  }
  out.push(h("h2", { id: "clusters-title" }, `Clusters (${doc.clusters.length})`));
  if (!doc.clusters.length) out.push(h("p", { class: "empty" }, "No cluster is subscribed to this gateway."));
  out.push(h("div", { class: "tiles", role: "list", "aria-labelledby": "clusters-title" }, doc.clusters.map(tile)));
  return out;
}

function tile(cluster) {
  const away = cluster.state !== "reachable";
  return h("article", { class: "tile", role: "listitem", "data-cluster": cluster.name, "data-state": cluster.state, "data-last-seen": cluster.lastSeen || "", "aria-label": `cluster ${cluster.name}` },
    h("header", {}, h("h3", {}, cluster.name), badge({ "data-state": cluster.state }, cluster.state)),
    away ? h("p", { class: "away", "data-field": "away" }, `${cluster.state === "pending" ? "Not ready" : "Unreachable"} — last seen ${when(cluster.lastSeen)}`) : null,
    cluster.reason ? h("p", { class: "meta", "data-field": "reason" }, cluster.reason) : null,
    h("dl", { class: "facts" },
      h("dt", {}, "Nodes"), h("dd", { "data-field": "nodes", "data-total": cluster.nodes.total, "data-ready": cluster.nodes.ready }, `${num(cluster.nodes.ready)} ready of ${num(cluster.nodes.total)}`),
      h("dt", {}, "Cards"), h("dd", { "data-field": "accelerators" },
        cluster.accelerators.length ? cluster.accelerators.map((a, i) =>
          h("div", { "data-model": a.model, "data-cards": a.cards, "data-unhealthy": a.unhealthy },
            `${num(a.cards)} × ${a.model}`, a.unhealthy ? ` (${num(a.unhealthy)} unhealthy)` : "")) : "none"),
      h("dt", {}, "Pending Workloads"), h("dd", { "data-field": "pending", "data-value": cluster.pendingWorkloads }, num(cluster.pendingWorkloads)),
      h("dt", {}, "Deployments"), h("dd", { "data-field": "deployments" }, phases(cluster.deployments)),
      h("dt", {}, "Instances"), h("dd", { "data-field": "instances" }, phases(cluster.instances))),
    cluster.pools.length ? h("ul", { class: "pools", "aria-label": `pools of ${cluster.name}` }, cluster.pools.map((pool) => poolRow(cluster.name, pool))) : h("p", { class: "empty" }, "No pools."));
}

function poolRow(cluster, pool) {
  return h("li", { class: "pool", "data-instance-type": pool.name, "data-pool": pool.pool, "data-phase": pool.phase, "data-pending": pool.pending },
    h("div", {}, h("a", { href: `#/pool/${encodeURIComponent(pool.pool)}`, "data-key": `tile-pool/${cluster}/${pool.name}` }, pool.name), " ",
      badge({ "data-phase": pool.phase }, pool.phase), pool.pending ? h("span", { class: "meta" }, ` · ${num(pool.pending)} pending`) : null),
    pool.acceleratable ? views(pool.views) : h("div", { class: "meta" }, "CPU only"));
}

function views(all) {
  return h("div", { class: "views" }, VIEWS.map(([key, short, what]) => {
    const v = all[key];
    return [
      h("abbr", { title: what }, short),
      bar(v.used, v.capacity),
      h("span", { class: "vnum", "data-view": key, "data-used": v.used, "data-free": v.free, "data-capacity": v.capacity }, `${num(v.used)} used · ${num(v.free)} free`),
    ];
  }));
}

// A pool -----------------------------------------------------------------------------------------

function renderPool(name, doc, history) {
  const out = [h("p", {}, h("a", { href: "#/" }, "← Fleet"))];
  out.push(h("h2", { id: "pool-title" }, `Pool ${name}`));
  if (!doc) {
    out.push(h("p", { class: "empty", role: "alert" }, "No cluster has an InstanceType of this pool (any more)."));
    return out;
  }
  if (doc.product) out.push(h("p", { class: "meta" }, doc.product));
  out.push(h("h2", {}, "Last hour"), plot(history));
  out.push(h("h2", { id: "types-title" }, "InstanceTypes"));
  out.push(h("table", { class: "candidates", "aria-labelledby": "types-title" },
    h("thead", {}, h("tr", {}, ["Cluster", "InstanceType", "Phase", ...VIEWS.map((v) => `${v[1]} used / capacity`), "Pending"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, doc.candidates.map((c) =>
      h("tr", { "data-cluster": c.cluster, "data-instance-type": c.name, "data-state": c.state },
        h("td", {}, c.cluster, c.state !== "reachable" ? h("span", { class: "meta" }, ` (${c.state})`) : null),
        h("td", {}, c.name), h("td", {}, badge({ "data-phase": c.phase }, c.phase)),
        VIEWS.map(([key]) => h("td", { class: "num", "data-view": key, "data-used": c.views[key].used, "data-capacity": c.views[key].capacity }, `${num(c.views[key].used)} / ${num(c.views[key].capacity)}`)),
        h("td", { class: "num" }, num(c.pending)))))));
  out.push(h("h2", { id: "nodes-title" }, `Nodes (${doc.nodes.length})`));
  out.push(h("div", { class: "legend", "aria-hidden": "true" }, MODES.map((m) => h("span", {}, h("span", { class: `swatch sw-${m}` }), m)), h("span", {}, "fill = allocated share of the card")));
  const detail = h("p", { class: "detail", id: "card-detail", role: "status", "aria-live": "polite" }, "Select a card to see the Pods holding it.");
  const shown = doc.nodes.slice(0, state.nodeLimit);
  out.push(h("div", { class: "nodes", "aria-labelledby": "nodes-title" }, shown.map((node) => nodeBox(node, detail))));
  if (doc.nodes.length > shown.length) {
    out.push(h("button", { type: "button", class: "more", "data-key": "more-nodes", onclick: () => { state.nodeLimit += NODES_PER_STEP; refresh(false); } },
      `Show ${Math.min(NODES_PER_STEP, doc.nodes.length - shown.length)} more of ${doc.nodes.length - shown.length} nodes`));
  }
  out.push(detail);
  if (state.selected) {
    const card = doc.nodes.flatMap((n) => n.cards.map((c) => [n, c])).find(([n, c]) => `${n.cluster}/${n.name}/${c.id}` === state.selected);
    if (card) describe(detail, card[0], card[1]);
  }
  return out;
}

function nodeBox(node, detail) {
  return h("section", { class: "node", "data-cluster": node.cluster, "data-node": node.name, "data-ready": String(node.ready), "aria-label": `node ${node.name} in ${node.cluster}` },
    h("h3", {}, node.name),
    h("div", { class: "meta" }, `${node.cluster} · ${node.ready ? "Ready" : "not Ready"} · ${num(node.cardsUsed)} of ${num(node.cardsTotal)} cards in use`),
    node.cards.length ? h("ul", { class: "cards", "aria-label": `cards of ${node.name}` }, node.cards.map((card) => h("li", {}, cardButton(node, card, detail))))
      : h("p", { class: "empty" }, "No Devices inventory."));
}

function cardButton(node, card, detail) {
  const key = `${node.cluster}/${node.name}/${card.id}`;
  const fill = h("span", { class: "fill" });
  fill.style.height = `${Math.round(card.fill * 100)}%`;
  const label = `card ${card.index} ${card.model}: ${card.mode}${card.unhealthy ? ", unhealthy" : ""}, ${Math.round(card.fill * 100)}% allocated` +
    (card.pods.length ? `, held by ${card.pods.join(", ")}` : "");
  return h("button", {
    type: "button", class: "card", "data-key": key, "data-card": card.id, "data-index": card.index, "data-mode": card.mode,
    "data-allocated": card.allocated, "data-fill": card.fill, "data-unhealthy": String(card.unhealthy), "data-pods": card.pods.join(" "),
    "aria-label": label, title: label, "aria-pressed": String(state.selected === key),
    onclick: () => { state.selected = key; describe(detail, node, card); },
    onfocus: () => describe(detail, node, card),
  }, h("span", { class: "idx" }, card.index), fill);
}

function describe(detail, node, card) {
  const parts = [`${node.name} card ${card.index} (${card.model}, ${card.id}): ${card.mode}`, `${Math.round(card.fill * 100)}% allocated`];
  if (card.slices) parts.push(`${card.slices} slices`);
  if (card.profiles) parts.push(`partitions ${card.profiles.join(", ")}`);
  if (card.unhealthy) parts.push("unhealthy");
  parts.push(card.pods.length ? `held by ${card.pods.join(", ")}` : "held by no Pod");
  detail.textContent = parts.join(" · ");
}

function plot(history) {
  const box = h("figure", { class: "plot", "data-samples": history ? history.samples.length : 0 });
  const samples = history ? history.samples : [];
  const caption = h("figcaption", { class: "legend" },
    h("span", {}, h("span", { class: "swatch sw-used" }), "cards used"),
    h("span", {}, h("span", { class: "swatch sw-pending" }), "pending Workloads"),
    h("span", {}, history ? `one sample every ${history.interval} s, the last ${Math.round(history.window / 60)} min` : ""));
  if (!samples.length) {
    box.append(h("p", { class: "empty" }, "No samples yet: the gateway samples each pool periodically."), caption);
    return box;
  }
  const W = 800, H = 200, L = 40, B = 20, T = 8;
  const now = samples[samples.length - 1].t;
  const start = now - history.window;
  const top = Math.max(1, ...samples.map((s) => Math.max(s.used, s.pending)));
  const x = (t) => L + ((t - start) / history.window) * (W - L - 4);
  const y = (v) => T + (1 - v / top) * (H - T - B);
  const line = (key) => samples.map((s) => `${x(s.t).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ");
  const last = samples[samples.length - 1];
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `history: now ${last.used} cards used and ${last.pending} pending Workloads; peak ${top}` },
    svg("line", { class: "axis", x1: L, y1: y(0), x2: W, y2: y(0) }),
    svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: y(0) }),
    svg("text", { class: "tick", x: 4, y: T + 10 }, String(top)),
    svg("text", { class: "tick", x: 4, y: y(0) }, "0"),
    svg("text", { class: "tick", x: L, y: H - 4 }, "-60 min"),
    svg("text", { class: "tick", x: W - 30, y: H - 4 }, "now"),
    svg("polyline", { class: "used", points: line("used") }),
    svg("polyline", { class: "pending", points: line("pending") }));
  box.append(chart, caption);
  return box;
}

// ModelDeployments and Instances -------------------------------------------------------------------

function conditionList(conditions) {
  if (!conditions.length) return "none";
  return h("ul", { class: "conds" }, conditions.map((c) =>
    h("li", { "data-type": c.type, "data-status": c.status, title: c.message }, `${c.type}=${c.status}${c.reason ? ` (${c.reason})` : ""}`)));
}

function applyFilter(root) {
  const wanted = state.filter.trim().toLowerCase();
  for (const row of root.querySelectorAll("tbody tr")) {
    const text = `${row.dataset.cluster} ${row.dataset.namespace} ${row.dataset.name} ${row.dataset.phase}`.toLowerCase();
    row.hidden = wanted !== "" && !text.includes(wanted);
  }
}

function renderWorkloads(doc) {
  if (!doc) return [h("p", { class: "empty" }, "No document.")];
  const search = h("input", { type: "search", id: "filter", value: state.filter, "data-key": "filter", placeholder: "cluster, namespace, name or phase" });
  search.addEventListener("input", () => { state.filter = search.value; applyFilter(document.getElementById("main")); });
  const out = [h("div", { class: "toolbar" }, h("label", { for: "filter" }, "Filter "), search)];
  const deployments = doc.deployments;
  out.push(h("h2", { id: "md-title" }, `ModelDeployments (${deployments.length})`));
  out.push(deployments.length ? h("table", { class: "deployments", "aria-labelledby": "md-title" },
    h("thead", {}, h("tr", {}, ["Cluster", "Namespace", "Name", "Phase", "Roles", "Endpoint", "Conditions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, deployments.map((d) => h("tr", { "data-cluster": d.cluster, "data-namespace": d.namespace, "data-name": d.name, "data-phase": d.phase },
      h("td", {}, d.cluster), h("td", {}, d.namespace), h("td", {}, d.name),
      h("td", {}, badge({ "data-phase": d.phase }, d.phase), d.message ? h("div", { class: "meta" }, d.message) : null),
      h("td", {}, d.roles || "—"), h("td", { "data-field": "endpoint" }, d.endpoint || "—"), h("td", {}, conditionList(d.conditions))))))
    : h("p", { class: "empty" }, "No ModelDeployments."));
  const instances = doc.instances;
  out.push(h("h2", { id: "inst-title" }, `Instances (${instances.length})`));
  out.push(instances.length ? h("table", { class: "instances", "aria-labelledby": "inst-title" },
    h("thead", {}, h("tr", {}, ["Cluster", "Namespace", "Name", "Phase", "Node", "Endpoints", "Conditions"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, instances.map((i) => h("tr", { "data-cluster": i.cluster, "data-namespace": i.namespace, "data-name": i.name, "data-phase": i.phase },
      h("td", {}, i.cluster), h("td", {}, i.namespace), h("td", {}, i.name),
      h("td", {}, badge({ "data-phase": i.phase }, i.phase), i.message ? h("div", { class: "meta" }, i.message) : null),
      h("td", {}, i.node || "—"), h("td", { "data-field": "endpoints" }, i.endpoints.length ? i.endpoints.join(", ") : "—"), h("td", {}, conditionList(i.conditions))))))
    : h("p", { class: "empty" }, "No Instances."));
  return out;
}

// Start ------------------------------------------------------------------------------------------

window.addEventListener("hashchange", navigate);
document.addEventListener("DOMContentLoaded", () => {
  navigate();
  listen();
});
