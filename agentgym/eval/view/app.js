// agentgym view: renders the JSON in #data. Every value is untrusted text (model responses, observations): it is
// only ever written with textContent / createTextNode, never as HTML.
"use strict";
(function () {
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const episodes = DATA.episodes;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }
  const fmt = (x, d = 3) => (x === null || x === undefined) ? "–" :
    (typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : String(x));
  const pct = (x) => (x === null || x === undefined) ? "–" : (100 * x).toFixed(1) + "%";
  const pm = (m, se, f) => f(m) + (se ? " ± " + f(se) : "");

  // ---- header and summary ----------------------------------------------------------------------------------
  document.getElementById("meta").textContent =
    `${episodes.length} episodes from ${DATA.sources.join(", ")} · ${DATA.transcripts} with transcripts · ` +
    `generated ${DATA.generated}` + (DATA.full_prompts ? " · every turn's prompt" : " · first prompt of each episode");
  // What the page left out or cut (malformed lines, unreadable transcripts, size limits): said where it shows.
  const notes = document.getElementById("notes");
  for (const n of DATA.notes || []) notes.appendChild(el("li", {text: n}));
  notes.hidden = !(DATA.notes || []).length;

  function summaryTable() {
    const box = document.getElementById("summary");
    if (!DATA.summary.length) { box.appendChild(el("p", {class: "note", text: "no episodes"})); return; }
    const cols = [["run", (s) => s.source + " (" + s.policy + ")"], ["env", (s) => s.env_id + " / " + s.split],
                  ["family", (s) => s.family],
                  ["episodes", (s) => fmt(s.episodes)], ["errors", (s) => fmt(s.errors)], ["wins", (s) => fmt(s.wins)],
                  ["success", (s) => pm(s.success, s.success_se, pct)],
                  ["score", (s) => pm(s.score, s.score_se, (x) => fmt(x))],
                  ["reward", (s) => pm(s.reward, s.reward_se, (x) => fmt(x))],
                  ["turns", (s) => pm(s.turns, s.turns_se, (x) => fmt(x, 1))]];
    const table = el("table", {class: "summary"});
    table.appendChild(el("tr", {}, ...cols.map(([h]) => el("th", {text: h}))));
    for (const s of DATA.summary) {
      table.appendChild(el("tr", {class: s.family === "All" ? "all" : ""}, ...cols.map(([, f]) => el("td", {text: f(s)}))));
    }
    box.appendChild(table);
  }

  // ---- filters ---------------------------------------------------------------------------------------------
  const filters = {
    env: document.getElementById("f-env"), family: document.getElementById("f-family"),
    outcome: document.getElementById("f-outcome"), error: document.getElementById("f-error"),
    task: document.getElementById("f-task"),
  };
  function fillSelect(select, values, allLabel) {
    select.appendChild(el("option", {value: "", text: allLabel}));
    for (const v of values) select.appendChild(el("option", {value: v, text: v}));
  }
  const uniq = (f) => [...new Set(episodes.map(f).filter((v) => v !== null && v !== undefined))].sort();
  fillSelect(filters.env, uniq((e) => e.env_id + " / " + e.split), "all");
  fillSelect(filters.family, uniq((e) => e.family), "all");
  fillSelect(filters.outcome, ["won", "lost", "error"], "all");
  fillSelect(filters.error, uniq((e) => e.error_kind), "any");

  function matches(e) {
    if (filters.env.value && e.env_id + " / " + e.split !== filters.env.value) return false;
    if (filters.family.value && e.family !== filters.family.value) return false;
    if (filters.outcome.value && e.outcome !== filters.outcome.value) return false;
    if (filters.error.value && e.error_kind !== filters.error.value) return false;
    const q = filters.task.value.trim().toLowerCase();
    return !q || e.task_id.toLowerCase().includes(q);
  }

  // ---- episodes --------------------------------------------------------------------------------------------
  function flag(text, good) {
    return el("span", {class: "flag " + (good === true ? "good" : good === false ? "bad" : ""), text: text});
  }
  function block(label, text, cls) {
    if (text === null || text === undefined || text === "") return null;
    return el("div", {}, el("div", {class: "label", text: label}), el("pre", {class: cls || "", text: String(text)}));
  }
  function folded(label, text) {
    if (text === null || text === undefined) return null;
    return el("details", {class: "sub"}, el("summary", {text: label}), el("pre", {text: String(text)}));
  }
  function usageText(u) {
    if (!u) return null;
    const parts = [];
    for (const k of ["prompt_tokens", "completion_tokens", "latency_s", "attempts", "finish_reason"]) {
      if (u[k] !== undefined && u[k] !== null) parts.push(k + " " + fmt(u[k]));
    }
    return parts.join(" · ") || JSON.stringify(u);
  }

  function renderTurn(t) {
    const bad = t.action_valid === false, failed = t.process_ok === false || t.action_admissible === false;
    const head = el("div", {class: "turn-head"}, el("span", {text: "Turn " + (t.turn + 1)}),
      el("span", {class: "k", text: "reward " + fmt(t.reward)}),
      flag(t.action_valid === false ? "invalid action" : "valid", !bad),
      t.action_admissible === null || t.action_admissible === undefined ? null :
        flag(t.action_admissible ? "admissible" : "not admissible", t.action_admissible),
      t.process_ok === null || t.process_ok === undefined ? null :
        flag(t.process_ok ? "process ok" : "process failed", t.process_ok),
      t.terminated ? flag("terminated", null) : null, t.truncated ? flag("truncated", null) : null,
      t.won ? flag("won", true) : null);
    const parsed = t.action === null || t.action === undefined ? "(nothing parsed)" :
      (t.action_tag ? "<" + t.action_tag + "> " : "") + t.action;
    const extra = t.extra && Object.keys(t.extra).length ? JSON.stringify(t.extra, null, 1) : null;
    return el("div", {class: "turn" + (bad ? " invalid" : failed ? " failed" : "")}, head,
      t.prompt !== null && t.prompt !== undefined ? folded("prompt (as the policy saw it)", t.prompt) : null,
      block("raw response", t.response, "response"),
      block("parsed action", parsed),
      block("feedback", t.invalid_reason),
      block("observation", t.observation),
      t.error ? block("error", JSON.stringify(t.error, null, 1), "error") : null,
      t.usage ? el("div", {class: "k", text: "usage: " + usageText(t.usage)}) : null,
      extra ? folded("other info (score " + fmt(t.score) + ", progress " + fmt(t.progress) + ")", extra) : null);
  }

  function renderBody(e) {
    const body = el("div", {class: "body"});
    const ids = Object.entries(e.identity || {}).map(([k, v]) => k + ": " + fmt(v)).join(" · ");
    body.appendChild(el("div", {class: "k", text:
      `policy ${e.policy} · seed ${e.seed} · trial ${e.trial} · ${fmt(e.turns)} turns · total reward ` +
      `${fmt(e.total_reward)} · score ${fmt(e.score)}` + (e.prompt_tokens ? ` · tokens ${e.prompt_tokens} in / ` +
      `${e.completion_tokens} out` : "") + (ids ? " · " + ids : "")}));
    if (e.system_prompt) body.appendChild(folded("system prompt", e.system_prompt));
    if (e.error) body.appendChild(block("episode error (" + e.error.kind + ")",
      (e.error.message || "") + (e.error.traceback ? "\n\n" + e.error.traceback : ""), "error"));
    const tr = e.transcript;
    if (!tr) {
      body.appendChild(el("p", {class: "note", text: e.transcript_note ? "No transcript shown: " + e.transcript_note :
        "No transcript stored for this episode (run 'agentgym eval' without --no-transcripts to keep them)."}));
      return body;
    }
    if (!tr.turns.length) body.appendChild(block("first observation", tr.first_observation));
    for (const t of tr.turns) body.appendChild(renderTurn(t));
    return body;
  }

  function renderEpisode(e) {
    const d = el("details", {class: "episode", "data-i": String(e.i), "data-outcome": e.outcome});
    d.appendChild(el("summary", {},
      el("span", {class: "badge " + e.outcome, text: e.outcome + (e.error_kind ? ": " + e.error_kind : "")}),
      el("span", {class: "task", text: e.task_id}),
      el("span", {class: "k", text: e.env_id + " / " + e.split + " · " + e.source}),
      e.family !== null ? el("span", {class: "k", text: "family " + e.family}) : null,
      el("span", {class: "k", text: "seed " + e.seed + " · trial " + e.trial}),
      el("span", {class: "k", text: "score " + fmt(e.score) + " · " + fmt(e.turns) + " turns"})));
    d.addEventListener("toggle", () => {  // the transcript is built when first opened
      if (d.open && d.childElementCount === 1) d.appendChild(renderBody(e));
    });
    return d;
  }

  const list = document.getElementById("episodes");
  const nodes = episodes.map(renderEpisode);
  for (const n of nodes) list.appendChild(n);
  function applyFilters() {
    let shown = 0;
    episodes.forEach((e, i) => {
      const ok = matches(e);
      nodes[i].hidden = !ok;
      if (ok) shown += 1;
    });
    document.getElementById("count").textContent = `${shown} of ${episodes.length} episodes` +
      (DATA.episodes_total > episodes.length ? ` (${DATA.episodes_total} in the files)` : "");
  }
  for (const f of Object.values(filters)) f.addEventListener("input", applyFilters);
  summaryTable();
  applyFilters();
})();
