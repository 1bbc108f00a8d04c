#!/usr/bin/python3
"""The viewer tells the story of a .npy table, and keeps URLs' passwords, in
headless Chromium: run by tests/viewer_test.sh after tests/viewer_test.py.

A 40 x 8 table made by `bin/divgpu synth --out t.npy`, titles of several
shapes written into its sidecar t.titles.json, and a cache of 7 sampled starts
made by `bin/divgpu run` (and its binary form by `bin/divgpu convert`). The
page must: open on the cache's first start; show the sidecar's titles as they
are; show each item's cosine distance from the centroid of the items before
it (checked against NumPy in f64); list the cache's starts and link only the
items that start a sequence; accept the JSON form of the same values and
refuse one with a single value changed; refuse a float64, big-endian or
Fortran-ordered .npy in one line naming it; never show a URL's user name or
password. Every check has a twin fed a wrong variant that must fail.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from viewer_lib import (Server, RangeHandler, body, browser, check, console_problem, counts, error_text, not_ok,
                        one_line_error, open_page, state_is, twin)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIVGPU = os.path.join(ROOT, "bin", "divgpu")
N, D = 40, 8
SECRET = "s3cr3tpw"


# --- fixtures ------------------------------------------------------------------

def title_of(i):
    """Titles of no single shape: a dash inside, several dashes, none, a colon, CJK."""
    shapes = [f"Item {i} — of the first kind", f"Ode {i} — to — nothing — at all", f"plain{i}",
              f"{i}: a colon, no dash", f"短诗 {i} — 作者"]
    return shapes[i % len(shapes)]


def divgpu(*args):
    subprocess.run([DIVGPU, *args], check=True, stdout=subprocess.DEVNULL)


def make_story(site):
    """site/story/: the table in its forms, its caches, and the broken variants."""
    folder = os.path.join(site, "story")
    os.makedirs(folder)
    at = lambda name: os.path.join(folder, name)  # noqa: E731
    divgpu("synth", "--n", str(N), "--dim", str(D), "--clusters", "4", "--seed", "3", "--out", at("t.npy"))
    with open(at("t.titles.json"), encoding="utf-8") as f:
        side = json.load(f)
    titles = [title_of(i) for i in range(N)]
    side["titles"] = titles
    with open(at("t.titles.json"), "w", encoding="utf-8") as f:
        json.dump(side, f, ensure_ascii=False)
    divgpu("run", "--embeddings", at("t.npy"), "--starts", "sample:7:1", "--length", "12", "--out", at("c.json"), "--quiet")
    divgpu("run", "--embeddings", at("t.npy"), "--starts", "sample:7:2", "--length", "12", "--out", at("c2.json"), "--quiet")
    divgpu("convert", at("c.json"), "--out", at("c.bin"), "--quiet")
    table = np.load(at("t.npy"))
    assert table.dtype == np.dtype("<f4") and table.shape == (N, D)
    # The JSON form of the same f32 values (exact: an f32 is an f64, and
    # Python writes the shortest text that reads back to it).
    with open(at("same.json"), "w", encoding="utf-8") as f:
        json.dump({"titles": titles, "embeddings": table.astype(np.float64).tolist()}, f, ensure_ascii=False)
    changed = table.copy()
    changed[17, 5] = np.nextafter(changed[17, 5], np.float32(np.inf))  # one value, one ulp
    with open(at("changed.json"), "w", encoding="utf-8") as f:
        json.dump({"titles": titles, "embeddings": changed.astype(np.float64).tolist()}, f, ensure_ascii=False)
    with open(at("t.npy"), "rb") as f, open(at("nosidecar.npy"), "wb") as g:
        g.write(f.read())
    np.save(at("f64.npy"), table.astype("<f8"))
    np.save(at("big_endian.npy"), table.astype(">f4"))
    np.save(at("fortran.npy"), np.asfortranarray(table))
    with open(at("t.npy"), "rb") as f, open(at("other_side.npy"), "wb") as g:
        g.write(f.read())
    with open(at("other_side.titles.json"), "w", encoding="utf-8") as f:
        json.dump({"titles": titles, "embeddings_sha256": "ab" * 32}, f)
    for name in ("f64", "big_endian", "fortran"):
        with open(at(f"{name}.titles.json"), "w", encoding="utf-8") as f:
            json.dump({"titles": titles}, f)
    with open(at("c.json"), encoding="utf-8") as f:
        cache = json.load(f)
    with open(at("c2.json"), encoding="utf-8") as f:
        cache2 = json.load(f)
    return table, titles, cache, cache2


def expected_distances(table, seq):
    """1 - cos(centroid of the items before, item), in f64 from the f32 values."""
    e = table.astype(np.float64)
    out = [None]
    for k in range(1, len(seq)):
        c = e[seq[:k]].sum(axis=0)
        v = e[seq[k]]
        out.append(1.0 - float(c @ v) / (np.linalg.norm(c) * np.linalg.norm(v)))
    return out


# --- what the page shows ---------------------------------------------------------

def rows(driver):
    """(item, title text, distance text, data-distance, linked) of each row."""
    out = []
    for r in driver.find_elements(By.CSS_SELECTOR, "#sequence tr"):
        dist = r.find_element(By.CSS_SELECTOR, "td.distance")
        out.append((int(r.get_attribute("data-item")), r.find_element(By.CSS_SELECTOR, "td.title").text,
                    dist.text, dist.get_attribute("data-distance"),
                    bool(r.find_elements(By.CSS_SELECTOR, "td.title a"))))
    return out


def ready_problem(driver):
    state = body(driver).get_attribute("data-state")
    return None if state == "ready" else f"state {state}: {error_text(driver)!r}"


def shown_start_problem(driver, seq):
    """The page shows the sequence `seq` (its start in data-shown, its items in the rows)."""
    problem = ready_problem(driver)
    if problem:
        return problem
    shown = body(driver).get_attribute("data-shown")
    items = [r[0] for r in rows(driver)]
    if shown != str(seq[0]) or items != list(seq):
        return f"shown start {shown}, items {items}; expected start {seq[0]}, items {list(seq)}"
    return None


def titles_problem(driver, expected):
    shown = [r[1] for r in rows(driver)]
    return None if shown == expected else f"shown {shown}\nexpected {expected}"


def distances_problem(driver, expected):
    for k, (item, _, text, value, _) in enumerate(rows(driver)):
        want = expected[k]
        if want is None:
            if text != "—" or value is not None:
                return f"row {k + 1} (item {item}): {text!r}, {value!r}; the start has no distance (—)"
            continue
        if value is None or abs(float(value) - want) > 1e-12 * max(1.0, abs(want)):
            return f"row {k + 1} (item {item}): data-distance {value}, NumPy {want!r}"
        if abs(float(text) - want) > 0.5e-4 + 1e-12:
            return f"row {k + 1} (item {item}): shown {text}, NumPy {want:.6f}"
    if len(rows(driver)) != len(expected):
        return f"{len(rows(driver))} rows, {len(expected)} expected"
    return None


def listed_problem(driver, starts):
    listed = [int(li.get_attribute("data-item")) for li in driver.find_elements(By.CSS_SELECTOR, "#starts-list li")]
    box = driver.find_element(By.ID, "starts")
    if listed != list(starts) or not box.is_displayed() or box.get_attribute("open") is None:
        return f"listed {listed} (shown {box.is_displayed()}, open {box.get_attribute('open')}), expected {list(starts)}"
    return None


def links_problem(driver, starts):
    """A row's title is a link exactly when its item starts a sequence of the cache."""
    wrong = [(item, linked) for item, _, _, _, linked in rows(driver) if linked != (item in starts)]
    return None if not wrong else f"(item, linked) wrong: {wrong}"


