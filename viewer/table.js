// divgpu viewer: the table a cache was computed from (docs/formats.md,
// "Embeddings table" and "Npy tables"): a JSON table, or a `.npy` file with
// its `X.titles.json` sidecar. Read whole; its values are kept as f32 for the
// distance column, and for comparing them with the table the cache names when
// the file's sha256 is not the cache's. Plain script; viewer.js uses
// window.divgpuTable.
"use strict";

(function () {
  const { InputError, parseJson, sha256Hex } = window.divgpuCache;
  const NPY_MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // "\x93NUMPY"
  const latin1 = new TextDecoder("latin1");
  const utf8 = new TextDecoder("utf-8");

  const isNpy = (bytes) => NPY_MAGIC.every((b, k) => bytes[k] === b);

  // --- the .npy form -------------------------------------------------------

  function npyDtypeProblem(descr) {
    if (descr === "<f8" || descr === "f8" || descr === "float64") return "dtype float64 ('<f8')";
    if (descr === ">f4") return "big-endian float32 ('>f4')";
    if (descr === ">f8") return "big-endian float64 ('>f8')";
    return `dtype ${JSON.stringify(descr).slice(0, 40)}`;
  }

  // NumPy format 1.0, 2.0 or 3.0; '<f4', C order, shape (N, D); N·D values.
  function parseNpy(name, bytes) {
    const refuse = (what) => new InputError(`${name}: ${what}`);
    if (bytes.length < 10) throw refuse(`truncated: ${bytes.length} bytes, shorter than a .npy header`);
    const major = bytes[6], minor = bytes[7];
    if (![1, 2, 3].includes(major) || minor !== 0) throw refuse(`.npy format ${major}.${minor}, not 1.0, 2.0 or 3.0`);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const at = major === 1 ? 10 : 12;
    if (bytes.length < at) throw refuse("truncated: the .npy header's length is past the end of the file");
    const hlen = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
    if (at + hlen > bytes.length) throw refuse(`truncated: the .npy header (${hlen} bytes at byte ${at}) is past the end of the file`);
    const text = (major === 3 ? utf8 : latin1).decode(bytes.subarray(at, at + hlen)).trim();
    const keys = [...text.matchAll(/'([^']*)'\s*:/g)].map((m) => m[1]);
    if (!/^\{.*\}$/s.test(text) || keys.sort().join() !== "descr,fortran_order,shape") {
      throw refuse(`the .npy header is not a dict of exactly 'descr', 'fortran_order' and 'shape' (${JSON.stringify(text.slice(0, 80))})`);
    }
    const descr = (/'descr'\s*:\s*'([^']*)'/.exec(text) || [, "(not a string)"])[1];
    if (descr !== "<f4") {
      throw refuse(`${npyDtypeProblem(descr)}; the viewer reads little-endian float32 ('<f4') only: np.save(path, a.astype('<f4'))`);
    }
    const order = (/'fortran_order'\s*:\s*(True|False)\s*[,}]/.exec(text) || [])[1];
    if (order !== "False") {
      throw refuse(`fortran_order is ${order || "not True or False"}; the viewer reads C order only: np.save(path, np.ascontiguousarray(a))`);
    }
    const shapeText = (/'shape'\s*:\s*\(([^)]*)\)/.exec(text) || [])[1];
    const shape = shapeText === undefined ? [] : shapeText.split(",").map((s) => s.trim()).filter((s) => s !== "");
    if (shape.length !== 2 || !shape.every((s) => /^\d+$/.test(s))) {
      throw refuse(`shape (${(shapeText || "?").slice(0, 40)}) is not 2-D (N, D)`);
    }
    const [n, dim] = shape.map(Number);
    if (n < 2 || dim < 1) throw refuse(`shape (${n}, ${dim}): at least 2 rows of at least 1 value are needed`);
    const start = at + hlen, need = n * dim * 4, have = bytes.length - start;
    if (have !== need) {
      throw refuse(`${have < need ? "truncated: " : ""}the data is ${have} bytes, but shape (${n}, ${dim}) of float32 is ${need}`);
    }
    const values = new Float32Array(n * dim);
    for (let k = 0; k < values.length; k++) values[k] = view.getFloat32(start + 4 * k, true);
    return { n, dim, values };
  }

  // --- the JSON form -------------------------------------------------------

  // docs/formats.md, "Embeddings table": a bare array of rows, or an object with
  // `embeddings` and optional `titles` (strings), `ids` (strings or numbers), `model`.
  function checkJsonTable(name, t) {
    const rows = Array.isArray(t) ? t : t && t.embeddings;
    if (!Array.isArray(rows)) {
      throw new InputError(`${name}: not an embeddings table (an array of rows, or an object with "embeddings")`);
    }
    const n = rows.length;
    const dim = Array.isArray(rows[0]) ? rows[0].length : 0;
    const values = new Float32Array(n * dim);
    rows.forEach((row, r) => {
      if (!Array.isArray(row) || row.length !== dim) {
        throw new InputError(`${name}: row ${r} is not ${dim} numbers, as row 0 is`);
      }
      // Math.fround: the nearest f32 of the nearest f64, as divgpu reads it.
      row.forEach((x, c) => {
        if (typeof x !== "number") throw new InputError(`${name}: row ${r}, column ${c}: ${JSON.stringify(x).slice(0, 20)} is not a number`);
        values[r * dim + c] = x;
      });
    });
    return { n, dim, values, ...labels(name, Array.isArray(t) ? {} : t, n, "embeddings") };
  }

  // `titles`, `ids` and `model` of a JSON table or a sidecar.
  function labels(name, t, n, what) {
    const list = (key, fits, kind) => {
      const v = t[key];
      if (v === undefined) return null;
      if (!Array.isArray(v) || v.length !== n || !v.every(fits)) {
        throw new InputError(`${name}: "${key}" is not ${n} ${kind} (one per row of ${what})`);
      }
      return v.map(String);
    };
    return {
      titles: list("titles", (s) => typeof s === "string", "strings"),
      ids: list("ids", (s) => typeof s === "string" || Number.isFinite(s), "strings or numbers"),
      model: typeof t.model === "string" ? t.model : null,
    };
  }

  // --- reading -------------------------------------------------------------

  // `X.npy` → `X.titles.json` (a URL's path, or a picked file's name).
  const sidecarName = (name) => name.replace(/\.npy((?:[?#].*)?)$/i, ".titles.json$1");

  // The table from `source`; for a .npy, its sidecar from `sidecar()`, which
  // gives a source or null (none beside it). { name, n, dim, values, titles,
  // ids, model, sha256 (null outside a secure context), sidecar (its name or null) }.
  async function read(source, sidecar) {
    const raw = await source.readAll();
    const sha256 = await sha256Hex(raw);
    if (!isNpy(raw)) {
      if (/\.npy$/i.test(source.name.split(/[?#]/)[0])) {
        throw new InputError(`${source.name}: not a .npy file (its first bytes are not \\x93NUMPY)`);
      }
      return { name: source.name, sha256, sidecar: null, ...checkJsonTable(source.name, parseJson(source.name, raw)) };
    }
    const table = { name: source.name, sha256, sidecar: null, titles: null, ids: null, model: null, ...parseNpy(source.name, raw) };
    const side = sidecar ? await sidecar() : null;
    if (side) {
      const s = parseJson(side.name, await side.readAll());
      if (s === null || typeof s !== "object" || Array.isArray(s)) {
        throw new InputError(`${side.name}: not a titles sidecar (a JSON object with "titles", "ids", "model")`);
      }
      Object.assign(table, labels(side.name, s, table.n, table.name));
      const said = s.embeddings_sha256;
      if (said !== undefined && (typeof said !== "string" || (sha256 !== null && said.toLowerCase() !== sha256))) {
        throw new InputError(`${side.name}: its embeddings_sha256 ${String(said).slice(0, 12)}… is not the sha256 of ${table.name} (${(sha256 || "").slice(0, 12)}…): the sidecar of another table`);
      }
      table.sidecar = side.name;
    }
    return table;
  }

  // The bytes np.save (and `divgpu synth`) writes for an N × D '<f4' array:
  // format 1.0, the dict as NumPy spells it, padded with spaces to 64 bytes.
  function canonicalNpy(table) {
    const dict = `{'descr': '<f4', 'fortran_order': False, 'shape': (${table.n}, ${table.dim}), }`;
    const pad = (64 - ((10 + dict.length + 1) % 64)) % 64;
    const header = dict + " ".repeat(pad) + "\n";
    const out = new Uint8Array(10 + header.length + 4 * table.values.length);
    out.set([...NPY_MAGIC, 1, 0, header.length & 0xff, header.length >> 8]);
    for (let k = 0; k < header.length; k++) out[10 + k] = header.charCodeAt(k);
    const view = new DataView(out.buffer);
    const at = 10 + header.length;
    table.values.forEach((x, k) => view.setFloat32(at + 4 * k, x, true));
    return out;
  }

  // How `table` matches a cache's embeddings_sha256: "file" (its bytes),
  // "values" (its N × D f32 values saved as .npy: the same values as the
  // .npy the cache was computed from), "unchecked" (no sha256 here), or null.
  async function matches(table, sha) {
    if (table.sha256 === null) return "unchecked";
    if (table.sha256 === sha) return "file";
    const ofValues = await sha256Hex(canonicalNpy(table));
    table.valuesSha256 = ofValues;
    return ofValues === sha ? "values" : null;
  }

  // The cosine distance of each item of `items` from the centroid of the items
  // before it, in f64 from the table's f32 values (the first has none: null).
  // A display value: the contract's score is f32 (docs/contract.md), and
  // the two may differ in the last digits.
  function distances(table, items) {
    const { dim, values } = table;
    const sum = new Float64Array(dim);
    const out = [];
    items.forEach((item, k) => {
      const at = item * dim;
      if (k === 0) {
        out.push(null);
      } else {
        let dot = 0, cc = 0, vv = 0;
        for (let d = 0; d < dim; d++) {
          const v = values[at + d];
          dot += sum[d] * v;
          cc += sum[d] * sum[d];
          vv += v * v;
        }
        out.push(cc > 0 && vv > 0 ? 1 - dot / Math.sqrt(cc * vv) : NaN);
      }
      for (let d = 0; d < dim; d++) sum[d] += values[at + d];
    });
    return out;
  }

  window.divgpuTable = { read, parseNpy, sidecarName, matches, distances, canonicalNpy };
})();
