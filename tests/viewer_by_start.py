"""The viewer by start (tests/viewer_test.py runs these): one start's
sequence read from a binary cache of a 1,048,576-item table, served with
HTTP range requests and picked as a file (Blob.slice), without reading the
rest; a large JSON cache searched by start; numeric ids; and the refusal of
every URL of another origin. Each check has a twin fed a wrong variant."""
import hashlib
import json
import os
import random
import urllib.parse

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

import make_binary_cache as mbc
from viewer_lib import (body, check, error_text, items_problem, one_line_error, open_page, state_is, twin,
                        wait_shown)

BIG_N = 1 << 20
BIG_LENGTH = 24
BIG_STARTS = [0, 1, 4095, 77777, 524288, 999999, BIG_N - 1]
NO_SEQUENCE = 0xFFFFFFFF
# At most this much of a binary cache may be read to show one start: the first
# 4 KiB (the header), ten starts, an index entry, a start and a row, with room
# to spare; and at most 1% of the file.
BINARY_BUDGET = (16 * 1024, 0.01)
# A JSON cache read by start: its head and tail, ~22 probes of its lines, a row.
JSON_BUDGET = (128 * 1024, 0.05)


def big_binary_cache(tmp):
    """THE cache under test: $VIEWER_BINARY_CACHE if set (a `divgpu run
    --format binary` output, once that exists), else one that
    tests/make_binary_cache.py writes now (about a second)."""
    path = os.environ.get("VIEWER_BINARY_CACHE")
    if path:
        return path, f"$VIEWER_BINARY_CACHE ({path})"
    paths = mbc.make(os.path.join(tmp, "made"), BIG_N, 3, BIG_STARTS, BIG_LENGTH)
    return paths["cache.bin"], f"made by tests/make_binary_cache.py: {BIG_N} items, {len(BIG_STARTS)} starts, length {BIG_LENGTH}"


