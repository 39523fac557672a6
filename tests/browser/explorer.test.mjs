// Drives the report's explorer in headless Chromium (puppeteer-core + the system Chromium).
//
//   node tests/browser/explorer.test.mjs REPORT.html [SCREENSHOT.png] [--advantages ADV.jsonl]
//
// REPORT.html is a report `credit report LOGS --out DIR` wrote (DIR/report.html); SCREENSHOT.png
// defaults to a new file in the temporary folder. With --advantages (the JSONL that `credit advantages … -o ADV.jsonl`
// writes for the same logs), the advantages shown in the panel are also checked against that
// file's adv_<method> columns. Exits 1 when a check fails, 2 when the page cannot be driven.
import puppeteer from "puppeteer-core";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const EXPLORER_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "crates", "report", "src", "explorer");

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const argv = process.argv.slice(2);
const flag = argv.indexOf("--advantages");
const advantagesFile = flag >= 0 ? resolve(argv[flag + 1] || "") : null;
if (flag >= 0) argv.splice(flag, 2);
if (!argv[0]) {
  console.error("usage: node tests/browser/explorer.test.mjs REPORT.html [SCREENSHOT.png] [--advantages ADV.jsonl]");
  process.exit(2);
}
const target = resolve(argv[0]);
const screenshot = resolve(argv[1] || join(tmpdir(), `credit-explorer-${process.pid}.png`));

/** `credit advantages` rows by traj_id and step (JSONL). */
function loadAdvantages(path) {
  const rows = new Map();
  for (const line of readFileSync(path, "utf8").split("\n")) {
    if (!line.trim()) continue;
    const row = JSON.parse(line);
    const key = `${row.traj_id}\u0000${row.step}`;
    if (!rows.has(key)) rows.set(key, []);
    rows.get(key).push(row);
  }
  return rows;
}
const ADVANTAGES = advantagesFile ? loadAdvantages(advantagesFile) : null;

// ---- the explorer's number formats, written out independently of explorer.js

function isNum(x) {
  return typeof x === "number" && Number.isFinite(x);
}
/** Advantages: "+1.250", "-0.310", "0.000", "+4.20e-5", "—" when missing. */
function fmtAdv(x) {
  if (!isNum(x)) return "—";
  if (x === 0) return "0.000";
  const a = Math.abs(x);
  return (x < 0 ? "-" : "+") + (a < 0.001 || a >= 1e6 ? a.toExponential(2) : a.toFixed(3));
}
/** Other numbers (parts, reward): integers as they are, else 3 decimals. */
function fmtNum(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number" || !Number.isFinite(x) || Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a < 0.001 || a >= 1e6 ? x.toExponential(2) : x.toFixed(3);
}

// ---- reporting

