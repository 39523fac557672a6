// Copies crates/report/src/explorer/explorer.css and explorer.js into sample.html (between
// <style id="credit-explorer-style"> and <script id="credit-explorer-script">), keeping its data.
//   node tests/browser/inline-sample.mjs           rewrite sample.html
//   node tests/browser/inline-sample.mjs --check   exit 1 when sample.html is stale
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

export const EXPLORER_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "crates", "report", "src", "explorer");
export const SAMPLE = join(EXPLORER_DIR, "sample.html");

const STYLE_OPEN = '<style id="credit-explorer-style">\n';
const SCRIPT_OPEN = '<script id="credit-explorer-script">\n';

function replaceBetween(text, open, close, body) {
  const a = text.indexOf(open);
  if (a < 0) throw new Error(`sample.html has no ${open.trim()}`);
  const b = text.indexOf(close, a + open.length);
  if (b < 0) throw new Error(`sample.html has no ${close} after ${open.trim()}`);
  return text.slice(0, a + open.length) + body + text.slice(b);
}

/** sample.html's text with the current explorer.css and explorer.js inlined. */
export function inlined() {
  const css = readFileSync(join(EXPLORER_DIR, "explorer.css"), "utf8");
  const js = readFileSync(join(EXPLORER_DIR, "explorer.js"), "utf8");
  // Inline <style>/<script> end at the first </style or </script, whatever the case.
  if (/<\/style/i.test(css)) throw new Error("explorer.css must not contain </style");
  if (/<\/script|<!--/i.test(js)) throw new Error("explorer.js must not contain </script or <!--");
  let text = readFileSync(SAMPLE, "utf8");
  text = replaceBetween(text, STYLE_OPEN, "</style>", css);
  text = replaceBetween(text, SCRIPT_OPEN, "</script>", js);
  return text;
}

/** Whether sample.html already holds the current explorer.css and explorer.js. */
export function sampleIsCurrent() {
  return inlined() === readFileSync(SAMPLE, "utf8");
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  if (process.argv.includes("--check")) {
    if (!sampleIsCurrent()) {
      console.error(`${SAMPLE} is stale: run node tests/browser/inline-sample.mjs`);
      process.exit(1);
    }
    console.log(`${SAMPLE} is current`);
  } else {
    writeFileSync(SAMPLE, inlined());
    console.log(`wrote ${SAMPLE}`);
  }
}