class BigCache:
    """The cache read back with docs/formats.md's NumPy reader, and its broken copies."""

    def __init__(self, path, folder):
        self.path = path
        self.header, starts, index, rows = mbc.read_binary(path)
        self.n, self.length = self.header["num_items"], self.header["length"]
        self.starts = starts.tolist()
        self.by_start = {s: rows[int(index[s])].tolist() for s in self.starts}
        self.size = os.path.getsize(path)
        self.start = self.starts[len(self.starts) // 2]
        self.other = self.starts[-1]
        self.absent = next(i for i in range(self.n - 2, 0, -1) if int(index[i]) == NO_SEQUENCE)
        self.variants(folder, index)

    def variants(self, folder, index):
        """site/big/: the cache, its JSON form, a changed row, a truncated file, a wrong index entry."""
        os.makedirs(folder)
        os.symlink(os.path.abspath(self.path), os.path.join(folder, "cache.bin"))
        fields = {k: v for k, v in self.header.items() if k not in ("form", "starts_offset", "index_offset", "rows_offset")}
        rows = mbc.np.array([self.by_start[s] for s in self.starts], dtype="<u4")
        mbc.write_json(os.path.join(folder, "cache.json"), fields, rows)
        raw = bytearray(open(self.path, "rb").read())
        position = int(index[self.start])

        def patch(name, offset, value):
            copy = bytearray(raw)
            copy[offset:offset + 4] = int(value).to_bytes(4, "little")
            with open(os.path.join(folder, name), "wb") as f:
                f.write(copy)
        row = self.header["rows_offset"] + 4 * self.length * position
        patch("changed.bin", row + 4 * 3, (self.by_start[self.start][3] + 1) % self.n)
        patch("wrong_index.bin", self.header["index_offset"] + 4 * self.start, int(index[self.other]))
        with open(os.path.join(folder, "truncated.bin"), "wb") as f:
            f.write(raw[:-4])


def reads_problem(sent, size, page_says, requests=None, budget=BINARY_BUDGET):
    """A start shown with little read: within `budget` (bytes, share of the
    file), by range requests only, and as much as the page itself reports."""
    if requests is not None and not all(r.range and r.status == 206 for r in requests):
        return f"not all by range: {[(r.range, r.status, r.sent) for r in requests][:6]}"
    if sent > budget[0] or sent > size * budget[1]:
        return f"{sent} bytes read of {size} (at most {budget[0]} and {budget[1]:.0%} expected)"
    if page_says != str(sent):
        return f"{sent} bytes read, but the page says {page_says}"
    return None


def served(server, driver, url, path):
    """Opens `url`; returns the state and the bytes `server` sent of `path` meanwhile."""
    since = len(server.log)
    state = open_page(driver, server.base + url)
    requests = server.requests_for(path, since)
    return state, requests, sum(r.sent for r in requests)


def check_served_binary(driver, server, plain, big):
    """The binary cache from a server with ranges: the row, the bytes, the broken copies."""
    url = f"/viewer/?cache=../big/cache.bin&start={big.start}"
    state, requests, sent = served(server, driver, url, "/big/cache.bin")
    expected = big.by_start[big.start]
    check(f"a served binary cache of {big.n} items: the sequence from item {big.start}, all {len(expected)} items",
          items_problem(driver, expected))
    info = driver.find_element(By.ID, "info").text
    check("it says binary, and shows items by number without a table",
          None if "binary cache" in info and "no table" in info else info)
    check(f"it read {sent} of {big.size} bytes, by range requests",
          reads_problem(sent, big.size, body(driver).get_attribute("data-bytes-read"), requests))
    open_page(driver, server.base + f"/viewer/?cache=../big/changed.bin&start={big.start}")
    twin("the sequence shown is the cache's", items_problem(driver, expected))
    state, requests, sent = served(plain, driver, url, "/big/cache.bin")
    twin("a start read by range", reads_problem(sent, big.size, body(driver).get_attribute("data-bytes-read"), requests))
    reads = driver.find_element(By.ID, "reads").text
    check("a server that ignores ranges: the right sequence, and the page says it read the file whole",
          items_problem(driver, expected) or (None if "ignores range requests" in reads else reads))

    state, requests, sent = served(server, driver, f"/viewer/?cache=../big/cache.bin&start={big.absent}", "/big/cache.bin")
    note = driver.find_element(By.ID, "chosen-info").text
    check(f"item {big.absent}, which starts no sequence: the page says so, with little read",
          (None if f"No sequence in this cache starts at item {big.absent}" in note
           and not driver.find_elements(By.CSS_SELECTOR, "#sequence tr") else note)
          or reads_problem(sent, big.size, body(driver).get_attribute("data-bytes-read"), requests))
    for name, words in [("truncated.bin", ["../big/truncated.bin", "truncated", str(big.size - 4)]),
                        ("wrong_index.bin", ["../big/wrong_index.bin", f"item {big.start} points at sequence"])]:
        state = open_page(driver, server.base + f"/viewer/?cache=../big/{name}&start={big.start}")
        twin(f"{name}: the sequence shown is the cache's", items_problem(driver, expected))
        check(f"{name}: refused in one line naming it", one_line_error(driver, state, words))


def count_blob_reads(driver):
    """From now on, window.blobBytes counts what the page reads of any Blob."""
    driver.execute_script("""
        window.blobBytes = 0;
        for (const [proto, names] of [[Blob.prototype, ['arrayBuffer', 'text', 'stream']],
                                      [FileReader.prototype, ['readAsArrayBuffer', 'readAsText', 'readAsBinaryString', 'readAsDataURL']]]) {
          for (const name of names) {
            const original = proto[name];
            proto[name] = function (...args) {
              window.blobBytes += (this instanceof Blob ? this : args[0]).size;
              return original.apply(this, args);
            };
          }
        }""")


def pick(driver, path):
    driver.find_element(By.ID, "cache-file").send_keys(os.path.abspath(path))
    return state_is(driver, "ready", "error")


def choose_number(driver, item):
    """Types the item's number in the search box and takes the first match with Enter."""
    box = driver.find_element(By.ID, "search")
    box.clear()
    box.send_keys(str(item))
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, f'#matches li[data-item="{item}"]'))
    box.send_keys(Keys.ENTER)
    wait_shown(driver, item)


