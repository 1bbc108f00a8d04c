// divgpu viewer: shows the sequence from a chosen start of a diversity
// cache (JSON or binary, read by cache.js one start at a time where it can),
// with the titles of the table it was computed from when one is given (a
// JSON table, or a .npy and its X.titles.json sidecar: table.js) and each
// item's cosine distance from the centroid of those before it.
// Plain script, no build step, nothing fetched but same-origin files.
"use strict";

(function () {
  const { InputError, plural, redact } = window.divgpuCache;
  // Relative to this page, so they name the repository's files when the
  // repository root is served (python3 -m http.server).
  const DEFAULTS = {
    cache: "../diversity_cache.json",
    embeddings: "../assets/embeddings/all-MiniLM-L6-v2/embeddings.json",
  };
  const READ_MODES = ["auto", "whole", "start"];
  const ROWS_PER_PAGE = 200; // a full ordering can be N items long
  const MAX_MATCHES = 20;
  const STARTS_PER_PAGE = 100; // starts listed at a time

  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const bytes = (n) => `${n.toLocaleString("en-US")} bytes`;

  let data = null; // { cache, table (or null), match, n, lower (or null) }
  let current = null; // { item, items, position, distances (or null) } on show
  let startsShown = 0; // starts in the list of the cache's starts
  let shown = 0; // rows of the current sequence in the table
  let chosen = 0; // counts choices: a slow read must not overwrite a later one
  let loads = 0; // the same for loads (a cache picked, then its table)

  // One line, naming the file; also on the console, for tools and tests. No
  // URL's user name or password is ever shown.
  function fail(text) {
    const message = redact(text).replace(/\s*\n\s*/g, " ");
    const box = $("error");
    box.textContent = message;
    box.hidden = false;
    $("info").textContent = "Nothing loaded.";
    $("files").open = true; // another way in
    // Nothing of an earlier load stays on show.
    data = null;
    $("search").disabled = true;
    for (const id of ["chosen", "chosen-info", "sequence-table", "more", "reads", "starts"]) $(id).hidden = true;
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
      // Against this page's address without its own user name and password,
      // which a relative URL would otherwise inherit.
      const base = new URL(location.href);
      base.username = "";
      base.password = "";
      url = new URL(value, base);
    } catch (e) {
      throw new InputError(`?${param}= is not a URL: refused`);
    }
    const web = url.protocol === "http:" || url.protocol === "https:";
    if (web && (url.username || url.password)) {
      // Never sent, never shown.
      url.username = "";
      url.password = "";
      throw new InputError(`?${param}= names ${url.href.slice(0, 200)} with a user name or password: refused (the viewer neither sends nor shows them)`);
    }
    if (web && url.origin === location.origin) return value;
    const where = web ? url.origin.slice(0, 80) : `a ${url.protocol.slice(0, 20)} URL`;
    throw new InputError(`?${param}= names ${where}, not this page's origin ${location.origin}: refused (the viewer loads only files served with it)`);
  }

  // A JSON table, or a .npy with the sidecar beside it (docs/formats.md#npy-tables).
  function readTable(source, sidecar) {
    return window.divgpuTable.read(source, sidecar);
  }

  // The table must be the cache's: its N and D, and its sha256 that of the
  // file the cache names, or (another file, such as the JSON form of a .npy)
  // that of its values saved as .npy: the same N × D f32 values.
  async function checkPair(cache, table) {
    const name = cache.source.name, h = cache.header;
    if (h.num_items !== table.n) {
      throw new InputError(`${name} is for ${h.num_items} items (num_items) but ${table.name} has ${table.n}`);
    }
    if (h.dim !== table.dim) {
      throw new InputError(`${name} is for ${h.dim} dimensions (dim) but ${table.name} has ${table.dim} values a row`);
    }
    const match = await window.divgpuTable.matches(table, h.embeddings_sha256.toLowerCase());
    if (match === null) {
      throw new InputError(`${name} was computed from another table: its embeddings_sha256 is ${h.embeddings_sha256.slice(0, 12)}…, ` +
        `${table.name} has sha256 ${table.sha256.slice(0, 12)}…, and its values saved as .npy ${table.valuesSha256.slice(0, 12)}… (other values)`);
    }
    return match;
  }

  // The title as the table gives it, whatever its shape; else the id, or the item.
  function label(i) {
    const table = data.table;
    if (!table || !(table.titles || table.ids)) return `item ${i}`;
    return table.titles ? table.titles[i] : table.ids[i];
  }

  // true or false where the cache's starts are all known, else null.
  const holds = (item) => (data.cache.startSet ? data.cache.startSet.has(item) : null);

  function describe(cache, table, match) {
    const h = cache.header;
    const count = cache.startsCount === null ? "sequences" : plural(cache.startsCount, "sequence");
    const more = cache.startsCount === null || cache.startsCount > cache.firstStarts.length ? ", …" : "";
    let text = `${cache.source.name}: ${cache.form} cache, ${count} of ${h.length} items over ${h.num_items} items, ` +
      `contract ${h.contract}; starts ${cache.firstStarts.join(", ")}${more}; `;
    if (!table) {
      return text + "no table, so items are shown by number (name one with ?embeddings=PATH, or pick it, for titles).";
    }
    const labels = table.titles ? "titles" : table.ids ? "ids" : null;
    if (labels) {
      text += `${labels} from ${table.sidecar || table.name}` + (table.model ? ` (${table.model})` : "") +
        (table.sidecar ? `, values from ${table.name}` : "");
    } else {
      const why = table.values && /\.npy$/i.test(table.name.split(/[?#]/)[0]) && !table.sidecar
        ? ` (no ${window.divgpuTable.sidecarName(table.name)} beside it)` : "";
      text += `values from ${table.name}, no titles or ids${why}, so items are shown by number`;
    }
    if (match === "unchecked") return text + "; the table's sha256 was not checked (this page is not a secure context).";
    if (match === "values") {
      return text + `: not the file the cache was computed from, but the same ${table.n} × ${table.dim} f32 values ` +
        "(saved as .npy, they have the cache's embeddings_sha256).";
    }
    return text + ", the table the cache was computed from.";
  }

  // What was read of the cache, and how: a large cache must cost little.
  function showReads() {
    const { source, reading } = data.cache;
    const how = !source.byRange ? "the server ignores range requests, so the file was read whole"
      : reading === "whole" ? "read whole" : source.file ? "read by start with Blob.slice" : "read by start with HTTP range requests";
    const box = $("reads");
    box.textContent = redact(`${source.name}: ${bytes(source.bytesRead)} of ${bytes(source.size)} read in ${plural(source.reads, "read")} (${how}).`);
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
        tableSource ? readTable(tableSource.source, tableSource.sidecar) : null]);
      if (ticket !== loads) return;
      const match = table ? await checkPair(cache, table) : null;
      if (ticket !== loads) return;
      data = { cache, table, match, n: cache.header.num_items, lower: table && lowerLabels(table) };
      $("info").textContent = redact(describe(cache, table, match));
      showStarts();
      showReads();
      const search = $("search");
      search.disabled = false;
      search.placeholder = table && (table.titles || table.ids) ? "type part of a title, or an item number"
        : `type an item number, 0 to ${data.n - 1}`;
      // The start asked for, else the cache's first: never an empty page.
      const start = params.get("start");
      await choose(start !== null && /^\d+$/.test(start) ? Number(start) : cache.listed[0]);
      search.focus();
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
      li.append(label(i));
      if (holds(i) === false) {
        // Marked: choosing it shows that no sequence starts there.
        const span = document.createElement("span");
        span.className = "no-start";
        span.textContent = " (no sequence starts here)";
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

  // This page's address with another start (the other parameters kept), in
  // full: a relative link would resolve against an address typed with a user
  // name and password, and show them.
  function startHref(item) {
    const url = new URL(location.href);
    url.username = "";
    url.password = "";
    url.searchParams.set("start", item);
    return url.href;
  }

  function noSequence(item) {
    const { cache, n } = data;
    if (!(item < n)) return `There is no item ${item}: the cache is of ${n} items, 0 to ${n - 1}.`;
    const held = cache.startsCount === null ? "some" : `${cache.startsCount} of ${n}`;
    const how = cache.form === "JSON" && cache.reading === "by start" ? " (read by start, its starts are taken to ascend)" : "";
    return `No sequence in this cache starts at item ${item}: it holds ${held} starts${how}; they are listed under "Starts in this cache".`;
  }

  // --- the cache's starts -------------------------------------------------

  function showStarts() {
    const { cache, n } = data;
    const box = $("starts");
    $("starts-list").textContent = "";
    startsShown = 0;
    const count = cache.startsCount === null ? "some" : `${cache.startsCount.toLocaleString("en-US")} of ${n.toLocaleString("en-US")}`;
    $("starts-count").textContent = `(${count} items)`;
    box.open = cache.startsCount !== n; // every item a start: nothing to tell
    box.hidden = false;
    $("starts-info").textContent = cache.startSet
      ? "Only these items start a sequence; in a sequence, the items that start one are links."
      : cache.moreStarts ? `The starts are read ${cache.listed.length} at a time, as they are listed; every item in a sequence is a link.`
        : `Read by start, only the first ${plural(cache.listed.length, "start")} read ${cache.listed.length === 1 ? "is" : "are"} listed ` +
          "(type an item number to open another); every item in a sequence is a link.";
    moreStarts();
  }

  async function moreStarts() {
    const { cache } = data;
    const button = $("starts-more");
    if (cache.moreStarts && startsShown + STARTS_PER_PAGE > cache.listed.length && cache.listed.length < cache.startsCount) {
      try {
        await cache.moreStarts();
      } catch (e) {
        failWith(e);
        return;
      }
    }
    const end = Math.min(cache.listed.length, startsShown + STARTS_PER_PAGE);
    const items = document.createDocumentFragment();
    for (let k = startsShown; k < end; k++) {
      const i = cache.listed[k];
      const li = document.createElement("li");
      li.dataset.item = i;
      const a = document.createElement("a");
      a.href = startHref(i);
      a.textContent = data.table && (data.table.titles || data.table.ids) ? `${i}: ${label(i)}` : String(i);
      li.append(a);
      items.append(li);
    }
    $("starts-list").append(items);
    startsShown = end;
    const total = cache.startsCount === null ? cache.listed.length : cache.startsCount;
    const left = (cache.moreStarts ? total : cache.listed.length) - startsShown;
    button.hidden = left <= 0;
    button.textContent = `Show ${Math.min(STARTS_PER_PAGE, left)} more (${startsShown} of ${total} listed)`;
  }

  async function choose(item) {
    matches = [];
    renderMatches();
    if (!data || !Number.isInteger(item)) return;
    const ticket = ++chosen;
    document.body.dataset.state = "reading";
    const title = item < data.n ? label(item) : `item ${item}`;
    $("search").value = title;
    $("chosen").textContent = `From “${title}”`;
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
    current = found && { item, ...found, distances: data.table ? window.divgpuTable.distances(data.table, found.items) : null };
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
        "each the one most different from the centroid of those before it" +
        (current.distances ? " (its cosine distance from that centroid, computed here in f64 from the table: " +
          "for reading, not the contract's f32 score)" : "") +
        (data.cache.startSet ? ". The items that start a sequence of this cache are links." : ". Choose one to start from it.");
      const table = $("sequence-table");
      table.hidden = false;
      table.classList.toggle("numbers-only", !(data.table && (data.table.titles || data.table.ids)));
      table.classList.toggle("no-distances", !current.distances);
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
      const tr = document.createElement("tr");
      tr.dataset.item = i;
      let title;
      if (holds(i) === false) {
        title = document.createElement("span");
        title.title = "no sequence of this cache starts here";
        tr.className = "no-start";
      } else {
        title = document.createElement("a");
        title.href = startHref(i);
        title.title = "start from this item";
      }
      title.textContent = label(i);
      const d = current.distances ? current.distances[k] : null;
      const distance = cell("distance", d === null ? "—" : d.toFixed(4));
      if (d !== null) distance.dataset.distance = String(d);
      tr.append(cell("pos", String(k + 1)), cell("title", title), distance, cell("item", String(i)));
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
    for (const [list, row] of [["sequence", "tr"], ["starts-list", "li"]]) {
      $(list).addEventListener("click", (event) => {
        const a = event.target.closest("a");
        if (a && !event.ctrlKey && !event.metaKey) {
          choose(Number(a.closest(row).dataset.item));
          window.scrollTo(0, 0);
          event.preventDefault();
        }
      });
    }
    $("more").addEventListener("click", showMore);
    $("starts-more").addEventListener("click", moreStarts);
  }

  // The cache alone, or with the table for its titles, picked in either order.
  function listenToPickers(read) {
    const pickCache = $("cache-file");
    const pickTable = $("embeddings-file");
    const onPick = () => {
      if (!pickCache.files.length) return;
      // The table, and with a .npy its X.titles.json if picked with it.
      const files = [...pickTable.files];
      const sidecar = (npy) => files.find((f) => f.name === window.divgpuTable.sidecarName(npy.name)) ||
        files.find((f) => /\.titles\.json$/i.test(f.name));
      const main = files.find((f) => !/\.titles\.json$/i.test(f.name));
      const table = main ? {
        source: window.divgpuCache.fromFile(main),
        sidecar: async () => (sidecar(main) ? window.divgpuCache.fromFile(sidecar(main)) : null),
      } : null;
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
    const tableHint = table ? null : "name the table (JSON, or .npy beside its X.titles.json) with ?embeddings=PATH";
    const cacheUrl = cache ? sameOriginUrl("cache", cache) : DEFAULTS.cache;
    const tableUrl = table ? sameOriginUrl("embeddings", table) : cache ? null : DEFAULTS.embeddings;
    return [window.divgpuCache.fromUrl(cacheUrl, cacheHint), tableUrl && {
      source: window.divgpuCache.fromUrl(tableUrl, tableHint), sidecar: () => urlSidecar(tableUrl) }];
  }

  // X.titles.json beside X.npy, if the server has one (a 404: none).
  async function urlSidecar(tableUrl) {
    const source = window.divgpuCache.fromUrl(window.divgpuTable.sidecarName(tableUrl), null);
    try {
      const bytes = await source.readAll();
      return { name: source.name, readAll: async () => bytes };
    } catch (e) {
      if (e.status === 404) return null;
      throw e;
    }
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
