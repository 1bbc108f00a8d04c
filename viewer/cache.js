// divgpu viewer: the cache readers (docs/formats.md, "Cache file" and
// "Binary cache"). A cache is opened from a source, a picked File (read with
// Blob.slice) or a same-origin URL (read with HTTP range requests), and
// answers one start at a time: a binary cache of any size costs a few small
// reads, and so does a large JSON cache as divgpu writes it. Plain script;
// viewer.js uses window.divgpuCache.
"use strict";

(function () {
  class InputError extends Error {}

  const MiB = 1024 * 1024;
  const HEAD_BYTES = 4096; // the first read: the binary header, or a JSON cache's header line
  const JSON_HEAD_LIMIT = 64 * 1024; // how far a JSON cache's header line may reach
  const READ_WHOLE_LIMIT = 32 * MiB; // a larger JSON cache is read by start, unless told otherwise
  const NO_SEQUENCE = 0xffffffff; // a start index entry: no sequence starts at this item
  const MAGIC = [0x44, 0x49, 0x56, 0x47, 0x50, 0x55, 0x42, 0x00]; // "DIVGPUB\0"
  const PREVIEW_STARTS = 10; // how many of the first starts the page names
  const LISTED_STARTS = 1024; // a binary cache's starts read on opening (4 KiB), to list and mark them

  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

  // --- sources: read(offset, length) gives those bytes (fewer at the end) ---

  class Source {
    constructor(name) {
      this.name = name;
      this.size = null; // known after the first read
      this.bytesRead = 0;
      this.reads = 0;
    }
    readAll() {
      return this.read(0, Infinity);
    }
    counted(bytes) {
      this.bytesRead += bytes.length;
      this.reads += 1;
      return bytes;
    }
    // Exactly `length` bytes, or the file is shorter than its header says.
    async readExactly(offset, length, what) {
      const bytes = await this.read(offset, length);
      if (bytes.length !== length) {
        throw new InputError(`${this.name}: truncated: ${what} (${length} bytes at byte ${offset}) is past the end of the file`);
      }
      return bytes;
    }
  }

  class FileSource extends Source {
    constructor(file) {
      super(file.name);
      this.file = file;
      this.size = file.size;
      this.byRange = true;
    }
    async read(offset, length) {
      if (length <= 0) return new Uint8Array(0);
      const end = Math.min(this.size, offset + length);
      return this.counted(new Uint8Array(await this.file.slice(offset, end).arrayBuffer()));
    }
  }

  // A server that ignores Range answers 200 with the whole file: it is kept
  // and read from memory (`byRange` false, and the page says so).
  class UrlSource extends Source {
    constructor(url, hint) {
      super(url);
      // Resolved against location.href, which holds no user name or password
      // (fetch refuses a URL resolved against a page address that has them).
      this.url = new URL(url, location.href).href;
      this.hint = hint;
      this.whole = null;
      this.byRange = true;
    }
    async read(offset, length) {
      if (length <= 0) return new Uint8Array(0);
      if (this.whole) return this.whole.subarray(offset, offset + length);
      let response;
      try {
        // no-store: ranges of a file replaced between two reads must not mix.
        response = await fetch(this.url, { mode: "same-origin", cache: "no-store",
          headers: { Range: `bytes=${offset}-${length === Infinity ? "" : offset + length - 1}` } });
      } catch (e) {
        throw new InputError(`${this.name}: cannot be read (${e.message})`);
      }
      if (response.status === 416) {
        throw new InputError(`${this.name}: ${offset === 0 ? "empty" : `truncated: no byte ${offset}`} (HTTP 416)`);
      }
      if (!response.ok) {
        const why = `${this.name}: HTTP ${response.status} ${response.statusText}`.trim();
        const error = new InputError(response.status === 404 && this.hint ? `${why} (${this.hint})` : why);
        error.status = response.status;
        throw error;
      }
      const bytes = this.counted(new Uint8Array(await response.arrayBuffer()));
      if (response.status === 200) {
        this.whole = bytes;
        this.size = bytes.length;
        this.byRange = false;
        return bytes.subarray(offset, offset + length);
      }
      this.checkRange(response.headers.get("Content-Range"), offset, bytes.length);
      return bytes;
    }
    checkRange(header, offset, got) {
      const m = /^bytes (\d+)-(\d+)\/(\d+)$/.exec(header || "");
      if (!m || Number(m[1]) !== offset || Number(m[2]) - offset + 1 !== got) {
        throw new InputError(`${this.name}: the server answered a range request for byte ${offset} with Content-Range ${JSON.stringify(header)} and ${got} bytes`);
      }
      const size = Number(m[3]);
      if (this.size !== null && size !== this.size) {
        throw new InputError(`${this.name}: changed while it was read (${this.size} bytes, then ${size})`);
      }
      this.size = size;
    }
  }

  // --- the header, both forms ------------------------------------------

  const isCount = (x) => Number.isSafeInteger(x) && x > 0;
  const isSha256 = (x) => typeof x === "string" && /^[0-9a-fA-F]{64}$/.test(x);

  // What src/contract/cache.rs checks of a header (docs/formats.md, "Cache file").
  function checkHeader(name, c) {
    if (c === null || typeof c !== "object" || Array.isArray(c)) {
      throw new InputError(`${name}: not a divgpu cache (a JSON object is expected)`);
    }
    if (c.format !== "divgpu-diversity-cache" || (c.version !== 1 && c.version !== 2)) {
      throw new InputError(`${name}: not a divgpu cache of version 1 or 2 (format ${JSON.stringify(c.format)}, version ${JSON.stringify(c.version)})`);
    }
    if (c.contract !== "fp32" && c.contract !== "fp16") {
      throw new InputError(`${name}: unknown contract ${JSON.stringify(c.contract)} ("fp32" or "fp16")`);
    }
    const counts = ["num_items", "dim", "length"].concat(c.version === 2 ? ["starts_count"] : []);
    for (const key of counts) {
      if (!isCount(c[key])) throw new InputError(`${name}: ${key} is ${JSON.stringify(c[key])}, not a positive integer`);
    }
    if (!isSha256(c.embeddings_sha256)) {
      throw new InputError(`${name}: embeddings_sha256 is not a sha256 (64 hex digits)`);
    }
    if (c.version === 2 && (!isSha256(c.starts_sha256) || typeof c.divgpu_version !== "string")) {
      throw new InputError(`${name}: a version 2 header needs starts_sha256 (64 hex digits) and divgpu_version (a string)`);
    }
  }

  function checkItems(name, where, items, n, length) {
    if (items.length !== length) {
      throw new InputError(`${name}: ${where} has ${items.length} items, the header says length ${length}`);
    }
    for (let k = 0; k < items.length; k++) {
      const x = items[k];
      if (!Number.isInteger(x) || x < 0 || x >= n) {
        throw new InputError(`${name}: ${where}, step ${k}: item ${JSON.stringify(x)} is out of range (the header says ${n} items)`);
      }
    }
  }

  const decoder = new TextDecoder("utf-8");
  const strictDecoder = new TextDecoder("utf-8", { fatal: true });

  function u32s(bytes) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const out = new Array(bytes.length / 4);
    for (let k = 0; k < out.length; k++) out[k] = view.getUint32(4 * k, true);
    return out;
  }

  // --- the JSON form, read whole -----------------------------------------

  function parseJson(name, bytes) {
    try {
      return JSON.parse(decoder.decode(bytes));
    } catch (e) {
      throw new InputError(`${name}: not valid JSON (${e.message})`);
    }
  }

  async function sha256Hex(bytes) {
    // crypto.subtle exists only in secure contexts (localhost, https, file:).
    if (!(window.crypto && crypto.subtle)) return null;
    const digest = await crypto.subtle.digest("SHA-256", bytes);
    return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  // Version 2's starts_sha256: the starts as little-endian u32s, in order.
  async function checkStartsSha256(name, c) {
    const starts = new DataView(new ArrayBuffer(4 * c.sequences.length));
    c.sequences.forEach((seq, i) => starts.setUint32(4 * i, seq[0], true));
    const sha = await sha256Hex(starts.buffer);
    if (sha !== null && sha !== c.starts_sha256.toLowerCase()) {
      throw new InputError(`${name}: its sequences' starts have sha256 ${sha.slice(0, 12)}…, but its header says starts_sha256 ${c.starts_sha256.slice(0, 12)}…`);
    }
  }

  async function openWholeJson(source, bytes) {
    const name = source.name;
    const c = parseJson(name, bytes);
    checkHeader(name, c);
    if (!Array.isArray(c.sequences) || c.sequences.length === 0) throw new InputError(`${name}: no sequences`);
    // Version 2 says how many sequences it holds: a cut file is refused.
    if (c.version === 2 && c.sequences.length !== c.starts_count) {
      throw new InputError(`${name}: has ${c.sequences.length} sequences, but its header says starts_count ${c.starts_count}`);
    }
    const byStart = new Map();
    c.sequences.forEach((seq, i) => {
      checkItems(name, `sequence ${i}`, Array.isArray(seq) ? seq : { length: "no" }, c.num_items, c.length);
      if (byStart.has(seq[0])) {
        throw new InputError(`${name}: sequences ${byStart.get(seq[0])} and ${i} both start at item ${seq[0]}`);
      }
      byStart.set(seq[0], i);
    });
    if (c.version === 2) await checkStartsSha256(name, c);
    const { sequences, ...header } = c;
    const all = sequences.map((seq) => seq[0]);
    return {
      source, header, form: "JSON", reading: "whole",
      startsCount: sequences.length,
      firstStarts: all.slice(0, PREVIEW_STARTS),
      listed: all, // every start, in the cache's order
      startSet: new Set(all), // or null where not every start was read
      moreStarts: null, // or a function that appends the next starts to `listed`
      async sequence(item) {
        const position = byStart.get(item);
        return position === undefined ? null : { position, items: sequences[position] };
      },
    };
  }

  // --- the JSON form, read by start --------------------------------------
  // As divgpu writes it: the header on the first line, `"sequences": [` on
  // the second, then one sequence a line, `[a,b,...],`, and `]}` last. The
  // lines hold the starts in the run's order; to find one without reading
  // the others they must ascend (every start, or a range, does).

  const OPENING = '\n"sequences": [\n';
  const NEWLINE = 10;

  function indexOfText(bytes, text) {
    const first = text.charCodeAt(0);
    for (let at = bytes.indexOf(first); at >= 0; at = bytes.indexOf(first, at + 1)) {
      let k = 1;
      while (k < text.length && bytes[at + k] === text.charCodeAt(k)) k++;
      if (k === text.length) return at;
    }
    return -1;
  }

  // The start of the line that begins bytes ("[123,..." gives 123), or null.
  function firstItemAt(bytes) {
    const m = /^\[(\d+)[,\]]/.exec(decoder.decode(bytes.subarray(0, 16)));
    return m ? Number(m[1]) : null;
  }

  class JsonLines {
    constructor(source, header, linesStart, linesEnd) {
      this.source = source;
      this.name = source.name;
      this.header = header;
      this.linesStart = linesStart; // the "[" of the first sequence
      this.linesEnd = linesEnd; // the "\n" before the closing "]}"
      const digits = String(header.num_items - 1).length;
      this.maxLine = 2 + header.length * (digits + 1); // "[" + items and commas + "]" + ","
      // A probe reads about two lines to find the next one (version 1 gives no
      // count of lines: the longest a line can be).
      const line = header.version === 2 ? (linesEnd - linesStart) / header.starts_count : this.maxLine;
      this.probe = Math.min(JSON_HEAD_LIMIT, Math.max(256, Math.ceil(2 * line) + 32));
    }

    layoutError(what) {
      return new InputError(`${this.name}: ${what}; read by start, a JSON cache must be laid out as divgpu writes it (one sequence a line)`);
    }

    // The first line that starts in [from, limit): { at, first }, or null.
    async lineAfter(from, limit) {
      let pos = from - 1; // a line starts after a newline
      let span = this.probe;
      while (pos < limit - 1) {
        span = Math.min(span, limit - 1 - pos);
        // 16 bytes more: the next line's first item, if it starts at the end.
        const bytes = await this.source.read(pos, span + 16);
        const nl = bytes.subarray(0, span).indexOf(NEWLINE);
        if (nl >= 0) {
          const at = pos + nl + 1;
          const first = firstItemAt(nl + 17 <= bytes.length ? bytes.subarray(nl + 1) : await this.source.read(at, 16));
          if (first === null) throw this.layoutError(`byte ${at} starts no sequence`);
          return { at, first };
        }
        if (bytes.length < span) return null; // the end of the file
        pos += span;
        span *= 2;
      }
      return null;
    }

    notAscending(a, b) {
      return new InputError(`${this.name}: its starts do not ascend (item ${a} comes before item ${b}), so a start cannot be found without reading the whole file: open it with ?read=whole, or use the binary form`);
    }

    // The line of the greatest start at most `item` (the starts ascend).
    async search(item) {
      let lo = { at: this.linesStart, first: this.firstStart };
      if (item === lo.first) return lo;
      if (item < lo.first) {
        // Absent if the starts ascend; a later line that starts lower says they do not.
        const late = await this.lineAfter(Math.max(this.linesStart + 1, this.linesEnd - this.maxLine), this.linesEnd + 1);
        if (late !== null && late.first < lo.first) throw this.notAscending(lo.first, late.first);
        return null;
      }
      let hi = this.linesEnd + 1;
      while (hi - lo.at > 1) {
        const mid = lo.at + Math.floor((hi - lo.at) / 2);
        const line = await this.lineAfter(mid, hi);
        if (line === null) {
          hi = mid;
        } else if (line.first <= lo.first) {
          throw this.notAscending(lo.first, line.first);
        } else if (line.first === item) {
          return line;
        } else if (line.first < item) {
          lo = line;
        } else {
          hi = line.at;
        }
      }
      return lo.first === item ? lo : null;
    }

    async readLine(line) {
      const bytes = await this.source.read(line.at, Math.min(this.maxLine, this.linesEnd - line.at));
      const text = decoder.decode(bytes);
      const end = text.indexOf("]");
      if (end < 0) throw this.layoutError(`the sequence at byte ${line.at} is longer than ${this.header.length} items`);
      try {
        return JSON.parse(text.slice(0, end + 1));
      } catch (e) {
        throw this.layoutError(`the sequence at byte ${line.at} is not valid JSON (${e.message})`);
      }
    }
  }

  function parseJsonHead(name, head) {
    const at = indexOfText(head, OPENING);
    if (at < 0 || head[at - 1] !== 44 /* "," */) return null;
    let header;
    try {
      header = JSON.parse(decoder.decode(head.subarray(0, at - 1)) + "}");
    } catch (e) {
      return null;
    }
    checkHeader(name, header);
    return { header, linesStart: at + OPENING.length };
  }

  async function openJsonByStart(source, head) {
    const name = source.name;
    let parsed = parseJsonHead(name, head);
    if (parsed === null && source.size > head.length) parsed = parseJsonHead(name, await source.read(0, JSON_HEAD_LIMIT));
    if (parsed === null) {
      throw new InputError(`${name}: its first ${JSON_HEAD_LIMIT} bytes are not a divgpu cache's header line and "sequences": [ (read by start, a JSON cache must be laid out as divgpu writes it)`);
    }
    const { header, linesStart } = parsed;
    const size = source.size;
    const tailStart = Math.max(linesStart, size - 8);
    const tail = decoder.decode(await source.read(tailStart, size - tailStart));
    const close = tail.search(/\]\n\]\}\n?$/);
    if (close < 0) throw new InputError(`${name}: truncated: it does not end with the closing ]} of a divgpu cache`);
    const lines = new JsonLines(source, header, linesStart, tailStart + close + 1);
    const firstBytes = await source.read(linesStart, lines.probe + 16);
    lines.firstStart = firstItemAt(firstBytes);
    if (lines.firstStart === null) throw lines.layoutError(`byte ${linesStart} starts no sequence`);
    const listed = [lines.firstStart];
    for (let nl = firstBytes.indexOf(NEWLINE); nl >= 0 && listed.length < LISTED_STARTS; nl = firstBytes.indexOf(NEWLINE, nl + 1)) {
      const first = firstItemAt(firstBytes.subarray(nl + 1));
      if (first === null) break;
      listed.push(first);
    }
    const startsCount = header.version === 2 ? header.starts_count : null;
    return {
      source, header, form: "JSON", reading: "by start", firstStarts: listed.slice(0, PREVIEW_STARTS),
      startsCount, listed,
      startSet: startsCount === listed.length ? new Set(listed) : null,
      moreStarts: null, // read by start, only the starts of the first lines read are listed
      async sequence(item) {
        const line = await lines.search(item);
        if (line === null) return null;
        const items = await lines.readLine(line);
        checkItems(name, `the sequence at byte ${line.at}`, Array.isArray(items) ? items : { length: "no" }, header.num_items, header.length);
        return { position: null, items };
      },
    };
  }

  // --- the binary form -----------------------------------------------------

  const BINARY_FIELDS = ["format", "version", "contract", "num_items", "dim", "length", "embeddings_sha256",
    "starts_count", "starts_sha256", "divgpu_version"];
  const BINARY_OFFSETS = ["form", "starts_offset", "index_offset", "rows_offset"];

  function parseBinaryHeader(name, bytes) {
    let text;
    try {
      text = strictDecoder.decode(bytes).replace(/ +$/, "");
    } catch (e) {
      throw new InputError(`${name}: the binary header is not UTF-8`);
    }
    if (/\s/.test(text)) throw new InputError(`${name}: the binary header is not one line of JSON without spaces`);
    let h;
    try {
      h = JSON.parse(text);
    } catch (e) {
      throw new InputError(`${name}: the binary header is not valid JSON (${e.message})`);
    }
    checkHeader(name, h);
    const keys = BINARY_FIELDS.concat("shard" in h ? ["shard"] : [], BINARY_OFFSETS);
    if (Object.keys(h).join() !== keys.join()) {
      throw new InputError(`${name}: the binary header's fields are ${Object.keys(h).join(", ")}; expected ${keys.join(", ")}`);
    }
    if (h.version !== 2 || h.form !== "binary") {
      throw new InputError(`${name}: the binary header says version ${JSON.stringify(h.version)}, form ${JSON.stringify(h.form)} (version 2, form "binary" expected)`);
    }
    return h;
  }

  // The offsets follow from H, S, N and L; the size from them.
  function checkLayout(name, h, headerLength, size) {
    const S = h.starts_count, N = h.num_items, L = h.length;
    if (N >= NO_SEQUENCE || S >= NO_SEQUENCE) throw new InputError(`${name}: num_items and starts_count must be below 2^32 - 1`);
    const expected = { starts_offset: 16 + headerLength };
    expected.index_offset = expected.starts_offset + 4 * S;
    expected.rows_offset = expected.index_offset + 4 * N;
    for (const key of Object.keys(expected)) {
      if (h[key] !== expected[key]) {
        throw new InputError(`${name}: ${key} is ${JSON.stringify(h[key])}, but the layout puts it at ${expected[key]}`);
      }
    }
    const total = expected.rows_offset + 4 * S * L;
    if (size !== total) {
      throw new InputError(`${name}: ${size < total ? "truncated: " : ""}the file has ${size} bytes, but its header says ${total} (rows_offset + 4 × ${S} × ${L})`);
    }
  }

  async function openBinary(source, head) {
    const name = source.name;
    if (head.length < 16) throw new InputError(`${name}: truncated: ${head.length} bytes, shorter than the binary cache's first 16`);
    const view = new DataView(head.buffer, head.byteOffset, 16);
    const layout = view.getUint32(8, true);
    const H = view.getUint32(12, true);
    if (layout !== 1) throw new InputError(`${name}: binary layout ${layout}, not 1`);
    if (H === 0 || H % 8 !== 0) throw new InputError(`${name}: header length ${H} is not a positive multiple of 8`);
    const headerBytes = 16 + H <= head.length ? head.subarray(16, 16 + H) : await source.readExactly(16, H, "the header");
    const h = parseBinaryHeader(name, headerBytes);
    checkLayout(name, h, H, source.size);
    const S = h.starts_count, N = h.num_items, L = h.length;
    const readStarts = async (from, count) => {
      const starts = u32s(await source.readExactly(h.starts_offset + 4 * from, 4 * count, "the starts"));
      const beyond = starts.findIndex((s) => s >= N);
      if (beyond >= 0) throw new InputError(`${name}: start ${from + beyond} is item ${starts[beyond]}, not below num_items ${N}`);
      return starts;
    };
    const listed = await readStarts(0, Math.min(S, LISTED_STARTS));
    const header = Object.fromEntries(Object.entries(h).filter(([key]) => !BINARY_OFFSETS.includes(key)));
    return {
      source, header, form: "binary", reading: "by start", startsCount: S,
      firstStarts: listed.slice(0, PREVIEW_STARTS), listed,
      startSet: S === listed.length ? new Set(listed) : null,
      // The next starts, LISTED_STARTS at a time (appended to `listed`).
      async moreStarts() {
        const more = await readStarts(this.listed.length, Math.min(S - this.listed.length, LISTED_STARTS));
        this.listed = this.listed.concat(more);
        return more;
      },
      // One index entry, then the start it names and its row.
      async sequence(item) {
        const [position] = u32s(await source.readExactly(h.index_offset + 4 * item, 4, `the start index entry of item ${item}`));
        if (position === NO_SEQUENCE) return null;
        if (position >= S) throw new InputError(`${name}: the start index entry of item ${item} is ${position}, not below starts_count ${S}`);
        const [start] = u32s(await source.readExactly(h.starts_offset + 4 * position, 4, `start ${position}`));
        const items = u32s(await source.readExactly(h.rows_offset + 4 * L * position, 4 * L, `sequence ${position}`));
        if (start !== item || items[0] !== item) {
          throw new InputError(`${name}: the start index entry of item ${item} points at sequence ${position}, which starts at item ${items[0]} (its start is listed as ${start})`);
        }
        checkItems(name, `sequence ${position}`, items, N, L);
        return { position, items };
      },
    };
  }

  // --- opening -----------------------------------------------------------------

  const isBinary = (head) => MAGIC.every((b, k) => head[k] === b);

  // `read`: "auto" (a JSON cache over READ_WHOLE_LIMIT by start), "whole" or "start".
  async function open(source, read) {
    const head = await source.read(0, HEAD_BYTES);
    if (isBinary(head)) return openBinary(source, head);
    if (decoder.decode(head.subarray(0, 6)) === "DIVGPU") {
      throw new InputError(`${source.name}: not a divgpu binary cache (its first 8 bytes are not DIVGPUB\\0)`);
    }
    const byStart = source.byRange && (read === "start" || (read === "auto" && source.size > READ_WHOLE_LIMIT));
    if (byStart) return openJsonByStart(source, head);
    const whole = head.length === source.size ? head : await source.readExactly(0, source.size, "the file");
    return openWholeJson(source, whole);
  }

  // Any URL's user name and password (scheme://user:password@host) removed
  // from a text the page shows or logs.
  const redact = (text) => String(text).replace(/([a-z][a-z0-9+.-]*:\/\/)[^\/?#\s]*@/gi, "$1");

  window.divgpuCache = {
    InputError, open, parseJson, sha256Hex, plural, redact, READ_WHOLE_LIMIT,
    fromFile: (file) => new FileSource(file),
    fromUrl: (url, hint) => new UrlSource(url, hint),
  };
})();