def check_picked_binary(driver, root, big, site):
    """The binary cache picked from a file: URL page, read with Blob.slice."""
    open_page(driver, "file://" + os.path.join(root, "viewer", "index.html"))
    count_blob_reads(driver)
    state = pick(driver, big.path)
    if state == "ready":
        choose_number(driver, big.start)
    check(f"a picked binary cache, item {big.start} typed: its sequence", items_problem(driver, big.by_start[big.start]))
    blob = driver.execute_script("return window.blobBytes")
    check(f"it read {blob} of the file's {big.size} bytes through Blob.slice",
          reads_problem(blob, big.size, body(driver).get_attribute("data-bytes-read")))
    # The JSON form is read whole: the same check must catch it.
    open_page(driver, "file://" + os.path.join(root, "viewer", "index.html"))
    count_blob_reads(driver)
    state = pick(driver, os.path.join(site, "big", "cache.json"))
    if state == "ready":
        choose_number(driver, big.start)
    check("the picked JSON form shows the same sequence", items_problem(driver, big.by_start[big.start]))
    twin("a start read by Blob.slice", reads_problem(driver.execute_script("return window.blobBytes"),
                                                     os.path.getsize(os.path.join(site, "big", "cache.json")),
                                                     body(driver).get_attribute("data-bytes-read")))


def make_json_variants(site):
    """site/many/: a JSON cache of every 50th item of a 1M-item table (about 2.7 MB),
    and one whose starts descend; returns the first's sequences by start."""
    folder = os.path.join(site, "many")
    many = mbc.make(os.path.join(folder, "every50"), BIG_N, 2, list(range(0, BIG_N, 50)), 16)
    mbc.make(os.path.join(folder, "descending"), BIG_N, 2, [900, 500, 100], 16)
    for made in ("every50", "descending"):
        os.remove(os.path.join(folder, made, "table.npy"))
    with open(many["cache.json"], encoding="ascii") as f:
        return {seq[0]: seq for seq in json.load(f)["sequences"]}, os.path.getsize(many["cache.json"])


def check_picked_json_by_start(driver, root, path, by_start, item):
    """A picked JSON cache, ?read=start: searched through Blob.slice (for one over 32 MiB, the default)."""
    open_page(driver, "file://" + os.path.join(root, "viewer", "index.html") + "?read=start")
    count_blob_reads(driver)
    if pick(driver, path) == "ready":
        choose_number(driver, item)
    check(f"a picked JSON cache read by start: the sequence from item {item}", items_problem(driver, by_start[item]))
    blob = driver.execute_script("return window.blobBytes")
    check(f"it read {blob} of the file's {os.path.getsize(path)} bytes through Blob.slice",
          reads_problem(blob, os.path.getsize(path), body(driver).get_attribute("data-bytes-read"), budget=JSON_BUDGET))


def check_json_by_start(driver, root, server, site):
    """A JSON cache read by start (?read=start, as for one over 32 MiB): a binary search over its lines."""
    by_start, size = make_json_variants(site)
    path = "/many/every50/cache.json"
    item = 50 * 12345
    state, requests, sent = served(server, driver, f"/viewer/?cache=..{path}&read=start&start={item}", path)
    check(f"a JSON cache of {len(by_start)} starts read by start: the sequence from item {item}",
          items_problem(driver, by_start[item]))
    check(f"it read {sent} of {size} bytes, by range requests",
          reads_problem(sent, size, body(driver).get_attribute("data-bytes-read"), requests, JSON_BUDGET))
    twin("the sequence shown is the cache's", items_problem(driver, by_start[item + 50]))
    state, requests, sent = served(server, driver, f"/viewer/?cache=..{path}&read=whole&start={item}", path)
    check("read whole (?read=whole), the same sequence", items_problem(driver, by_start[item]))
    twin("a JSON cache read by start",
         reads_problem(sent, size, body(driver).get_attribute("data-bytes-read"), requests, JSON_BUDGET))
    for start in (0, 50 * (len(by_start) - 1)):
        open_page(driver, server.base + f"/viewer/?cache=..{path}&read=start&start={start}")
        check(f"read by start, the first and the last: item {start}", items_problem(driver, by_start[start]))
    check_picked_json_by_start(driver, root, os.path.join(site, path[1:]), by_start, item)
    open_page(driver, server.base + f"/viewer/?cache=..{path}&read=start&start={item + 1}")
    note = driver.find_element(By.ID, "chosen-info").text
    check(f"read by start, item {item + 1} starts no sequence: said so",
          None if f"No sequence in this cache starts at item {item + 1}" in note else note)
    for start in (100, 500):
        state = open_page(driver, server.base + f"/viewer/?cache=../many/descending/cache.json&read=start&start={start}")
        check(f"read by start, starts that descend are refused in one line (item {start})",
              one_line_error(driver, state, ["../many/descending/cache.json", "do not ascend"]))


