// divgpu viewer: shows the sequence from a chosen start of a diversity
// cache (JSON or binary, read by cache.js one start at a time where it can),
// with the titles of the table it was computed from when one is given.
// Plain script, no build step, nothing fetched but same-origin files.
"use strict";

(function () {
  const { InputError, plural } = window.divgpuCache;
  // Relative to this page, so they name the repository's files when the
  // repository root is served (python3 -m http.server).
  const DEFAULTS = {
    cache: "../diversity_cache.json",
    embeddings: "../assets/embeddings/all-MiniLM-L6-v2/embeddings.json",
  };
  const READ_MODES = ["auto", "whole", "start"];
  const ROWS_PER_PAGE = 200; // a full ordering can be N items long
  const MAX_MATCHES = 20;

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const bytes = (n) => `${n.toLocaleString("en-US")} bytes`;

  let data = null; // { cache, table (or null), n, lower (or null) }
  let current = null; // { item, items, position } on show
  let shown = 0; // rows of the current sequence in the table
  let chosen = 0; // counts choices: a slow read must not overwrite a later one
  let loads = 0; // the same for loads (a cache picked, then its table)

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
    for (const id of ["chosen", "chosen-info", "sequence-table", "more", "reads"]) $(id).hidden = true;
    document.body.dataset.state = "error";
    console.error("divgpu viewer: " + message);
  }

  const failWith = (e) => fail(e instanceof InputError ? e.message : `cannot show the files: ${e.message}`);

  // Only files of this page's origin are loaded: another origin's text would
  // show under this site's name. Relative URLs are fine. The refused URL is
  // named by its origin or scheme only, never by the text it carries.
  function sameOriginUrl(param, value) {
    let url;
    try {
      url = new URL(value, location.href);
    } catch (e) {
      throw new InputError(`?${param}= is not a URL: refused`);
    }
    const web = url.protocol === "http:" || url.protocol === "https:";
    if (web && url.origin === location.origin) return value;
    const where = web ? url.origin.slice(0, 80) : `a ${url.protocol.slice(0, 20)} URL`;
    throw new InputError(`?${param}= names ${where}, not this page's origin ${location.origin}: refused (the viewer loads only files served with it)`);
  }

  // docs/formats.md, "Embeddings table": a bare array of rows, or an object with
  // `embeddings` and optional `titles` (strings), `ids` (strings or numbers), `model`.
  function checkTable(name, t) {
    const rows = Array.isArray(t) ? t : t && t.embeddings;
    if (!Array.isArray(rows)) {
      throw new InputError(`${name}: not an embeddings table (an array of rows, or an object with "embeddings")`);
    }
    const n = rows.length;
    const list = (key, fits, what) => {
      const v = Array.isArray(t) ? undefined : t[key];
      if (v === undefined) return null;
      if (!Array.isArray(v) || v.length !== n || !v.every(fits)) {
        throw new InputError(`${name}: "${key}" is not ${n} ${what} (one per row of "embeddings")`);
      }
      return v.map(String);
    };
    const titles = list("titles", (s) => typeof s === "string", "strings");
    const ids = list("ids", (s) => typeof s === "string" || Number.isFinite(s), "strings or numbers");
    return { name, n, titles, ids, model: Array.isArray(t) ? null : t.model };
  }

  async function readTable(source) {
    const raw = await source.readAll();
    const table = checkTable(source.name, window.divgpuCache.parseJson(source.name, raw));
    table.sha256 = await window.divgpuCache.sha256Hex(raw);
    return table;
  }

  function checkPair(cache, table) {
    const name = cache.source.name, h = cache.header;
    if (h.num_items !== table.n) {
      throw new InputError(`${name} is for ${h.num_items} items (num_items) but ${table.name} has ${table.n}`);
    }
    if (table.sha256 !== null && table.sha256 !== h.embeddings_sha256.toLowerCase()) {
      throw new InputError(`${name} was computed from another table: its embeddings_sha256 is ${h.embeddings_sha256.slice(0, 12)}…, ${table.name} has sha256 ${table.sha256.slice(0, 12)}…`);
    }
  }

  // The table's titles are "heading — author" (assets/README.md): the
  // author is what follows the last dash. Without titles: the id, or the item.
  function label(i) {
    const table = data.table;
    if (!table || !(table.titles || table.ids)) return { title: `item ${i}`, author: "" };
    const full = table.titles ? table.titles[i] : table.ids[i];
    const cut = table.titles ? full.lastIndexOf(" — ") : -1;
    return cut < 0 ? { title: full, author: "" } : { title: full.slice(0, cut), author: full.slice(cut + 3) };
  }

  function describe(cache, table) {
    const h = cache.header;
    const count = cache.startsCount === null ? "sequences" : plural(cache.startsCount, "sequence");
    const more = cache.startsCount === null || cache.startsCount > cache.firstStarts.length ? ", …" : "";
    let text = `${cache.source.name}: ${cache.form} cache, ${count} of ${h.length} items over ${h.num_items} items, ` +
      `contract ${h.contract}; starts ${cache.firstStarts.join(", ")}${more}; `;
    if (!table) {
      return text + "no table, so items are shown by number (name one with ?embeddings=PATH, or pick it, for titles).";
    }
    text += `titles from ${table.name}` + (table.model ? ` (${table.model})` : "");
    return text + (table.sha256 === null ? "; the table's sha256 was not checked (this page is not a secure context)."
      : ", the table the cache was computed from.");
  }

  // What was read of the cache, and how: a large cache must cost little.
  function showReads() {
    const { source, reading } = data.cache;
    const how = !source.byRange ? "the server ignores range requests, so the file was read whole"
      : reading === "whole" ? "read whole" : source.file ? "read by start with Blob.slice" : "read by start with HTTP range requests";
    const box = $("reads");
    box.textContent = `${source.name}: ${bytes(source.bytesRead)} of ${bytes(source.size)} read in ${plural(source.reads, "read")} (${how}).`;
    box.hidden = false;
    document.body.dataset.bytesRead = String(source.bytesRead);
  }

  async function load(cacheSource, tableSource, read) {
    const ticket = ++loads;
    document.body.dataset.state = "loading";
    $("error").hidden = true;
    $("info").textContent = "Loading…";
    try {
      const [cache, table] = await Promise.all([window.divgpuCache.open(cacheSource, read),
        tableSource ? readTable(tableSource) : null]);
      if (ticket !== loads) return;
      if (table) checkPair(cache, table);
      data = { cache, table, n: cache.header.num_items, lower: table && lowerLabels(table) };
      $("info").textContent = describe(cache, table);
      showReads();
      const search = $("search");
      search.disabled = false;
      search.placeholder = table && (table.titles || table.ids) ? "type part of a title, or an item number"
        : `type an item number, 0 to ${data.n - 1}`;
      const start = params.get("start");
      if (start !== null && /^\d+$/.test(start)) {
        await choose(Number(start));
      } else {
        document.body.dataset.state = "ready";
        search.focus();
      }
    } catch (e) {
      if (ticket === loads) failWith(e);
    }
  }

  function lowerLabels(table) {
    const lower = [];
    for (let i = 0; i < table.n; i++) {
      lower.push(((table.titles ? table.titles[i] : "") + "\n" + (table.ids ? table.ids[i] : "")).toLowerCase());
    }
    return lower;
  }

  // --- search ---------------------------------------------------------
  let matches = [];
  let active = -1;

  function findMatches(query) {
    const q = query.trim().toLowerCase();
    if (!q) return [];
    const found = [];
    if (/^\d+$/.test(q) && Number(q) < data.n) found.push(Number(q));
    if (!data.lower) return found;
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
      const { title, author } = label(i);
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

  // This page's address with another start (the other parameters kept).
  function startHref(item) {
    const url = new URL(location.href);
    url.searchParams.set("start", item);
    return url.search;
  }

  function noSequence(item) {
    const { cache, n } = data;
    if (!(item < n)) return `There is no item ${item}: the cache is of ${n} items, 0 to ${n - 1}.`;
    const held = cache.startsCount === null ? "some" : `${cache.startsCount} of ${n}`;
    const how = cache.form === "JSON" && cache.reading === "by start" ? " (read by start, its starts are taken to ascend)" : "";
    return `No sequence in this cache starts at item ${item}: it holds ${held} starts${how}.`;
  }

  async function choose(item) {
    matches = [];
    renderMatches();
    if (!data || !Number.isInteger(item)) return;
    const ticket = ++chosen;
    document.body.dataset.state = "reading";
    const { title, author } = item < data.n ? label(item) : { title: `item ${item}`, author: "" };
    $("search").value = author ? `${title} — ${author}` : title;
    $("chosen").textContent = `From “${title}”` + (author ? ` (${author})` : "");
    $("chosen").hidden = false;
    let found = null;
    try {
      if (item < data.n) found = await data.cache.sequence(item);
    } catch (e) {
      failWith(e);
      return;
    }
    if (ticket !== chosen) return;
    try {
      history.replaceState(null, "", startHref(item));
    } catch (e) {
      // Some file: URLs refuse a new address; the page works without it.
    }
    current = found && { item, ...found };
    showSequence(item);
  }

  function showSequence(item) {
    const info = $("chosen-info");
    info.hidden = false;
    $("sequence").textContent = "";
    shown = 0;
    if (current === null) {
      info.textContent = noSequence(item);
      $("sequence-table").hidden = true;
      $("more").hidden = true;
    } else {
      const where = current.position === null ? "" : `, sequence ${current.position} of the cache (both 0-based)`;
      info.textContent = `Item ${item}${where}: ${current.items.length} items, ` +
        "each the one most different from the centroid of those before it. Choose one to start from it.";
      const table = $("sequence-table");
      table.hidden = false;
      table.classList.toggle("numbers-only", !(data.table && (data.table.titles || data.table.ids)));
      showMore();
    }
    showReads();
    document.body.dataset.shown = String(item);
    document.body.dataset.state = "ready";
  }

  function cell(className, content) {
    const td = document.createElement("td");
    td.className = className;
    td.append(content);
    return td;
  }

  function showMore() {
    const seq = current.items;
    const end = Math.min(seq.length, shown + ROWS_PER_PAGE);
    const rows = document.createDocumentFragment();
    for (let k = shown; k < end; k++) {
      const i = seq[k];
      const { title, author } = label(i);
      const tr = document.createElement("tr");
      tr.dataset.item = i;
      const a = document.createElement("a");
      a.href = startHref(i);
      a.textContent = title;
      a.title = "start from this item";
      tr.append(cell("pos", String(k + 1)), cell("title", a), cell("author", author), cell("item", String(i)));
      rows.append(tr);
    }
    $("sequence").append(rows);
    shown = end;
    const more = $("more");
    more.hidden = shown >= seq.length;
    more.textContent = `Show ${Math.min(ROWS_PER_PAGE, seq.length - shown)} more (${shown} of ${seq.length} shown)`;
  }

  // --- wiring -------------------------------------------------------------

  function listen() {
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
  }

  // The cache alone, or with the table for its titles, picked in either order.
  function listenToPickers(read) {
    const pickCache = $("cache-file");
    const pickTable = $("embeddings-file");
    const onPick = () => {
      if (!pickCache.files.length) return;
      const table = pickTable.files.length ? window.divgpuCache.fromFile(pickTable.files[0]) : null;
      load(window.divgpuCache.fromFile(pickCache.files[0]), table, read);
    };
    pickCache.addEventListener("change", onPick);
    pickTable.addEventListener("change", onPick);
  }

  // ?cache= and ?embeddings= name same-origin files; the shipped table is the
  // default only beside the default cache (a large job's cache needs none).
  function urlSources() {
    const cache = params.get("cache") || null;
    const table = params.get("embeddings") || null;
    const cacheHint = cache ? null : "make it with `make run`, or name another with ?cache=PATH";
    const tableHint = table ? null : "name the table with ?embeddings=PATH";
    const cacheUrl = cache ? sameOriginUrl("cache", cache) : DEFAULTS.cache;
    const tableUrl = table ? sameOriginUrl("embeddings", table) : cache ? null : DEFAULTS.embeddings;
    return [window.divgpuCache.fromUrl(cacheUrl, cacheHint), tableUrl && window.divgpuCache.fromUrl(tableUrl, tableHint)];
  }

  function start() {
    listen();
    const read = params.get("read") || "auto";
    listenToPickers(READ_MODES.includes(read) ? read : "auto");
    if (!READ_MODES.includes(read)) {
      fail(`?read= is ${JSON.stringify(read.slice(0, 20))}: one of ${READ_MODES.join(", ")}`);
      return;
    }
    if (location.protocol === "file:") {
      // fetch() cannot read file: URLs in Chromium; the pickers can.
      $("files").open = true;
      $("files-why").hidden = false;
      $("info").textContent = "Choose the cache below (and the table, for titles).";
      document.body.dataset.state = "pick";
      return;
    }
    let sources;
    try {
      sources = urlSources();
    } catch (e) {
      failWith(e);
      return;
    }
    load(sources[0], sources[1], read);
  }

  start();
})();
