#!/usr/bin/python3
"""The viewer page (viewer/) in headless Chromium, through chromedriver.

Run by tests/viewer_test.sh, which installs Debian's chromium,
chromium-driver, python3-selenium, python3-pil, python3-numpy and
python3-rangehttpserver. Every check has a twin fed a wrong variant that must
fail. `--screenshot PATH` also writes the README's picture.

The poems' cache is $VIEWER_CACHE, else the repository's diversity_cache.json
(made by `make run`), else a short one (16 steps from every start) that this
test makes with bin/divgpu (needs `make build`). The by-start checks
(tests/viewer_by_start.py) read a binary cache of a 1,048,576-item table:
$VIEWER_BINARY_CACHE, else one made now by tests/make_binary_cache.py.
Everything is served from a temporary folder, removed at the end.
"""
import argparse
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import traceback

from PIL import Image
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

import viewer_by_start
from viewer_lib import (WAIT_S, PlainHandler, RangeHandler, Server, body, browser, check, console_problem, counts,
                        not_ok, ok, one_line_error, open_page, state_is, twin)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = "assets/embeddings/all-MiniLM-L6-v2/embeddings.json"
WITH_TABLE = "&embeddings=../" + TABLE  # ?cache= alone shows items by number


# --- the checks ------------------------------------------------------------

def titles_problem(shown, expected):
    if shown != expected:
        return f"shown {shown}\nexpected {expected}"
    return None