def secret_problem(driver):
    """None when no user name or password shows: text, title, links, console."""
    shown = [body(driver).text, driver.title]
    shown += [a.get_attribute("href") or "" for a in driver.find_elements(By.CSS_SELECTOR, "a")]
    logs = driver.get_log("browser")
    # What the page logged, less Chromium's prefix (the script's address, as typed).
    shown += [re.sub(r"^\S+ \d+:\d+ ", "", e.get("message", "")) for e in logs]
    leaks = [s for s in shown if SECRET in s or "user:" in s]
    return None if not leaks else f"shown: {leaks[0][-120:]!r}"


# --- the checks --------------------------------------------------------------------

def check_npy_page(driver, base, table, titles, cache, cache2):
    seqs = cache["sequences"]
    starts = [s[0] for s in seqs]
    first = seqs[0]
    page = f"{base}/viewer/?cache=../story/c.json&embeddings=../story/t.npy"
    open_page(driver, page)
    check("a .npy table with its sidecar: the page opens on the cache's first start, no ?start= needed",
          shown_start_problem(driver, first))
    info = driver.find_element(By.ID, "info").text
    check("the page names the sidecar and the .npy, the table the cache was computed from",
          None if "t.titles.json" in info and "values from ../story/t.npy" in info
          and "the table the cache was computed from" in info else info)
    check("the titles are the sidecar's, whatever their shape", titles_problem(driver, [titles[i] for i in first]))
    twin("the titles are the sidecar's (the heading before ' — ' only)",
         titles_problem(driver, [titles[i].rsplit(" — ", 1)[0] for i in first]))
    check("the distances are NumPy's (f64 from the f32 table)", distances_problem(driver, expected_distances(table, first)))
    # The twin: each item's distance from the centroid including itself.
    wrong = [None] + [1 - float(table[first[:k + 1]].astype(np.float64).sum(0) @ table[first[k]]) /
                      (np.linalg.norm(table[first[:k + 1]].astype(np.float64).sum(0)) *
                       np.linalg.norm(table[first[k]].astype(np.float64))) for k in range(1, len(first))]
    twin("the distances (the centroid including the item)", distances_problem(driver, wrong))
    check("the cache's starts are listed, in its order", listed_problem(driver, starts))
    check("a row's title links to its sequence exactly when a sequence starts there", links_problem(driver, set(starts)))
    twin("a row's title links exactly when a sequence starts there (every item taken as a start)",
         links_problem(driver, set(range(N))))
    check("a .npy page: no console error", console_problem(driver.get_log("browser")))
    absent = next(i for i in range(N) if i not in starts and title_of(i).startswith("plain"))
    check(f"the search marks item {absent}, which starts no sequence", match_mark_problem(driver, absent, True))
    twin(f"the search marks the items that start no sequence (item {starts[0]}, a start)",
         match_mark_problem(driver, starts[0], True))

    # A start picked from the list: its sequence, titles and distances.
    driver.find_element(By.CSS_SELECTOR, f'#starts-list li[data-item="{starts[3]}"] a').click()
    state_is(driver, "ready")
    check(f"the listed start {starts[3]}, clicked: its sequence", shown_start_problem(driver, seqs[3]))
    check(f"start {starts[3]}: NumPy's distances", distances_problem(driver, expected_distances(table, seqs[3])))

    # Twins of the opening and listing checks: another start asked for, another cache.
    open_page(driver, page + f"&start={starts[2]}")
    check(f"?start={starts[2]} still opens on that start", shown_start_problem(driver, seqs[2]))
    twin("the page opens on the cache's first start", shown_start_problem(driver, first))
    open_page(driver, f"{base}/viewer/?cache=../story/c2.json&embeddings=../story/t.npy")
    check("another cache of the table: its own starts listed", listed_problem(driver, [s[0] for s in cache2["sequences"]]))
    twin("the cache's starts are listed", listed_problem(driver, starts))

    # The binary form: the same first start, list and marks.
    open_page(driver, f"{base}/viewer/?cache=../story/c.bin&embeddings=../story/t.npy")
    check("the binary form opens on the first start", shown_start_problem(driver, first))
    check("the binary form lists the starts", listed_problem(driver, starts))
    check("the binary form links only the starts", links_problem(driver, set(starts)))
    check("the binary form: NumPy's distances", distances_problem(driver, expected_distances(table, first)))


