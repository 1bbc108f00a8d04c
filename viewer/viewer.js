// divgpu viewer: reads a diversity_cache.json and the table it was computed
// from (for the titles), and shows the sequence from a chosen start.
// Plain script, no build step, no network beyond the two files.
"use strict";

(function () {
  // Relative to this page, so they name the repository's files when the
  // repository root is served (python3 -m http.server).
  const DEFAULTS = {
    cache: "../diversity_cache.json",
    embeddings: "../assets/embeddings/all-MiniLM-L6-v2/embeddings.json",
  };
  const ROWS_PER_PAGE = 200; // a full ordering can be N items long
  const MAX_MATCHES = 20;

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);

  let data = null; // { cache, table, byStart, lower }
  let shown = 0;   // rows of the current sequence in the table
  let current = null;

  // One line, naming the file; also on the console, for tools and tests.
  function fail(message) {
    const box = $("error");
    box.textContent = message;
    box.hidden = false;
    $("info").textContent = "Nothing loaded.";
    $("files").open = true; // another way in
    // Nothing of an earlier load stays on show.
    data = null;
    $("search").disabled = true;
    for (const id of ["chosen", "chosen-info", "sequence-table", "more"]) $(id).hidden = true;
    document.body.dataset.state = "error";
    console.error("divgpu viewer: " + message);
  }

  class InputError extends Error {}

  async function readUrl(url, hint) {
    let response;
    try {
      response = await fetch(url);
    } catch (e) {
      throw new InputError(`${url}: cannot be read (${e.message})`);
    }
    if (!response.ok) {
      const why = `${url}: HTTP ${response.status} ${response.statusText}`.trim();
      throw new InputError(response.status === 404 && hint ? `${why} (${hint})` : why);
    }
    return { name: url, bytes: await response.arrayBuffer() };
  }

  async function readFile(file) {
    return { name: file.name, bytes: await file.arrayBuffer() };
  }

  function parseJson(source) {
    const text = new TextDecoder("utf-8").decode(source.bytes);
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new InputError(`${source.name}: not valid JSON (${e.message})`);
    }
  }

  const isCount = (x) => Number.isInteger(x) && x > 0;

  // The checks of src/contract/cache.rs (docs/formats.md, "Cache file"), plus one
  // sequence per start.
  function checkCache(name, c) {
    if (c === null || typeof c !== "object" || Array.isArray(c)) {
      throw new InputError(`${name}: not a divgpu cache (a JSON object is expected)`);
    }
    if (c.format !== "divgpu-diversity-cache" || (c.version !== 1 && c.version !== 2)) {
      throw new InputError(`${name}: not a divgpu cache of version 1 or 2 (format ${JSON.stringify(c.format)}, version ${JSON.stringify(c.version)})`);
    }
    if (c.contract !== "fp32" && c.contract !== "fp16") {
      throw new InputError(`${name}: unknown contract ${JSON.stringify(c.contract)} ("fp32" or "fp16")`);
    }
    for (const key of ["num_items", "length"]) {
      if (!isCount(c[key])) throw new InputError(`${name}: ${key} is ${JSON.stringify(c[key])}, not a positive integer`);
    }
    if (typeof c.embeddings_sha256 !== "string" || !/^[0-9a-fA-F]{64}$/.test(c.embeddings_sha256)) {
      throw new InputError(`${name}: embeddings_sha256 is not a sha256 (64 hex digits)`);
    }
    if (!Array.isArray(c.sequences) || c.sequences.length === 0) {
      throw new InputError(`${name}: no sequences`);
    }
    // Version 2 says how many sequences it holds: a cut file is refused.
    if (c.version === 2 && c.sequences.length !== c.starts_count) {
      throw new InputError(`${name}: has ${c.sequences.length} sequences, but its header says starts_count ${JSON.stringify(c.starts_count)}`);
    }
    const byStart = new Map();
    c.sequences.forEach((seq, i) => {
      if (!Array.isArray(seq) || seq.length !== c.length) {
        throw new InputError(`${name}: sequence ${i} has ${Array.isArray(seq) ? seq.length : "no"} items, the header says length ${c.length}`);
      }
      for (let k = 0; k < seq.length; k++) {
        const x = seq[k];
        if (!Number.isInteger(x) || x < 0 || x >= c.num_items) {
          throw new InputError(`${name}: sequence ${i}, step ${k}: item ${JSON.stringify(x)} is out of range (the header says ${c.num_items} items)`);
        }
      }
      if (byStart.has(seq[0])) {
        throw new InputError(`${name}: sequences ${byStart.get(seq[0])} and ${i} both start at item ${seq[0]}`);
      }
      byStart.set(seq[0], i);
    });
    return byStart;
  }

  // docs/formats.md, "Embeddings table": a bare array of rows, or an object with
  // `embeddings` and optional `titles`, `ids`, `model`.
  function checkTable(name, t) {
    const rows = Array.isArray(t) ? t : t && t.embeddings;
    if (!Array.isArray(rows)) {
      throw new InputError(`${name}: not an embeddings table (an array of rows, or an object with "embeddings")`);
    }
    const n = rows.length;
    const list = (key) => {
      const v = Array.isArray(t) ? undefined : t[key];
      if (v === undefined) return null;
      if (!Array.isArray(v) || v.length !== n || v.some((s) => typeof s !== "string")) {
        throw new InputError(`${name}: "${key}" is not ${n} strings (one per row of "embeddings")`);
      }
      return v;
    };
    const titles = list("titles");
    const ids = list("ids");
    return { n, titles, ids, model: Array.isArray(t) ? null : t.model };
  }

  async function sha256Hex(bytes) {
    // crypto.subtle exists only in secure contexts (localhost, https, file:).
    if (!(window.crypto && crypto.subtle)) return null;
    const digest = await crypto.subtle.digest("SHA-256", bytes);
    return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // The table's titles are "heading — author" (assets/README.md): the
  // author is what follows the last dash.
  function splitTitle(table, i) {
    const full = table.titles ? table.titles[i] : table.ids ? table.ids[i] : `item ${i}`;
    const cut = table.titles ? full.lastIndexOf(" — ") : -1;
    return cut < 0 ? { title: full, author: "" } : { title: full.slice(0, cut), author: full.slice(cut + 3) };
  }

  async function load(cacheSource, tableSource) {
    document.body.dataset.state = "loading";
    $("error").hidden = true;
    $("info").textContent = "Loading…";
    try {
      const [cs, ts] = await Promise.all([cacheSource(), tableSource()]);
      const cache = parseJson(cs);
      const byStart = checkCache(cs.name, cache);
      const table = checkTable(ts.name, parseJson(ts));
      if (cache.num_items !== table.n) {
        throw new InputError(`${cs.name} is for ${cache.num_items} items (num_items) but ${ts.name} has ${table.n}`);
      }
      const sha = await sha256Hex(ts.bytes);
      if (sha !== null && sha !== cache.embeddings_sha256.toLowerCase()) {
        throw new InputError(`${cs.name} was computed from another table: its embeddings_sha256 is ${cache.embeddings_sha256.slice(0, 12)}…, ${ts.name} has sha256 ${sha.slice(0, 12)}…`);
      }
      const lower = [];
      for (let i = 0; i < table.n; i++) {
        lower.push(((table.titles ? table.titles[i] : "") + "\n" + (table.ids ? table.ids[i] : "")).toLowerCase());
      }
      data = { cache, table, byStart, lower };
      $("info").textContent =
        `${cs.name}: ${cache.sequences.length} sequences of ${cache.length} items, contract ${cache.contract}; ` +
        `titles from ${ts.name}` + (table.model ? ` (${table.model})` : "") +
        (sha === null ? "; the table's sha256 was not checked (this page is not a secure context)" : ", the table the cache was computed from") + ".";
      const search = $("search");
      search.disabled = false;
      document.body.dataset.state = "ready";
      const start = params.get("start");
      if (start !== null && /^\d+$/.test(start)) {
        choose(Number(start));
      } else {
        search.focus();
      }
    } catch (e) {
      fail(e instanceof InputError ? e.message : `cannot show the files: ${e.message}`);
    }
  }

  // --- search ---------------------------------------------------------
  let matches = [];
  let active = -1;

  function findMatches(query) {
    const q = query.trim().toLowerCase();
    if (!q) return [];
    const found = [];
    if (/^\d+$/.test(q) && Number(q) < data.table.n) found.push(Number(q));
    const later = [];
    for (let i = 0; i < data.lower.length && found.length < MAX_MATCHES; i++) {
      const at = data.lower[i].indexOf(q);
      if (at < 0 || found.includes(i)) continue;
      // Titles that begin with the query first.
      if (at === 0) found.push(i);
      else if (later.length < MAX_MATCHES) later.push(i);
    }
    return found.concat(later).slice(0, MAX_MATCHES);
  }

  function renderMatches() {
    const list = $("matches");
    list.textContent = "";
    matches.forEach((i, k) => {
      const li = document.createElement("li");
      li.setAttribute("role", "option");
      li.id = `match-${k}`;
      li.dataset.item = i;
      const { title, author } = splitTitle(data.table, i);
      li.append(title);
      if (author) {
        const span = document.createElement("span");
        span.className = "author";
        span.textContent = " — " + author;
        li.append(span);
      }
      if (k === active) li.setAttribute("aria-selected", "true");
      list.append(li);
    });
    list.hidden = matches.length === 0;
    $("search").setAttribute("aria-expanded", String(!list.hidden));
    $("search").setAttribute("aria-activedescendant", active >= 0 ? `match-${active}` : "");
  }

  function onInput() {
    matches = findMatches($("search").value);
    active = matches.length ? 0 : -1;
    renderMatches();
  }

  function onKey(event) {
    if ($("matches").hidden) return;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      const step = event.key === "ArrowDown" ? 1 : -1;
      active = (active + step + matches.length) % matches.length;
      renderMatches();
      event.preventDefault();
    } else if (event.key === "Enter" && active >= 0) {
      choose(matches[active]);
      event.preventDefault();
    } else if (event.key === "Escape") {
      matches = [];
      renderMatches();
    }
  }

  // --- the sequence -----------------------------------------------------
  function choose(item) {
    matches = [];
    renderMatches();
    if (!data || !(item >= 0 && item < data.table.n)) return;
    current = item;
    const { title, author } = splitTitle(data.table, item);
    $("search").value = author ? `${title} — ${author}` : title;
    const heading = $("chosen");
    heading.textContent = `From “${title}”` + (author ? ` (${author})` : "");
    heading.hidden = false;
    const row = data.byStart.get(item);
    const info = $("chosen-info");
    info.hidden = false;
    try {
      const url = new URL(location.href);
      url.searchParams.set("start", item);
      history.replaceState(null, "", url);
    } catch (e) {
      // Some file: URLs refuse a new address; the page works without it.
    }
    $("sequence").textContent = "";
    shown = 0;
    document.body.dataset.shown = String(item);
    if (row === undefined) {
      info.textContent = `No sequence in this cache starts at item ${item}: it holds ${data.cache.sequences.length} of ${data.cache.num_items} starts.`;
      $("sequence-table").hidden = true;
      $("more").hidden = true;
      return;
    }
    info.textContent = `Item ${item}, sequence ${row} of the cache (both 0-based): ${data.cache.length} items, ` +
      "each the one most different from the centroid of those before it. Choose a title to start from it.";
    $("sequence-table").hidden = false;
    showMore();
  }

  function showMore() {
    const seq = data.cache.sequences[data.byStart.get(current)];
    const body = $("sequence");
    const end = Math.min(seq.length, shown + ROWS_PER_PAGE);
    const rows = document.createDocumentFragment();
    for (let k = shown; k < end; k++) {
      const i = seq[k];
      const { title, author } = splitTitle(data.table, i);
      const tr = document.createElement("tr");
      tr.dataset.item = i;
      const pos = document.createElement("td");
      pos.className = "pos";
      pos.textContent = k + 1;
      const t = document.createElement("td");
      t.className = "title";
      const a = document.createElement("a");
      a.href = `?start=${i}`;
      a.textContent = title;
      a.title = "start from this item";
      t.append(a);
      const au = document.createElement("td");
      au.className = "author";
      au.textContent = author;
      const it = document.createElement("td");
      it.className = "item";
      it.textContent = i;
      tr.append(pos, t, au, it);
      rows.append(tr);
    }
    body.append(rows);
    shown = end;
    const more = $("more");
    more.hidden = shown >= seq.length;
    more.textContent = `Show ${Math.min(ROWS_PER_PAGE, seq.length - shown)} more (${shown} of ${seq.length} shown)`;
  }

  function start() {
    const search = $("search");
    search.addEventListener("input", onInput);
    search.addEventListener("keydown", onKey);
    // mousedown, not click: the list must not close on the input's blur first.
    $("matches").addEventListener("mousedown", (event) => {
      const li = event.target.closest("li[data-item]");
      if (li) {
        choose(Number(li.dataset.item));
        event.preventDefault();
      }
    });
    $("sequence").addEventListener("click", (event) => {
      const a = event.target.closest("a");
      if (a && !event.ctrlKey && !event.metaKey) {
        choose(Number(a.closest("tr").dataset.item));
        window.scrollTo(0, 0);
        event.preventDefault();
      }
    });
    $("more").addEventListener("click", showMore);

    const pickCache = $("cache-file");
    const pickTable = $("embeddings-file");
    const onPick = () => {
      if (pickCache.files.length && pickTable.files.length) {
        load(() => readFile(pickCache.files[0]), () => readFile(pickTable.files[0]));
      }
    };
    pickCache.addEventListener("change", onPick);
    pickTable.addEventListener("change", onPick);

    if (location.protocol === "file:") {
      // fetch() cannot read file: URLs in Chromium; the pickers can.
      $("files").open = true;
      $("files-why").hidden = false;
      $("info").textContent = "Choose the two files below.";
      document.body.dataset.state = "pick";
      return;
    }
    const cacheUrl = params.get("cache") || DEFAULTS.cache;
    const tableUrl = params.get("embeddings") || DEFAULTS.embeddings;
    load(() => readUrl(cacheUrl, params.get("cache") ? null : "make it with `make run`, or name another with ?cache=PATH"),
         () => readUrl(tableUrl, params.get("embeddings") ? null : "name the table with ?embeddings=PATH"));
  }

  start();
})();