def check_numeric_ids(driver, server, site):
    """A table whose ids are numbers: they label the items, in both forms of the cache."""
    folder = os.path.join(site, "ids")
    os.makedirs(folder)
    n = 40
    rng = random.Random(3)
    rows = [[rng.uniform(0.1, 1.0), rng.uniform(-1.0, 1.0)] for _ in range(n)]
    variants = {"table.json": list(range(1000, 1000 + n)), "bool_ids.json": [True] * n}
    for name, ids in variants.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump({"ids": ids, "embeddings": rows}, f)
    with open(os.path.join(folder, "table.json"), "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    starts = [3, 7, 11]
    made = mbc.make_rows(n, starts, 6, 5)
    fields = mbc.header_fields(n, 2, 6, sha, starts)
    mbc.write_json(os.path.join(folder, "cache.json"), fields, made)
    mbc.write_binary(os.path.join(folder, "cache.bin"), fields, starts, made, n)
    expected = [str(1000 + i) for i in made[1].tolist()]

    def labels_problem(cache, table):
        state = open_page(driver, server.base + f"/viewer/?cache=../ids/{cache}&embeddings=../ids/{table}")
        if state != "ready":
            return f"state {state}: {error_text(driver)!r}"
        box = driver.find_element(By.ID, "search")
        box.clear()  # it holds the label of the start on show (the cache's first)
        box.send_keys("1007")
        WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, '#matches li[data-item="7"]'))
        driver.find_element(By.CSS_SELECTOR, '#matches li[data-item="7"]').click()
        wait_shown(driver, 7)
        shown = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#sequence td.title")]
        return None if shown == expected else f"shown {shown}, expected {expected}"
    for cache in ("cache.json", "cache.bin"):
        check(f"numeric ids ({cache}): id 1007 found by the search, the rows labelled by their ids",
              labels_problem(cache, "table.json"))
    twin("numeric ids", labels_problem("cache.json", "bool_ids.json"))
    check("ids that are neither strings nor numbers: one line naming the table",
          one_line_error(driver, body(driver).get_attribute("data-state"),
                         ["../ids/bool_ids.json", '"ids" is not 40 strings or numbers']))
    check_binary_refusals(driver, server, folder, fields, starts, made)