def match_mark_problem(driver, item, marked):
    """Typing the item's title lists it, marked or not as starting no sequence."""
    box = driver.find_element(By.ID, "search")
    box.clear()
    box.send_keys(title_of(item))
    WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, f'#matches li[data-item="{item}"]'))
    li = driver.find_element(By.CSS_SELECTOR, f'#matches li[data-item="{item}"]')
    text = li.text
    has = bool(li.find_elements(By.CSS_SELECTOR, ".no-start")) and "no sequence starts here" in text
    box.send_keys(Keys.ESCAPE)
    return None if has == marked else f"item {item}: {text!r}"


def check_json_twin(driver, base, table, titles, cache):
    first = cache["sequences"][0]
    state = open_page(driver, f"{base}/viewer/?cache=../story/c.json&embeddings=../story/same.json")
    info = driver.find_element(By.ID, "info").text

    def accepted(state, info):
        if state != "ready":
            return f"state {state}: {error_text(driver)!r}"
        return None if f"the same {N} × {D} f32 values" in info else info
    check("the JSON form of the .npy's values (another sha256) is accepted, and the page says why",
          accepted(state, info))
    check("the JSON form: the first start, titles and distances",
          shown_start_problem(driver, first) or titles_problem(driver, [titles[i] for i in first])
          or distances_problem(driver, expected_distances(table, first)))
    state = open_page(driver, f"{base}/viewer/?cache=../story/c.json&embeddings=../story/changed.json")
    twin("the JSON form of the same values is accepted (one value one ulp off)",
         accepted(state, driver.find_element(By.ID, "info").text))
    check("a JSON table with one value changed: refused in one line naming it",
          one_line_error(driver, state, ["../story/changed.json", "computed from another table", "other values"]))


