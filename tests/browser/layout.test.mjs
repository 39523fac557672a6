// The report's layout in headless Chromium at a desktop's width (1400 px) and a phone's (390 px):
// the page is no wider than the window, no table, figure or explorer panel runs past it (a wide
// table scrolls in its own box), the checks' result column shows without scrolling, the explorer
// stacks its panels at 390 px, and a single-turn report's explorer shows one prompt with its
// responses side by side, each with its score and every method's advantage.
//
//   node tests/browser/layout.test.mjs REPORT.html SHOTS_DIR [NAME]
//
// Writes full-page screenshots SHOTS_DIR/NAME-report-{1400,390}.png and
// SHOTS_DIR/NAME-explorer-{1400,390}.png (NAME defaults to "report"). Exits 1 when a check fails,
// 2 when the page cannot be driven.
import puppeteer from "puppeteer-core";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const CHROMIUM = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const [reportArg, shotsArg, name = "report"] = process.argv.slice(2);
if (!reportArg || !shotsArg) {
  console.error("usage: node tests/browser/layout.test.mjs REPORT.html SHOTS_DIR [NAME]");
  process.exit(2);
}
const target = resolve(reportArg);
const shots = resolve(shotsArg);

let failures = 0;
function check(ok, what, detail) {
  if (ok) console.log(`ok    ${what}`);
  else {
    failures++;
    console.log(`FAIL  ${what}${detail === undefined ? "" : `\n      ${detail}`}`);
  }
  return ok;
}

/** Advantages as the explorer formats them: "+1.250", "-0.310", "0.000", "—". */
function fmtAdv(x) {
  if (typeof x !== "number" || !Number.isFinite(x)) return "—";
  if (x === 0) return "0.000";
  const a = Math.abs(x);
  return (x < 0 ? "-" : "+") + (a < 0.001 || a >= 1e6 ? a.toExponential(2) : a.toFixed(3));
}

/** Other numbers (the score): integers as they are, else 3 decimals. */
function fmtNum(x) {
  if (x === null || x === undefined) return "—";
  if (typeof x !== "number" || !Number.isFinite(x) || Number.isInteger(x)) return String(x);
  const a = Math.abs(x);
  return a < 0.001 || a >= 1e6 ? x.toExponential(2) : x.toFixed(3);
}

/** Everything that must fit the window: [what, right edge, width of the window]. */
async function overflowing(page) {
  return page.evaluate(() => {
    const width = document.documentElement.clientWidth;
    const boxes = [
      ["the page", document.documentElement.scrollWidth],
      ...[...document.querySelectorAll("div.table, figure, nav.contents, pre, h2, p")].map((e, i) => [
        `${e.tagName.toLowerCase()}${e.className ? "." + e.className : ""} #${i} (${(e.id || e.textContent).slice(0, 40)})`,
        e.getBoundingClientRect().right,
      ]),
      // A table outside a scroll box must fit as it is.
      ...[...document.querySelectorAll("table")]
        .filter((t) => !t.closest("div.table") && !t.closest("#explorer"))
        .map((t, i) => [`bare table #${i}`, t.getBoundingClientRect().right]),
      ...[...document.querySelectorAll("#explorer, #explorer > div, #explorer .cx-main > div, #explorer .cx-resp")]
        .filter((e) => e.offsetParent !== null)
        .map((e) => [`explorer ${e.className || e.id}`, e.getBoundingClientRect().right]),
    ];
    return boxes.filter(([, right]) => right > width + 0.5).map(([what, right]) => `${what}: ${Math.round(right)} > ${width}`);
  });
}

/** The checks table's result cells that do not show in the window and in their scroll box. */
async function hiddenResults(page) {
  return page.evaluate(() => {
    const heading = document.getElementById("checks");
    if (!heading) return null;
    let box = heading.nextElementSibling;
    while (box && !(box.matches("div.table"))) box = box.nextElementSibling;
    if (!box) return ["no checks table"];
    const table = box.querySelector("table");
    const col = [...table.rows[0].cells].findIndex((c) => c.textContent === "result");
    if (col < 0) return ["no result column"];
    const frame = box.getBoundingClientRect();
    const width = document.documentElement.clientWidth;
    const hidden = [];
    for (const row of [...table.rows].slice(1)) {
      const cell = row.cells[col];
      if (!cell || cell.colSpan > 1) continue; // a line saying why a rule does not apply
      const r = cell.getBoundingClientRect();
      if (r.left < Math.max(0, frame.left) - 0.5 || r.right > Math.min(width, frame.right) + 0.5) {
        hidden.push(`${cell.textContent} at ${Math.round(r.left)}–${Math.round(r.right)}`);
      }
    }
    return hidden;
  });
}