def blank_problem(png):
    """A render is not blank: many colours, and a share of pixels off the background."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    w, h = img.size
    colours = img.getcolors(maxcolors=w * h)
    colours.sort(reverse=True)
    background = colours[0][1]
    off = sum(n for n, c in colours if c != background) / (w * h)
    if len(colours) < 16 or off < 0.02:
        return f"{len(colours)} colours, {off:.1%} of pixels off the background {background} ({w}x{h})"
    return None


# --- fixtures ----------------------------------------------------------------

def find_cache(tmp):
    path = os.environ.get("VIEWER_CACHE") or os.path.join(ROOT, "diversity_cache.json")
    if os.path.exists(path):
        return path, path
    if not os.path.exists(os.path.join(ROOT, "build", "divgpu.so")):
        sys.exit("viewer_test: no diversity_cache.json in the repository root and no build/divgpu.so "
                 "to make a short one: run `make run` or `make build` first")
    out = os.path.join(tmp, "made_cache.json")
    subprocess.run([os.path.join(ROOT, "bin", "divgpu"), "run", "--embeddings", os.path.join(ROOT, TABLE),
                    "--length", "16", "--out", out, "--quiet"], check=True, stdout=subprocess.DEVNULL)
    return out, "a 16-step cache made by bin/divgpu run (no diversity_cache.json in the repository root)"


def bad_variants(site, cache, n):
    """Broken inputs under /bad/, each with the words its error must contain."""
    bad = os.path.join(site, "bad")
    os.makedirs(bad)
    # A cache of its first three starts (format 2 records their count and sha256).
    firsts = b"".join(struct.pack("<I", seq[0]) for seq in cache["sequences"][:3])
    small = dict(cache, version=2, sequences=cache["sequences"][:3], starts_count=3,
                 starts_sha256=hashlib.sha256(firsts).hexdigest(), divgpu_version=cache.get("divgpu_version", "0.1.0"))

    def write(name, obj=None, text=None):
        with open(os.path.join(bad, name), "w", encoding="utf-8") as f:
            f.write(text if text is not None else json.dumps(obj))

    text = json.dumps(small)
    write("truncated.json", text=text[: len(text) // 2])
    write("wrong_n.json", dict(small, num_items=n + 1))
    write("other_table.json", dict(small, embeddings_sha256="ab" * 32))
    seqs = [list(s) for s in small["sequences"]]
    seqs[1][2] = n
    write("out_of_range.json", dict(small, sequences=seqs))
    write("not_cache.json", {"format": "something-else", "version": 1})
    write("partial.json", small)  # valid: a cache of three starts
    write("cut.json", dict(small, sequences=small["sequences"][:2]))  # format 2: a sequence missing
    write("other_starts.json", dict(small, starts_sha256="ab" * 32))
    for name in ("viewer", "assets"):
        os.symlink(os.path.join(ROOT, name), os.path.join(bad, name))
    write("short_titles.json", {"embeddings": [[1.0]] * n, "titles": ["a"] * (n - 1)})
    return [
        ("a missing cache", "/viewer/?cache=../bad/missing.json", ["../bad/missing.json", "HTTP 404"]),
        # /bad/ is a repository root without a cache.
        ("a missing default cache", "/bad/viewer/", ["../diversity_cache.json", "HTTP 404", "make run"]),
        ("a truncated cache", "/viewer/?cache=../bad/truncated.json", ["../bad/truncated.json", "not valid JSON"]),
        ("a cache whose num_items is not the titles'", "/viewer/?cache=../bad/wrong_n.json" + WITH_TABLE,
         ["../bad/wrong_n.json", f"is for {n + 1} items", f"has {n}"]),
        ("a cache of another table", "/viewer/?cache=../bad/other_table.json" + WITH_TABLE,
         ["../bad/other_table.json", "computed from another table"]),
        ("an item out of range", "/viewer/?cache=../bad/out_of_range.json",
         ["sequence 1, step 2", f"item {n} is out of range"]),
        ("a JSON file that is not a cache", "/viewer/?cache=../bad/not_cache.json", ["not a divgpu cache"]),
        ("a format 2 cache missing a sequence", "/viewer/?cache=../bad/cut.json",
         ["../bad/cut.json", "has 2 sequences, but its header says starts_count 3"]),
        ("a format 2 cache whose starts are not its starts_sha256's", "/viewer/?cache=../bad/other_starts.json",
         ["../bad/other_starts.json", "its sequences' starts have sha256", "starts_sha256 ababababab"]),
        ("an unknown ?read=", "/viewer/?read=fast", ["?read= is \"fast\"", "one of auto, whole, start"]),
        ("a table whose titles are one short", "/viewer/?embeddings=../bad/short_titles.json",
         ["../bad/short_titles.json", f"is not {n} strings"]),
        ("a missing table", "/viewer/?embeddings=../bad/nothing.json", ["../bad/nothing.json", "HTTP 404"]),
    ]


# --- page actions --------------------------------------------------------------

def choose_by_search(driver, item, titles, keys=False):
    """Types the item's heading, then picks its entry in the type-ahead list:
    a click, or with `keys` the arrow keys and Enter."""
    heading = titles[item].rsplit(" — ", 1)[0]
    for query in ((heading[:3],) if keys else ()) + (heading, titles[item]):
        box = driver.find_element(By.ID, "search")
        box.clear()
        box.send_keys(query)
        WebDriverWait(driver, WAIT_S).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#matches li[data-item]"))
        listed = [li.get_attribute("data-item") for li in driver.find_elements(By.CSS_SELECTOR, "#matches li")]
        if str(item) in listed:
            if keys:
                # The first match is active after typing; the list wraps round.
                box.send_keys(Keys.ARROW_DOWN * (len(listed) + listed.index(str(item))) + Keys.ENTER)
            else:
                driver.find_element(By.CSS_SELECTOR, f'#matches li[data-item="{item}"]').click()
            WebDriverWait(driver, WAIT_S).until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-shown") == str(item))
            return None
    return f"item {item} is not among the matches for {heading!r} nor for its full title"


def shown_rows(driver, count):
    rows = driver.find_elements(By.CSS_SELECTOR, "#sequence tr")[:count]
    out = []
    for r in rows:
        # The title as the table gives it, in one cell (no "Author" column).
        out.append((r.find_element(By.CSS_SELECTOR, ".pos").text, r.find_element(By.CSS_SELECTOR, ".item").text,
                    r.find_element(By.CSS_SELECTOR, ".title").text))
    return out


def expected_rows(seq, titles, count):
    return [(str(k + 1), str(i), titles[i]) for k, i in enumerate(seq[:count])]


def check_poems_page(driver, base, cache, titles, args):
    """The default page: the poems' cache and table, a title search, the rows."""
    by_start = {s[0]: s for s in cache["sequences"]}
    starts = [s[0] for s in cache["sequences"]]
    # A start of unique title; another start whose first five titles differ (the twin's).
    unique = [s for s in starts if titles.count(titles[s]) == 1]
    # An English heading, so the search types plain letters (any unique one otherwise).
    item = next((s for s in unique[len(unique) // 3:] if titles[s].isascii() or
                 titles[s].rsplit(" — ", 1)[0].isascii()), unique[0])
    other = next(s for s in starts
                 if [titles[i] for i in by_start[s][:5]] != [titles[i] for i in by_start[item][:5]])
    t0 = time.time()
    driver.get(f"{base}/viewer/")
    state = state_is(driver, "ready", "error")
    load_s = time.time() - t0
    if state != "ready":
        not_ok("the page loads the cache and the table", driver.find_element(By.ID, "error").text)
        return None
    ok(f"the page loads the cache and the table from the default paths ({load_s:.2f} s)")
    info = driver.find_element(By.ID, "info").text
    check("the page names the cache and says the table is the one it was computed from",
          None if "the table the cache was computed from" in info and f"{len(starts)} sequences" in info else info)

    check(f"choosing item {item} by a title search shows its sequence", choose_by_search(driver, item, titles))
    shown = shown_rows(driver, 5)
    check("the first five rows are the cache's sequence (positions, items, titles)",
          titles_problem(shown, expected_rows(by_start[item], titles, 5)))
    twin("the first five rows are the cache's sequence", titles_problem(shown, expected_rows(by_start[other], titles, 5)))

    png = driver.get_screenshot_as_png()  # before 'more' scrolls the page
    check_pages_of_rows(driver, cache["length"])
    check("no console error on the good page", console_problem(driver.get_log("browser")))
    check("the screenshot is not blank", blank_problem(png))
    if args.screenshot:
        Image.open(io.BytesIO(png)).convert("RGB").quantize(64).save(args.screenshot, optimize=True)
        print(f"# wrote {args.screenshot} ({os.path.getsize(args.screenshot)} bytes)")
    driver.execute_script("document.documentElement.style.visibility = 'hidden'")
    twin("the screenshot is not blank", blank_problem(driver.get_screenshot_as_png()))
    driver.execute_script("console.error('injected by viewer_test')")
    twin("no console error", console_problem(driver.get_log("browser")))

    # A title in the sequence is a link: it becomes the start.
    driver.get(f"{base}/viewer/?start={item}")
    state_is(driver, "ready")
    second = by_start[item][1]
    if second in by_start:
        driver.find_element(By.CSS_SELECTOR, "#sequence tr:nth-child(2) td.title a").click()
        state_is(driver, "ready")
        check("choosing a title in the sequence shows the sequence from it",
              titles_problem(shown_rows(driver, 5), expected_rows(by_start[second], titles, 5)))
    check("?start= opens on that start, no console error", console_problem(driver.get_log("browser")))
    return other


def check_pages_of_rows(driver, length):
    rows = len(driver.find_elements(By.CSS_SELECTOR, "#sequence tr"))
    more = driver.find_element(By.ID, "more")
    problem = None if rows == min(length, 200) and more.is_displayed() == (length > 200) else \
        f"{rows} rows, 'more' shown: {more.is_displayed()}"
    if problem is None and length > 200:
        more.click()
        rows = len(driver.find_elements(By.CSS_SELECTOR, "#sequence tr"))
        problem = None if rows == min(length, 400) else f"{rows} rows after 'more'"
    check(f"rows come 200 at a time ({length} in all)", problem)


def check_partial_and_broken(driver, base, cache, titles, broken):
    """A cache of some starts only; then each broken file, one line naming it."""
    by_start = {s[0]: s for s in cache["sequences"]}
    starts = [s[0] for s in cache["sequences"]]
    absent = next(i for i in range(len(titles)) if i not in starts[:3])
    driver.get(f"{base}/viewer/?cache=../bad/partial.json{WITH_TABLE}&start={absent}")
    state_is(driver, "ready", "error")
    note = driver.find_element(By.ID, "chosen-info").text
    check("a start the cache lacks: the page says so and shows no rows",
          None if f"No sequence in this cache starts at item {absent}" in note
          and not driver.find_elements(By.CSS_SELECTOR, "#sequence tr") else note)
    driver.get(f"{base}/viewer/?cache=../bad/partial.json{WITH_TABLE}&start={starts[1]}")
    state_is(driver, "ready", "error")
    check("a start the cache has shows its rows",
          titles_problem(shown_rows(driver, 5), expected_rows(by_start[starts[1]], titles, 5)))
    check("a partial cache, no console error", console_problem(driver.get_log("browser")))
    driver.get(f"{base}/viewer/?cache=../bad/partial.json&start={starts[1]}")
    state_is(driver, "ready", "error")
    shown = [(r.get_attribute("data-item"), r.find_element(By.CSS_SELECTOR, ".title").text)
             for r in driver.find_elements(By.CSS_SELECTOR, "#sequence tr")[:5]]
    check("?cache= without ?embeddings=: no table read, the items shown by number",
          None if shown == [(str(i), f"item {i}") for i in by_start[starts[1]][:5]] else shown)

    for name, query, words in broken:
        state = open_page(driver, base + query)
        check(f"{name}: one line on the page naming it", one_line_error(driver, state, words))
        twin(f"{name}: no console error", console_problem(driver.get_log("browser")))


def check_file_url(driver, cache_path, site, cache, titles, other):
    """From a file: URL the page asks for the files; the pickers work."""
    by_start = {s[0]: s for s in cache["sequences"]}
    driver.get("file://" + os.path.join(ROOT, "viewer", "index.html"))
    state = state_is(driver, "pick", "ready", "error")
    check("from a file: URL the page offers the file pickers",
          None if state == "pick" and driver.find_element(By.ID, "files-why").is_displayed() else state)
    driver.find_element(By.ID, "embeddings-file").send_keys(os.path.join(ROOT, TABLE))
    driver.find_element(By.ID, "cache-file").send_keys(os.path.abspath(cache_path))
    state = state_is(driver, "ready", "error")
    info = driver.find_element(By.ID, "info").text
    check("the picked files load, the table's sha256 checked",
          None if state == "ready" and "the table the cache was computed from" in info
          else driver.find_element(By.ID, "error").text or info)
    if state == "ready":
        check(f"from a file: URL, choosing item {other} with the arrow keys and Enter",
              choose_by_search(driver, other, titles, keys=True))
        check("from a file: URL, a title search shows the expected first five",
              titles_problem(shown_rows(driver, 5), expected_rows(by_start[other], titles, 5)))
    check("no console error from the file: URL", console_problem(driver.get_log("browser")))
    # A broken cache picked next: its error, and nothing of the earlier load on show.
    driver.find_element(By.ID, "cache-file").send_keys(os.path.join(site, "bad", "truncated.json"))
    state = state_is(driver, "error", "ready")
    text = driver.find_element(By.ID, "error").text
    check("a broken cache picked after a good one: its error, no rows left",
          None if state == "error" and "truncated.json: not valid JSON" in text
          and not driver.find_element(By.ID, "sequence-table").is_displayed()
          and not driver.find_element(By.ID, "search").is_enabled() else f"state {state}: {text!r}")
    twin("a broken picked cache: no console error", console_problem(driver.get_log("browser")))


def make_site(tmp, cache_path):
    """The repository root's layout, with the cache chosen, in a temporary folder."""
    site = os.path.join(tmp, "site")
    os.makedirs(site)
    os.symlink(os.path.join(ROOT, "viewer"), os.path.join(site, "viewer"))
    os.symlink(os.path.join(ROOT, "assets"), os.path.join(site, "assets"))
    os.symlink(os.path.abspath(cache_path), os.path.join(site, "diversity_cache.json"))
    return site


def run(args, tmp, titles):
    cache_path, cache_what = find_cache(tmp)
    print(f"# cache: {cache_what}", flush=True)
    with open(cache_path, encoding="utf-8") as f:
        cache = json.load(f)
    big_path, big_what = viewer_by_start.big_binary_cache(tmp)
    print(f"# binary cache: {big_what}", flush=True)
    site = make_site(tmp, cache_path)
    broken = bad_variants(site, cache, len(titles))
    server, plain = Server(site, RangeHandler), Server(site, PlainHandler)
    driver = browser(os.path.join(tmp, "profile"))
    try:
        other = check_poems_page(driver, server.base, cache, titles, args)
        if other is None:
            return
        check_partial_and_broken(driver, server.base, cache, titles, broken)
        check_file_url(driver, cache_path, site, cache, titles, other)
        t0 = time.time()
        viewer_by_start.run_all(driver, ROOT, site, server, plain, big_path)
        print(f"# the by-start checks: {time.time() - t0:.1f} s", flush=True)
    except Exception:  # a timeout or a missing element: a failure, reported as one
        page = body(driver)
        not_ok("the test ran to its end", f"at {driver.current_url}, state {page.get_attribute('data-state')}: "
               f"{page.text[:300]}\n{traceback.format_exc()}")
    finally:
        driver.quit()
        server.close()
        plain.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--screenshot", help="also write the README's picture here")
    args = ap.parse_args()
    with open(os.path.join(ROOT, TABLE), encoding="utf-8") as f:
        titles = json.load(f)["titles"]
    with tempfile.TemporaryDirectory(prefix="viewer_test.") as tmp:
        run(args, tmp, titles)
    print(f"{counts['passed']} passed, {counts['failed']} failed")


if __name__ == "__main__":
    started = time.time()
    main()
    print(f"# {time.time() - started:.1f} s")
    sys.exit(1 if counts["failed"] or not counts["passed"] else 0)