def check_npy_refusals(driver, base):
    for name, words in [("f64.npy", ["float64", "'<f4'"]), ("big_endian.npy", ["big-endian"]),
                        ("fortran.npy", ["fortran_order is True", "C order"])]:
        state = open_page(driver, f"{base}/viewer/?cache=../story/c.json&embeddings=../story/{name}")
        check(f"{name}: refused in one line naming it", one_line_error(driver, state, [f"../story/{name}"] + words))
    state = open_page(driver, f"{base}/viewer/?cache=../story/c.json&embeddings=../story/other_side.npy")
    check("a sidecar whose embeddings_sha256 is another table's: refused in one line naming it",
          one_line_error(driver, state, ["../story/other_side.titles.json", "the sidecar of another table"]))
    # Their twin: the '<f4' C-order table with its own sidecar loads.
    state = open_page(driver, f"{base}/viewer/?cache=../story/c.json&embeddings=../story/t.npy")
    twin(".npy refusals (the float32 C-order table)", one_line_error(driver, state, ["../story/t.npy"]))


def check_no_sidecar(driver, base, table, cache):
    """A .npy alone: items by number, distances still shown, and the page says why."""
    first = cache["sequences"][0]
    open_page(driver, f"{base}/viewer/?cache=../story/c.json&embeddings=../story/nosidecar.npy")
    info = driver.find_element(By.ID, "info").text
    check("a .npy without its sidecar: the page says none is beside it",
          ready_problem(driver) or (None if "no ../story/nosidecar.titles.json beside it" in info else info))
    check("a .npy without its sidecar: items by number, NumPy's distances",
          titles_problem(driver, [f"item {i}" for i in first]) or distances_problem(driver, expected_distances(table, first)))


def check_picked(driver, site, table, titles, cache):
    """From a file: URL: the .npy and its sidecar picked together, then the cache."""
    first = cache["sequences"][0]
    folder = os.path.join(site, "story")

    def picked(tables):
        open_page(driver, "file://" + os.path.join(ROOT, "viewer", "index.html"))
        driver.find_element(By.ID, "embeddings-file").send_keys("\n".join(os.path.join(folder, t) for t in tables))
        driver.find_element(By.ID, "cache-file").send_keys(os.path.join(folder, "c.json"))
        state_is(driver, "ready", "error")
        return shown_start_problem(driver, first) or titles_problem(driver, [titles[i] for i in first]) \
            or distances_problem(driver, expected_distances(table, first))
    check("picked t.npy and t.titles.json: the first start, the titles, the distances",
          picked(["t.npy", "t.titles.json"]))
    twin("picked .npy and sidecar (t.npy alone: no titles)", picked(["t.npy"]))


def check_many_starts(driver, base, site):
    """A binary cache of 1,500 starts: listed 100 at a time, read 1,024 at a time."""
    import make_binary_cache as mbc
    starts = list(range(0, 3000, 2))
    paths = mbc.make(os.path.join(site, "many"), 4000, 3, starts, 6)
    table = np.load(paths["table.npy"])
    cache = mbc.read_binary(paths["cache.bin"])
    first = cache[3][0].tolist()

    def listed_after(clicks):
        for _ in range(clicks):
            before = len(driver.find_elements(By.CSS_SELECTOR, "#starts-list li"))
            driver.find_element(By.ID, "starts-more").click()
            WebDriverWait(driver, 10).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#starts-list li")) > before)
        return driver.execute_script(
            "return [...document.querySelectorAll('#starts-list li')].map((li) => Number(li.dataset.item))")

    def all_listed(got):
        more = driver.find_element(By.ID, "starts-more")
        return None if got == starts and not more.is_displayed() else \
            f"listed {len(got)}, last {got[-3:]}, 'more' shown {more.is_displayed()}"
    open_page(driver, f"{base}/viewer/?cache=../many/cache.bin&embeddings=../many/table.npy")
    got = listed_after(0)
    check("1,500 starts: the first 100 listed, the first start shown with NumPy's distances",
          (None if got == starts[:100] else f"listed {got[:5]}… ({len(got)})")
          or shown_start_problem(driver, first) or distances_problem(driver, expected_distances(table, first)))
    check("1,500 starts: every row a link (the starts past 1,024 not read yet)",
          links_problem(driver, set(range(4000))))
    twin("1,500 starts all listed (after 'more' 9 times: 1,000)", all_listed(listed_after(9)))
    check("1,500 starts: 'more' 14 times lists them all, past the first 1,024 read, and hides itself",
          all_listed(listed_after(5)))