def check_binary_refusals(driver, server, folder, fields, starts, rows):
    """Broken copies of a small binary cache (the one above, which loads: their twin)."""
    n = fields["num_items"]
    good = open(os.path.join(folder, "cache.bin"), "rb").read()
    header = mbc.read_binary(os.path.join(folder, "cache.bin"))[0]

    def write(name, data):
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)

    def patched(offset, value):
        return good[:offset] + int(value).to_bytes(4, "little") + good[offset + 4:]
    write("magic.bin", good[:6] + b"X" + good[7:])
    write("layout.bin", patched(8, 2))
    write("start_beyond.bin", patched(header["starts_offset"], n))
    write("longer.bin", good + bytes(4))
    index_at = f'"index_offset":{header["index_offset"]}'.encode()
    moved = f'"index_offset":{header["index_offset"] + 4}'.encode()
    assert len(moved) == len(index_at) and good.count(index_at) == 1
    write("offset.bin", good.replace(index_at, moved))
    reordered = {k: fields[k] for k in ["format", "version", "contract", "dim", "num_items"]} | fields
    mbc.write_binary(os.path.join(folder, "reordered.bin"), reordered, starts, rows, n)
    size = len(good)
    for name, words in [
            ("magic.bin", ["not a divgpu binary cache", "DIVGPUB"]),
            ("layout.bin", ["binary layout 2, not 1"]),
            ("start_beyond.bin", [f"start 0 is item {n}, not below num_items {n}"]),
            ("longer.bin", [f"the file has {size + 4} bytes, but its header says {size}"]),
            ("offset.bin", [f"index_offset is {header['index_offset'] + 4}, but the layout puts it at {header['index_offset']}"]),
            ("reordered.bin", ["the binary header's fields are format, version, contract, dim, num_items"])]:
        state = open_page(driver, server.base + f"/viewer/?cache=../ids/{name}&start=7")
        check(f"a binary cache refused: {name}, in one line naming it", one_line_error(driver, state, [f"../ids/{name}"] + words))
    state = open_page(driver, server.base + "/viewer/?cache=../ids/cache.bin&start=7")
    twin("a binary cache refused", one_line_error(driver, state, ["../ids/cache.bin"]))


def check_origins(driver, server, other, big):
    """?cache= and ?embeddings= of another origin are refused: no request goes out."""
    port = server.port
    partial = json.dumps({"format": "divgpu-diversity-cache", "note": "ATTACKER-TEXT"})
    refused = [
        ("cache", "another port", f"{other.base}/big/cache.bin"),
        ("cache", "another host", f"http://localhost:{port}/big/cache.bin"),
        ("cache", "another scheme", f"https://127.0.0.1:{port}/big/cache.bin"),
        ("cache", "a scheme-relative URL to another host", f"//localhost:{port}/big/cache.bin"),
        ("cache", "a data: URL", "data:application/json," + partial),
        ("cache", "a javascript: URL", "javascript:alert('ATTACKER-TEXT')"),
        ("cache", "a blob: URL of another origin", f"blob:http://localhost:{port}/0b6e5c2e-0000-4000-8000-000000000000"),
        ("embeddings", "a table on another port", f"{other.base}/assets/embeddings/all-MiniLM-L6-v2/embeddings.json"),
    ]

    def refusal(param, value):
        """What the page did with the URL: its three problems, each None when refused cleanly."""
        since = (len(server.log), len(other.log))
        state = open_page(driver, f"{server.base}/viewer/?{param}={urllib.parse.quote(value, safe='')}")
        fetched = [r.path for r in server.log[since[0]:] + other.log[since[1]:] if not r.path.startswith("/viewer/")]
        return {
            "refused in one line": one_line_error(driver, state, [f"?{param}=", "refused"]),
            "nothing fetched": f"requests went out: {fetched}" if fetched else None,
            "none of its text shown": "the page shows the URL's text" if "ATTACKER-TEXT" in body(driver).text else None,
        }
    for param, what, value in refused:
        for part, problem in refusal(param, value).items():
            check(f"?{param}= naming {what}: {part}", problem)
    same_origin = refusal("cache", "../big/cache.bin")
    for part in ("refused in one line", "nothing fetched"):
        twin(f"a refused URL: {part}", same_origin[part])
    twin("a refused URL: none of its text shown", refusal("cache", "../ATTACKER-TEXT.json")["none of its text shown"])
    open_page(driver, f"{server.base}/viewer/?cache=../big/cache.bin&start={big.start}")
    check("a relative URL of this origin loads", items_problem(driver, big.by_start[big.start]))


def run_all(driver, root, site, server, plain, big_path):
    big = BigCache(big_path, os.path.join(site, "big"))
    check_served_binary(driver, server, plain, big)
    check_picked_binary(driver, root, big, site)
    check_json_by_start(driver, root, server, site)
    check_numeric_ids(driver, server, site)
    check_origins(driver, server, plain, big)
