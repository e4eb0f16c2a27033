#!/usr/bin/env node
// The lru strategy over ctxbench's cmd: protocol: one JSON request per line on stdin,
// one JSON reply per line on stdout. Run: ctxbench run --strategy lru 'cmd:node examples/lru.js'
const readline = require("readline");
const MAX_ENTRIES = 100; // the factory's entry cap, as in create_lru_context_strategy()

function evict(state, budget) {
  const cap = budget.maxEntries == null ? MAX_ENTRIES : Math.min(MAX_ENTRIES, budget.maxEntries);
  const byAge = [...state].sort((a, b) =>
    a.lastAccessedAt - b.lastAccessedAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  let bytes = state.reduce((sum, e) => sum + e.sizeBytes, 0);
  let count = state.length;
  const out = [];
  for (const e of byAge) {
    if (bytes <= budget.maxBytes && count <= cap) break;
    out.push(e.id);
    bytes -= e.sizeBytes;
    count -= 1;
  }
  return out;
}

readline.createInterface({ input: process.stdin }).on("line", (line) => {
  const { state, budget } = JSON.parse(line);
  process.stdout.write(JSON.stringify({ evict: evict(state, budget) }) + "\n");
});