def check_credentials(driver, base):
    host = base.split("//", 1)[1]
    urls = [
        ("cache", f"http://user:{SECRET}@{host}/story/c.json", ["?cache=", f"http://{host}/story/c.json", "refused"]),
        ("embeddings", f"http://user:{SECRET}@{host}/story/t.npy", ["?embeddings=", "refused"]),
        ("cache", f"//user:{SECRET}@{host}/story/c.json", ["?cache=", "refused"]),
        ("cache", f"http://user:{SECRET}@example.invalid:9/c.json", ["?cache=", "http://example.invalid:9", "refused"]),
    ]
    # The page's own address typed with a user name and password: the relative
    # files load, and neither the rows' links nor the list's show them.
    state = open_page(driver, f"http://user:{SECRET}@{host}/viewer/?cache=../story/c.json&embeddings=../story/t.npy")
    check("the page's address with a user name and password: the relative files load",
          None if state == "ready" else f"state {state}: {error_text(driver)!r}")
    check("the page's address with a user name and password: not shown in links, text or console",
          secret_problem(driver))
    # Its twin: a relative link, as the viewer made them before, resolves to the typed address.
    driver.execute_script("const a = document.createElement('a'); a.href = '?start=1'; a.textContent = 'x';"
                          "document.getElementById('sequence').append(a)")
    twin("the page's address with a user name and password: not shown in links (a relative link)",
         secret_problem(driver))
    driver.get_log("browser")  # drop what came before
    for param, url, words in urls:
        q = f"cache=../story/c.json&{param}={url}" if param == "embeddings" else f"cache={url}"
        state = open_page(driver, f"{base}/viewer/?{q}")
        check(f"?{param}={url.replace(SECRET, '…')}: refused in one line, the URL without its credentials",
              one_line_error(driver, state, words))
        check(f"?{param}={url.replace(SECRET, '…')}: no user name or password shown, nor logged", secret_problem(driver))
    # Twins: the check sees a password on the page, and on the console.
    driver.execute_script(f"document.getElementById('error').textContent += ' http://user:{SECRET}@x/'")
    twin("no password shown (one written on the page)", secret_problem(driver))
    open_page(driver, f"{base}/viewer/?{q}")  # the page as it was, then a password on the console only
    driver.execute_script(f"console.error('http://user:{SECRET}@x/')")
    twin("no password logged (one written to the console)", secret_problem(driver))


def run(tmp):
    site = os.path.join(tmp, "site")
    os.makedirs(site)
    os.symlink(os.path.join(ROOT, "viewer"), os.path.join(site, "viewer"))
    t0 = time.time()
    table, titles, cache, cache2 = make_story(site)
    print(f"# the story's table and caches: {time.time() - t0:.1f} s", flush=True)
    server = Server(site, RangeHandler)
    driver = browser(os.path.join(tmp, "profile"))
    try:
        check_npy_page(driver, server.base, table, titles, cache, cache2)
        check_json_twin(driver, server.base, table, titles, cache)
        check_npy_refusals(driver, server.base)
        check_no_sidecar(driver, server.base, table, cache)
        check_picked(driver, site, table, titles, cache)
        check_many_starts(driver, server.base, site)
        check_credentials(driver, server.base)
    except Exception:  # a timeout or a missing element: a failure, reported as one
        page = body(driver)
        not_ok("the story test ran to its end", f"at {driver.current_url}, state {page.get_attribute('data-state')}: "
               f"{page.text[:300]}\n{traceback.format_exc()}")
    finally:
        driver.quit()
        server.close()


def main():
    if not os.path.exists(os.path.join(ROOT, "build", "divgpu.so")):
        sys.exit("viewer_story_test: needs build/divgpu.so (make build) for bin/divgpu synth and run")
    with tempfile.TemporaryDirectory(prefix="viewer_story.") as tmp:
        run(tmp)
    print(f"{counts['passed']} passed, {counts['failed']} failed")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"# {time.time() - started:.1f} s")
    sys.exit(1 if counts["failed"] or not counts["passed"] else 0)