let failures = 0;
function check(ok, what, detail) {
  if (ok) console.log(`ok    ${what}`);
  else {
    failures++;
    console.log(`FAIL  ${what}${detail === undefined ? "" : `\n      ${detail}`}`);
  }
  return ok;
}
function eq(actual, expected, what) {
  const cut = (x) => {
    const j = JSON.stringify(x);
    return j !== undefined && j.length > 300 ? `${j.slice(0, 300)}…` : j;
  };
  return check(actual === expected, what, `expected ${cut(expected)}, got ${cut(actual)}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rgb = (s) => (s.match(/\d+(\.\d+)?/g) || []).slice(0, 3).map(Number);

// ---- page helpers

/** What the explorer shows now: selection, panel text and graph highlight. */
function snapshot(page) {
  return page.evaluate(() => {
    const q = (s) => document.querySelector(s);
    const sel = document.querySelectorAll("#explorer .cx-c.cx-sel");
    const nodes = [...document.querySelectorAll("#explorer .cx-view g.node.selected")];
    const adv = {};
    for (const tr of document.querySelectorAll("#explorer .cx-adv tr[data-method]")) {
      adv[tr.getAttribute("data-method")] = tr.querySelector(".cx-advval").textContent;
    }
    const parts = {};
    for (const tr of document.querySelectorAll("#explorer .cx-parts tr[data-method]")) {
      const terms = {};
      for (const t of tr.querySelectorAll("[data-term]")) terms[t.getAttribute("data-term")] = t.querySelector(".cx-num").textContent;
      parts[tr.getAttribute("data-method")] = terms;
    }
    const focused = document.activeElement;
    return {
      hash: location.hash,
      selected: [...sel].map((c) => [+c.getAttribute("data-t"), +c.getAttribute("data-s")]),
      group: +(q("#explorer .cx-g[aria-selected=true]") || { getAttribute: () => NaN }).getAttribute("data-g"),
      action: (q("#explorer #cx-action") || {}).textContent,
      reward: (q("#explorer .cx-reward") || {}).textContent,
      invalidBadge: !!q("#explorer .cx-badge.cx-bad"),
      obs: (q("#explorer .cx-obs") || {}).textContent,
      adv,
      current: (q("#explorer .cx-adv tr[aria-current=true]") || { getAttribute: () => null }).getAttribute("data-method"),
      parts,
      nodes: nodes.map((n) => [n.id, (n.querySelector("title") || {}).textContent]),
      pressed: [...document.querySelectorAll("#explorer .cx-method[aria-pressed=true]")].map((b) => b.getAttribute("data-method")),
      focused: focused && focused.classList.contains("cx-c") ? [+focused.getAttribute("data-t"), +focused.getAttribute("data-s")] : null,
      svg: !!q("#explorer .cx-view svg"),
      note: (q("#explorer .cx-gnote") || {}).textContent,
      cellLabel: sel[0] ? sel[0].getAttribute("aria-label") : null,
      mates: [...document.querySelectorAll("#explorer .cx-c.cx-mate")].map((c) => [+c.getAttribute("data-t"), +c.getAttribute("data-s")]),
      obsFirst: (() => {
        const o = q("#explorer .cx-obs"), a = q("#explorer .cx-adv");
        return !!(o && a && o.compareDocumentPosition(a) & Node.DOCUMENT_POSITION_FOLLOWING);
      })(),
    };
  });
}

async function cellColour(page, t, s) {
  return page.$eval(`#explorer .cx-c[data-t="${t}"][data-s="${s}"]`, (c) => getComputedStyle(c).backgroundColor);
}

/** Checks that the panel and the graph show step (g, t, s) of DATA under method m. */
function checkShown(view, data, g, t, s, m, label) {
  const group = data.groups[g];
  const st = group.trajectories[t].steps[s];
  eq(view.group, g, `${label}: group ${g} is selected in the picker`);
  check(
    view.selected.length === 1 && view.selected[0][0] === t && view.selected[0][1] === s,
    `${label}: cell t=${t} s=${s} is the one selected cell`,
    JSON.stringify(view.selected)
  );
  eq(view.action, st.action, `${label}: panel shows the step's action`);
  eq(view.obs, st.obs === null || st.obs === undefined ? "—" : String(st.obs), `${label}: panel shows the step's observation`);
  eq(view.reward, fmtNum(st.reward), `${label}: panel shows the step's reward`);
  check(view.obsFirst, `${label}: the observation comes before the methods' tables`);
  // GiGPO's exact anchor group: every other step of the group with the same observation text.
  const mates = [];
  if (st.obs !== null && st.obs !== undefined) {
    group.trajectories.forEach((tr, ti) => tr.steps.forEach((x, si) => {
      if (x.obs === st.obs && !(ti === t && si === s)) mates.push([ti, si]);
    }));
  }
  eq(JSON.stringify(view.mates), JSON.stringify(mates), `${label}: the ${mates.length} other steps of its anchor group are outlined`);
  eq(view.invalidBadge, st.valid === false, `${label}: validity marked as in the data`);
  const wantAdv = Object.fromEntries(data.methods.map((k) => [k, fmtAdv(st.adv ? st.adv[k] : undefined)]));
  eq(JSON.stringify(view.adv), JSON.stringify(wantAdv), `${label}: panel shows every method's advantage (${Object.values(wantAdv).join(", ")})`);
  eq(view.current, m, `${label}: the current method's row is highlighted`);
  if (ADVANTAGES) {
    const traj = group.trajectories[t];
    const rows = (ADVANTAGES.get(`${traj.id}\u0000${st.step}`) || []).filter(
      (r) => r.group_id === undefined || r.group_id === group.id
    ).filter((r) => r.iteration === undefined || r.iteration === null || group.iteration === null || r.iteration === group.iteration);
    if (check(rows.length === 1, `${label}: ${advantagesFile} has one row for trajectory ${traj.id} step ${st.step}`, `${rows.length} rows`)) {
      const shown = data.methods.filter((k) => `adv_${k}` in rows[0]);
      const want = Object.fromEntries(shown.map((k) => [k, fmtAdv(rows[0][`adv_${k}`])]));
      const got = Object.fromEntries(shown.map((k) => [k, view.adv[k]]));
      check(shown.length > 0, `${label}: ${advantagesFile} has adv_ columns for the report's methods`);
      eq(JSON.stringify(got), JSON.stringify(want), `${label}: panel's advantages match \`credit advantages\` (${shown.join(", ")})`);
    }
  }
  const wantParts = {};
  for (const k of [...data.methods, ...Object.keys(st.parts || {}).filter((k) => !data.methods.includes(k))]) {
    if (st.parts && st.parts[k]) wantParts[k] = Object.fromEntries(Object.entries(st.parts[k]).map(([n, v]) => [n, fmtNum(v)]));
  }
  eq(JSON.stringify(view.parts), JSON.stringify(wantParts), `${label}: panel shows the step's parts`);
  if (group.svg && st.node) {
    check(
      view.nodes.length === 1 && (view.nodes[0][0] === st.node || view.nodes[0][1] === st.node),
      `${label}: graph node ${st.node} has class "selected" (and no other node)`,
      JSON.stringify(view.nodes)
    );
  }
}

// ---- the test

async function main() {
  if (!existsSync(target)) {
    console.error(`error: no such file ${target}`);
    return 2;
  }
  if (!existsSync(CHROMIUM)) {
    console.error(`error: no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set CHROMIUM_PATH)`);
    return 2;
  }
  const profile = mkdtempSync(join(tmpdir(), "credit-chromium-"));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      `--user-data-dir=${profile}`,
    ],
    defaultViewport: { width: 1280, height: 900 },
  });
  try {
    return await drive(browser);
  } finally {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

async function drive(browser) {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const errors = [];
  const external = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (msg) => {
    if (msg.type() === "error") errors.push(msg.text());
  });
  await page.setRequestInterception(true);
  page.on("request", (req) => {
    const url = req.url();
    if (/^(file|data|about|blob):/.test(url)) req.continue();
    else {
      external.push(url);
      req.abort();
    }
  });
  const url = pathToFileURL(target).href;
  await page.goto(url, { waitUntil: "load" });
  await page.waitForSelector("#explorer .cx-c", { timeout: 10000 });

  const data = await page.$eval("#credit-explorer-data", (s) => JSON.parse(s.textContent));
  check(data.groups.length > 0, `the page embeds ${data.groups.length} groups, methods ${data.methods.join(", ")}`);
  const m0 = data.methods.includes(data.default_method) ? data.default_method : data.methods[0];
  eq((await snapshot(page)).pressed.join(), m0, "the default method is the one switched on");

  // Choose a group with a graph (not the first when possible, so that picking it is a click that
  // changes something), a trajectory and a step that has a next step and a node in the graph.
  const withGraph = data.groups.map((g, i) => [g, i]).filter(([g]) => g.svg && g.trajectories.some((t) => t.steps.length > 1));
  const [group, gi] = withGraph.length ? withGraph[withGraph.length > 1 ? 1 : 0] : [data.groups[0], 0];
  let ti = 0, si = 0;
  search: for (let t = group.trajectories.length > 1 ? 1 : 0; t < group.trajectories.length; t++) {
    const steps = group.trajectories[t].steps;
    for (let s = Math.floor(steps.length / 2); s < steps.length - 1; s++) {
      if (!group.svg || steps[s].node) {
        [ti, si] = [t, s];
        break search;
      }
    }
  }
  console.log(`      group ${gi} (${group.id}), trajectory ${ti}, step ${si}${group.svg ? "" : " (no graph)"}`);

  // Pick the group and the step by clicking.
  await page.click(`#explorer .cx-g[data-g="${gi}"]`);
  await page.click(`#explorer .cx-c[data-t="${ti}"][data-s="${si}"]`);
  await sleep(350); // the graph pans/zooms over ~220 ms
  let view = await snapshot(page);
  checkShown(view, data, gi, ti, si, m0, "click");
  eq(view.hash, `#explorer/g=${gi}/t=${ti}/s=${si}/m=${m0}`, "click: the URL fragment names the selection");
  check(view.cellLabel && view.cellLabel.includes(group.trajectories[ti].steps[si].action), "click: the cell's accessible name names its action", view.cellLabel);
  if (group.svg && group.trajectories[ti].steps[si].node) {
    const inside = await page.evaluate(() => {
      const n = document.querySelector("#explorer .cx-view g.node.selected");
      if (!n) return false;
      const v = document.querySelector("#explorer .cx-view").getBoundingClientRect();
      const r = n.getBoundingClientRect();
      return r.width > 0 && r.left >= v.left - 1 && r.right <= v.right + 1 && r.top >= v.top - 1 && r.bottom <= v.bottom + 1;
    });
    check(inside, "click: the highlighted node is inside the graph's visible area");
  }

  // Keyboard: → next step, ↓ next trajectory, ↑ back.
  await page.keyboard.press("ArrowRight");
  view = await snapshot(page);
  checkShown(view, data, gi, ti, si + 1, m0, "ArrowRight");
  eq(view.hash, `#explorer/g=${gi}/t=${ti}/s=${si + 1}/m=${m0}`, "ArrowRight: the URL fragment follows");
  eq(JSON.stringify(view.focused), JSON.stringify([ti, si + 1]), "ArrowRight: focus moves to the new cell");
  if (group.trajectories.length > ti + 1) {
    await page.keyboard.press("ArrowDown");
    const s2 = Math.min(si + 1, group.trajectories[ti + 1].steps.length - 1);
    checkShown(await snapshot(page), data, gi, ti + 1, s2, m0, "ArrowDown");
    await page.keyboard.press("ArrowUp");
    const s3 = Math.min(s2, group.trajectories[ti].steps.length - 1);
    if (s3 !== si + 1) {
      await page.click(`#explorer .cx-c[data-t="${ti}"][data-s="${si + 1}"]`);
    }
    eq(JSON.stringify((await snapshot(page)).selected), JSON.stringify([[ti, si + 1]]), "ArrowUp: back on the same trajectory");
  }

  // The fragment reopens the same selection after a reload.
  await page.reload({ waitUntil: "load" });
  await page.waitForSelector("#explorer .cx-c.cx-sel", { timeout: 10000 });
  await sleep(350);
  view = await snapshot(page);
  checkShown(view, data, gi, ti, si + 1, m0, "reload");
  eq(view.pressed.join(), m0, "reload: same method");

  // Switching the method recolours the cells: take the cell whose colour should change most.
  let best = null;
  const trs = data.groups[gi].trajectories;
  const unit = (m, x) => Math.max(-1, Math.min(1, x / (data.scale[m] || 1)));
  for (const m1 of data.methods.filter((m) => m !== m0)) {
    trs.forEach((tr, t) =>
      tr.steps.forEach((st, s) => {
        if (!st.adv || !isNum(st.adv[m0]) || !isNum(st.adv[m1])) return;
        const d = Math.abs(unit(m1, st.adv[m1]) - unit(m0, st.adv[m0]));
        if (!best || d > best.d) best = { d, m1, t, s, v: unit(m1, st.adv[m1]) };
      })
    );
  }
  if (check(best && best.d > 0.05, "the data has a cell whose colour differs between two methods")) {
    const before = await cellColour(page, best.t, best.s);
    await page.click(`#explorer .cx-method[data-method="${best.m1}"]`);
    const after = await cellColour(page, best.t, best.s);
    check(before !== after, `method ${m0} → ${best.m1}: cell t=${best.t} s=${best.s} changes colour`, `${before} → ${after}`);
    const [r, , b] = rgb(after);
    if (best.v > 0.25) check(r > b, `method ${best.m1}: a positive advantage (${best.v.toFixed(2)} of the scale) is red`, after);
    if (best.v < -0.25) check(b > r, `method ${best.m1}: a negative advantage (${best.v.toFixed(2)} of the scale) is blue`, after);
    view = await snapshot(page);
    eq(view.pressed.join(), best.m1, `method ${best.m1}: its button is pressed`);
    eq(view.current, best.m1, `method ${best.m1}: its row in the panel is highlighted`);
    eq(view.hash, `#explorer/g=${gi}/t=${ti}/s=${si + 1}/m=${best.m1}`, `method ${best.m1}: the URL fragment names it`);
    await page.keyboard.press(String(data.methods.indexOf(m0) + 1));
    // Focus is on the method button; the digit key switches methods from anywhere in the explorer.
    eq((await snapshot(page)).pressed.join(), m0, `key ${data.methods.indexOf(m0) + 1} switches back to ${m0}`);
    eq(await cellColour(page, best.t, best.s), before, `method ${m0}: the cell has its first colour again`);
  }

  // A group without a graph shows a note instead.
  const bare = data.groups.findIndex((g) => !g.svg);
  if (bare >= 0) {
    await page.click(`#explorer .cx-g[data-g="${bare}"]`);
    view = await snapshot(page);
    check(!view.svg && /graph/i.test(view.note || ""), `group ${bare} has no svg: a note says so`, view.note);
    checkShown(view, data, bare, 0, 0, m0, `group ${bare}`);
    // And back to a group with a graph: it is drawn and highlighted again.
    await page.click(`#explorer .cx-g[data-g="${gi}"]`);
    await page.click(`#explorer .cx-c[data-t="${ti}"][data-s="${si}"]`);
    await sleep(350);
    checkShown(await snapshot(page), data, gi, ti, si, m0, `back to group ${gi}`);
  }

  // Open the chosen step by its fragment (as a link would) and keep a screenshot of the explorer.
  await page.goto(`${url}#explorer/g=${gi}/t=${ti}/s=${si}/m=${m0}`, { waitUntil: "load" });
  await page.reload({ waitUntil: "load" });
  await page.waitForSelector("#explorer .cx-c.cx-sel", { timeout: 10000 });
  await sleep(400);
  checkShown(await snapshot(page), data, gi, ti, si, m0, "fragment link");
  await page.evaluate(() => document.getElementById("explorer").scrollIntoView({ block: "start" }));
  await sleep(100);
  await page.screenshot({ path: screenshot });
  console.log(`      screenshot: ${screenshot}`);

  check(external.length === 0, "no request leaves the file (no network, fonts or scripts)", external.join(", "));
  check(errors.length === 0, "no script errors or console errors", errors.join("\n      "));

  await speed(browser, data.palette);
  return failures ? 1 : 0;
}

