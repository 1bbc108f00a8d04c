"""Shared by the viewer's tests (tests/viewer_test.py): the TAP-like
counters, a local web server that answers range requests (or, for a twin,
one that ignores them) and logs what it sent, headless Chromium, and the page
actions."""
import functools
import http.server
import os
import threading
from collections import namedtuple

from RangeHTTPServer import RangeRequestHandler
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

WAIT_S = int(os.environ.get("VIEWER_WAIT_S", "30"))

counts = {"passed": 0, "failed": 0}


def ok(name):
    counts["passed"] += 1
    print(f"ok - {name}", flush=True)


def not_ok(name, detail=""):
    counts["failed"] += 1
    print(f"not ok - {name}", flush=True)
    for line in str(detail).splitlines():
        print(f"    {line}")


def check(name, problem):
    """`problem` is None (pass) or what went wrong."""
    if problem is None:
        ok(name)
    else:
        not_ok(name, problem)


def twin(name, problem):
    """A twin passes when the check it mirrors reports a problem."""
    if problem is not None:
        ok(f"{name} (twin: caught: {str(problem).splitlines()[0][:100]})")
    else:
        not_ok(f"{name} (twin: the wrong variant passed the check)")


# --- the web server ------------------------------------------------------------

Request = namedtuple("Request", "path host range status sent")


class _Counted:
    """A file that counts the bytes written through it."""

    def __init__(self, out, handler):
        self.out, self.handler = out, handler

    def write(self, data):
        self.handler.sent += len(data)
        return self.out.write(data)


class _Logged:
    """Records every request: its path, Host and Range headers, the status and
    the body bytes sent; prints nothing."""

    def do_GET(self):
        self.sent, self.status = 0, None
        try:
            super().do_GET()
        finally:
            self.server.log.append(Request(self.path, self.headers.get("Host"), self.headers.get("Range"),
                                           self.status, self.sent))

    def send_response(self, code, message=None):
        self.status = code
        super().send_response(code, message)

    def copyfile(self, source, outputfile):
        super().copyfile(source, _Counted(outputfile, self))

    def log_message(self, *args):
        pass


class RangeHandler(_Logged, RangeRequestHandler):
    """Debian's python3-rangehttpserver: SimpleHTTPRequestHandler plus Range."""


class PlainHandler(_Logged, http.server.SimpleHTTPRequestHandler):
    """Python's own, which ignores Range: every read is the whole file."""


class Server:
    """Serves `site` on a free localhost port, in a thread; `log` lists the requests."""

    def __init__(self, site, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=site))
        self.httpd.log = []
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def log(self):
        return self.httpd.log

    def requests_for(self, path, since=0):
        return [r for r in self.log[since:] if r.path.split("?")[0] == path]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


# --- the browser -----------------------------------------------------------------

def browser(profile):
    opts = Options()
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
                 "--window-size=1000,760", f"--user-data-dir={profile}"]:
        opts.add_argument(flag)
    opts.binary_location = "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def console_problem(entries):
    severe = [e for e in entries if e.get("level") == "SEVERE"]
    if severe:
        return "\n".join(e.get("message", "") for e in severe)
    return None


def body(driver):
    return driver.find_element(By.TAG_NAME, "body")


def state_is(driver, *states):
    WebDriverWait(driver, WAIT_S).until(lambda d: body(d).get_attribute("data-state") in states)
    return body(driver).get_attribute("data-state")


def open_page(driver, url):
    """Loads `url` and waits until it is ready or has failed; returns the state."""
    driver.get(url)
    return state_is(driver, "ready", "error", "pick")


def error_text(driver):
    return driver.find_element(By.ID, "error").text


def one_line_error(driver, state, words):
    """None when the page failed with one line holding every word."""
    text = error_text(driver)
    missing = [w for w in words if w not in text]
    if state == "error" and not missing and "\n" not in text:
        return None
    return f"state {state}, error {text!r}, missing {missing}"


def shown_items(driver):
    """The rows on show: (position, item) from the row's attributes, whatever the columns."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#sequence tr")
    return [(int(r.find_element(By.CSS_SELECTOR, ".pos").get_attribute("textContent")), int(r.get_attribute("data-item")))
            for r in rows]


def items_problem(driver, expected):
    """None when the page is ready and shows exactly the sequence `expected`."""
    state = body(driver).get_attribute("data-state")
    if state != "ready":
        return f"state {state}: {error_text(driver)!r}"
    shown = shown_items(driver)
    want = [(k + 1, int(i)) for k, i in enumerate(expected[:200])]
    if shown != want:
        return f"shown {shown[:8]}...\nexpected {want[:8]}..."
    return None


def wait_shown(driver, item):
    WebDriverWait(driver, WAIT_S).until(
        lambda d: body(d).get_attribute("data-shown") == str(item) or body(d).get_attribute("data-state") == "error")