async function drive(browser) {
  const html = readFileSync(target, "utf8");
  const match = html.match(/<script type="application\/json" id="credit-explorer-data">([\s\S]*?)<\/script>/);
  const data = match ? JSON.parse(match[1]) : null;
  const page = await browser.newPage();
  page.on("pageerror", (e) => check(false, "no script error", e.message));
  for (const width of [1400, 390]) {
    await page.setViewport({ width, height: 900 });
    await page.goto(pathToFileURL(target).href, { waitUntil: "load" });
    if (data) await page.waitForSelector("#explorer .cx-g", { timeout: 10000 });
    const over = await overflowing(page);
    check(over.length === 0, `${width} px: nothing runs past the window`, over.join("\n      "));
    const hidden = await hiddenResults(page);
    if (hidden !== null) check(hidden.length === 0, `${width} px: every check's result shows without scrolling`, hidden.join("; "));
    await page.screenshot({ path: join(shots, `${name}-report-${width}.png`), fullPage: true });
    if (!data) continue;
    await explorer(page, data, width);
    const panel = await page.$("#explorer");
    await panel.screenshot({ path: join(shots, `${name}-explorer-${width}.png`) });
  }
  await page.close();
  return failures ? 1 : 0;
}

/** The explorer at `width`: responses side by side (single-turn), or its panels stacked. */
async function explorer(page, data, width) {
  if (!data.single_turn) {
    const [detail, graph] = await page.evaluate(() =>
      [".cx-detail", ".cx-graph"].map((s) => {
        const r = document.querySelector(`#explorer ${s}`).getBoundingClientRect();
        return { left: r.left, top: r.top, bottom: r.bottom, width: r.width };
      })
    );
    if (width < 700) {
      check(graph.top >= detail.bottom - 1, `${width} px: the step panel and the graph stack`, JSON.stringify({ detail, graph }));
    } else {
      check(graph.left > detail.left && Math.abs(graph.top - detail.top) < 1, `${width} px: the step panel and the graph side by side`);
    }
    return;
  }
  // A single-turn group: its prompt, then one card per response with score and advantages.
  const gi = Math.min(1, data.groups.length - 1);
  await page.click(`#explorer .cx-g[data-g="${gi}"]`);
  const group = data.groups[gi];
  const shown = await page.evaluate(() => ({
    prompt: document.querySelector("#explorer .cx-prompt pre")?.textContent,
    grid: getComputedStyle(document.querySelector("#explorer .cx-grid")).display,
    main: getComputedStyle(document.querySelector("#explorer .cx-main")).display,
    cards: [...document.querySelectorAll("#explorer .cx-resp")].map((c) => ({
      top: c.getBoundingClientRect().top,
      text: c.querySelector(".cx-rtext").textContent,
      score: c.querySelector(".cx-reward").textContent,
      adv: Object.fromEntries([...c.querySelectorAll("tr")].map((r) => [r.cells[0].textContent, r.cells[1].textContent])),
    })),
  }));
  check(shown.prompt === (group.prompt ?? "—"), `${width} px: the group's prompt is shown`);
  check(shown.grid === "none" && shown.main === "none", `${width} px: no step grid, step panel or state graph`);
  check(shown.cards.length === group.trajectories.length, `${width} px: one card per response`, `${shown.cards.length} of ${group.trajectories.length}`);
  const wrong = [];
  group.trajectories.forEach((t, k) => {
    const card = shown.cards[k];
    const step = t.steps[0];
    if (!card) return;
    if (card.text !== step.action) wrong.push(`response ${k + 1}: text`);
    if (card.score !== fmtNum(step.reward)) wrong.push(`response ${k + 1}: score ${card.score} ≠ ${fmtNum(step.reward)}`);
    for (const m of data.methods) {
      if (card.adv[m] !== fmtAdv(step.adv[m])) wrong.push(`response ${k + 1}: ${m} ${card.adv[m]} ≠ ${fmtAdv(step.adv[m])}`);
    }
  });
  check(wrong.length === 0, `${width} px: each card's response, score and every method's advantage`, wrong.join("; "));
  const tops = new Set(shown.cards.map((c) => Math.round(c.top)));
  if (width < 700) check(tops.size === shown.cards.length, `${width} px: the responses stack`);
  else check(tops.size < shown.cards.length, `${width} px: the responses side by side`);
  // ←/→ move between responses.
  await page.focus("#explorer .cx-resp.cx-on");
  await page.keyboard.press("ArrowRight");
  const on = await page.evaluate(() => document.querySelector("#explorer .cx-resp.cx-on")?.getAttribute("data-t"));
  check(on === "1", `${width} px: → selects the next response`, `selected ${on}`);
}

async function main() {
  if (!existsSync(target)) {
    console.error(`error: no such file ${target}`);
    return 2;
  }
  if (!existsSync(CHROMIUM)) {
    console.error(`error: no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set CHROMIUM_PATH)`);
    return 2;
  }
  mkdirSync(shots, { recursive: true });
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
  });
  try {
    return await drive(browser);
  } finally {
    await browser.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(`error: ${err.stack || err}`);
    process.exit(2);
  }
);