// ~5,000 step cells in one group: first paint and a method switch stay fast. Uses the explorer
// sources from the repository with synthetic data (and the report's colour scale).
async function speed(browser, palette) {
  const css = join(EXPLORER_DIR, "explorer.css"), js = join(EXPLORER_DIR, "explorer.js");
  if (!existsSync(css) || !existsSync(js)) return;
  const methods = ["grpo", "gigpo", "proxmo", "graphgpo", "mgr"];
  let seed = 7;
  const rnd = () => ((seed = (seed * 16807) % 2147483647) / 2147483647) * 2 - 1;
  const trajectories = Array.from({ length: 50 }, (_, t) => ({
    id: `t${t}`, success: t % 3 === 0, return: t % 3 === 0 ? 10 : 0, length: 100,
    steps: Array.from({ length: 100 }, (_, s) => ({
      step: s, obs: `observation ${t}/${s} `.repeat(40), action: `go to cabinet ${s % 7}`, valid: s % 11 !== 5, reward: 0, node: null,
      adv: Object.fromEntries(methods.map((m) => [m, +(2 * rnd()).toFixed(3)])),
      parts: { gigpo: { episode: 0.5, step: 0.25, group_size: 3 } },
    })),
  }));
  const data = {
    methods, default_method: "gigpo", scale: Object.fromEntries(methods.map((m) => [m, 2])), palette,
    groups: [{ id: "big", iteration: 1, task: null, why: "speed test", success_rate: 0.34, svg: null, trajectories }],
  };
  const html =
    `<!DOCTYPE html><html><head><meta charset="utf-8"><style>${readFileSync(css, "utf8")}</style></head><body>` +
    `<script type="application/json" id="credit-explorer-data">${JSON.stringify(data).replace(/</g, "\\u003c")}</script>` +
    `<div id="explorer"></div><script>window.__t0 = performance.now();</script>` +
    `<script>${readFileSync(js, "utf8")}</script><script>window.__t1 = performance.now();</script></body></html>`;
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  await page.setContent(html, { waitUntil: "load" });
  const t = await page.evaluate(() => {
    const cells = document.querySelectorAll("#explorer .cx-c").length;
    const t0 = performance.now();
    document.querySelector('#explorer .cx-method[data-method="grpo"]').click();
    void document.body.offsetHeight; // include the style recalculation
    const sw = performance.now() - t0;
    const t1 = performance.now();
    document.querySelector('#explorer .cx-c[data-t="20"][data-s="50"]').click();
    void document.body.offsetHeight;
    return { cells, start: window.__t1 - window.__t0, method: sw, step: performance.now() - t1 };
  });
  console.log(`      ${t.cells} cells: start ${t.start.toFixed(0)} ms, method switch ${t.method.toFixed(0)} ms, step ${t.step.toFixed(0)} ms`);
  check(t.cells === 5000 && t.start < 1500 && t.method < 500 && t.step < 100, "5,000 cells: start < 1.5 s, method switch < 0.5 s, step < 0.1 s");
  await page.close();
}

main().then(
  (code) => {
    console.log(code === 0 ? "explorer test passed" : `explorer test failed (${failures} checks)`);
    process.exit(code);
  },
  (err) => {
    console.error(err);
    process.exit(2);
  }
);
