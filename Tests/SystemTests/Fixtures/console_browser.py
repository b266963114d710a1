#!/usr/bin/env python3
"""The web console in headless Chromium (docs/console.md, "Tests").

    console_browser.py --port PORT --admin KEY [--screenshots DIR]

Drives a running `roost serve` through its console with Selenium: sign in
with the operator key and with app keys, search a person and read a device's
history, watch a registration made through the API appear under Changes,
see 401 after a revocation and 403 naming devices:read, sign out and find no
trace of the key in the browser's storage; axe-core 4.4 (the axe.min.js that
axe-core-python bundles: nothing is fetched) on every view must find no
serious or critical violation. Waits on conditions, never sleeps. Exit 0 when every
flow passed; otherwise the failed step on stderr and exit 1.
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

from axe_core_python.base import AXE_SCRIPT
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

WAIT_SECONDS = 15
TOKEN_OLD_PHONE = "6f1c9a2e4b7d0835c2e9f14a7b3d6e0c58a1f2b9d4e7c03a6b8f1e2d5c9a4b70"
TOKEN_NEW_PHONE = "fcm-token-user-42-new-phone-0123456789abcdef"
TOKEN_LIVE = "9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f009f8a7b6c5d4e3f2a1b0c9d8e"


class Server:
    """The API through plain HTTP, for the set-up the browser then reads."""

    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def call(self, method, path, key, body=None, expect=(200, 201), headers=None, answer_headers=None):
        """The JSON answer; `headers` are sent, and the answer's headers are
        stored into the dict `answer_headers` when one is given."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {key}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, text, received = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, text, received = error.code, error.read(), error.headers
        if status not in expect:
            raise AssertionError(f"{method} {path}: {status} {text[:300]!r}")
        if answer_headers is not None:
            answer_headers.update({name.lower(): value for name, value in received.items()})
        return json.loads(text) if text else None


class Console:
    def __init__(self, port, screenshots):
        options = webdriver.ChromeOptions()
        for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,1000", "--disable-extensions", "--no-first-run",
                         "--password-store=basic"):
            options.add_argument(argument)
        options.binary_location = os.environ.get("ROOST_TEST_CHROMIUM", "/usr/bin/chromium")
        service = Service(executable_path=os.environ.get("ROOST_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"))
        self.driver = webdriver.Chrome(options=options, service=service)
        self.url = f"http://127.0.0.1:{port}/console"
        self.screenshots = screenshots
        self.checked = []

    def wait(self, condition, what):
        try:
            begun = time.monotonic()
            # A view that renders again (Metrics every few seconds, Changes on each
            # change) replaces the element a condition was reading: look again.
            found = WebDriverWait(self.driver, WAIT_SECONDS, poll_frequency=0.05,
                                  ignored_exceptions=(NoSuchElementException,
                                                      StaleElementReferenceException)).until(condition)
            if time.monotonic() - begun > 1:
                print(f"slow wait ({time.monotonic() - begun:.1f} s): {what}", file=sys.stderr)
            return found
        except Exception as error:
            self.shot("failure")
            raise AssertionError(f"waited {WAIT_SECONDS} s for {what}: {type(error).__name__}; page says: "
                                 f"{self.text()[:800]!r}") from None

    def text(self):
        return self.driver.find_element(By.TAG_NAME, "body").text

    def has_text(self, text, what=None):
        self.wait(lambda d: text in d.find_element(By.TAG_NAME, "body").text, what or repr(text))

    def shot(self, name):
        if self.screenshots:
            self.driver.save_screenshot(os.path.join(self.screenshots, f"{name}.png"))

    def accessible(self, view):
        """axe-core on the page as it is: no serious or critical violation."""
        self.driver.execute_script(AXE_SCRIPT)
        results = self.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "axe.run(document, {resultTypes: ['violations']}).then(done, (e) => done({error: String(e)}));")
        if "error" in results:
            raise AssertionError(f"axe on {view} failed to run: {results['error']}")
        bad = [v for v in results["violations"] if v.get("impact") in ("serious", "critical")]
        if bad:
            detail = "; ".join(f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}" for v in bad)
            raise AssertionError(f"axe on {view}: {detail}")
        self.checked.append(view)
        self.shot(view)

    def open(self):
        self.driver.get(self.url)
        self.wait(EC.element_to_be_clickable((By.ID, "api-key")), "the API key field")

    def sign_in(self, key):
        field = self.wait(EC.element_to_be_clickable((By.ID, "api-key")), "the API key field")
        label = self.driver.find_element(By.CSS_SELECTOR, "label[for='api-key']").text
        assert label == "API key", f"the key field is labelled {label!r}"
        assert field.get_attribute("type") == "password", "the key field is not a password field"
        field.send_keys(key)
        field.submit()
        self.wait(lambda d: d.find_element(By.ID, "signout").is_displayed()
                  or d.find_elements(By.CSS_SELECTOR, "#notice .error"), "signed in or refused")

    def press(self, key):
        ActionChains(self.driver).send_keys(key).perform()

    def tab_to(self, matches, what, presses_max=80):
        """Presses Tab until the focused element `matches` (it may have the focus already); it must
        show a focus ring (a computed outline)."""
        for _ in range(presses_max + 1):
            element = self.driver.switch_to.active_element
            if matches(element):
                style, width = self.driver.execute_script(
                    "const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth];")
                assert style != "none" and width not in ("", "0px"), f"{what} has no visible focus: {style} {width}"
                return element
            self.press(Keys.TAB)
        raise AssertionError(f"{what} is not reachable with Tab in {presses_max} presses")

    def keyboard_sign_in(self, key):
        """Signs in with the keyboard alone: Tab to the API key field, type, Enter."""
        self.wait(EC.element_to_be_clickable((By.ID, "api-key")), "the API key field")
        self.driver.execute_script("document.activeElement && document.activeElement.blur()")
        self.tab_to(lambda e: e.get_attribute("id") == "api-key", "the API key field")
        self.press(key)
        self.press(Keys.ENTER)
        self.wait(lambda d: d.find_element(By.ID, "signout").is_displayed()
                  or d.find_elements(By.CSS_SELECTOR, "#notice .error"), "signed in or refused")

    def sign_out(self):
        self.driver.find_element(By.ID, "signout").click()
        self.wait(EC.visibility_of_element_located((By.ID, "api-key")), "the sign-in form again")

    def nav(self):
        return [a.text for a in self.driver.find_elements(By.CSS_SELECTOR, "#nav-list a")]

    def go(self, name):
        self.driver.find_element(By.LINK_TEXT, name).click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#view h1")
                  and d.find_element(By.CSS_SELECTOR, "#view h1").text.startswith(name), f"the {name} view")

    def no_trace_of(self, secrets):
        """The browser's storage, cookies, URL and DOM hold none of the keys."""
        storage = self.driver.execute_script(
            "const all = {};"
            "for (const s of [localStorage, sessionStorage]) for (let i = 0; i < s.length; i++) {"
            " const k = s.key(i); all[k] = s.getItem(k); }"
            "return JSON.stringify({all, local: localStorage.length, session: sessionStorage.length,"
            " cookie: document.cookie, href: location.href, html: document.documentElement.outerHTML,"
            " fields: [...document.querySelectorAll('input, textarea')].map((e) => e.value)});")
        found = json.loads(storage)
        assert found["local"] == 0 and found["session"] == 0, f"storage holds {found['all']}"
        assert found["cookie"] == "", f"cookies: {found['cookie']!r}"
        assert self.driver.get_cookies() == [], f"cookies: {self.driver.get_cookies()}"
        for secret in secrets:
            for place in ("href", "html"):
                assert secret not in found[place], f"a key is in the page's {place}"
            assert secret not in found["fields"], "a key is left in a form field"


def search_for(console, text):
    search = console.driver.find_element(By.ID, "search")
    search.clear()
    search.send_keys(text)
    search.submit()


def register(server, key, token, person, platform="ios", expect=(200, 201)):
    body = {"platform": platform, "token": token, "external_id": person, "app_version": "2.4.0"}
    return server.call("POST", "/v1/devices", key, body, expect)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--admin", required=True)
    parser.add_argument("--screenshots")
    parser.add_argument("--cluster-view", action="store_true",
                        help="the server is a cluster's leader (spec §13): check the Cluster view only")
    parser.add_argument("--follower-port", type=int,
                        help="with --cluster-view: a follower of that leader, where a device change is refused")
    args = parser.parse_args()
    if args.screenshots:
        os.makedirs(args.screenshots, exist_ok=True)
    started = time.monotonic()
    if args.cluster_view:
        return cluster_view(args, started)
    server = Server(args.port)
    admin = args.admin
    app = server.call("POST", "/v1/apps", admin, {"name": "Example"})["id"]
    everything = ["devices:write", "devices:read", "devices:delete", "people:write", "setup:write"]

    def key(capabilities, label):
        return server.call("POST", f"/v1/apps/{app}/keys", admin,
                           {"kind": "secret", "mode": "live", "capabilities": capabilities, "label": label})

    full = key(everything, "backend")["key"]
    no_read = key(["devices:write"], "writer only")["key"]
    doomed = key(everything, "to revoke")
    # user_42's old phone: first user_7's, then theirs, then APNs said Unregistered.
    old_phone = register(server, full, TOKEN_OLD_PHONE, "user_7")["id"]
    register(server, full, TOKEN_OLD_PHONE, "user_42")
    server.call("POST", "/v1/feedback", full, {"provider": "apns", "token": TOKEN_OLD_PHONE, "reason": "Unregistered"})
    register(server, full, TOKEN_NEW_PHONE, "user_42", platform="android")

    console = Console(args.port, args.screenshots)
    try:
        console.open()
        console.accessible("sign-in")

        # A wrong key: said in words, still signed out.
        console.sign_in("sk_live_" + "0" * 48)
        console.has_text("401", "the refusal of a wrong key")
        assert not console.driver.find_element(By.ID, "signout").is_displayed(), "signed in with a wrong key"

        # The operator key: Apps, Overview, Metrics; no Cluster without cluster mode.
        console.sign_in(admin)
        console.has_text("Example", "the app in Apps")
        assert console.nav() == ["Apps", "Overview", "Metrics"], console.nav()
        console.driver.find_element(By.LINK_TEXT, "Keys of Example").click()
        console.has_text("to revoke", "the keys of the app")
        console.has_text("devices:delete, devices:read, devices:write", "the capabilities of a key")
        console.accessible("apps")
        console.driver.find_element(By.ID, "key-label").send_keys("made in the console")
        console.driver.find_element(By.ID, "cap-devices-read").click()
        console.driver.find_element(By.CSS_SELECTOR, ".key-form button[type='submit']").click()
        value = console.wait(EC.visibility_of_element_located((By.ID, "created-key-value")), "the new key")
        assert value.get_attribute("value").startswith("sk_live_"), "the new key is not shown"
        console.has_text("shown this once", "the once-only warning")
        console.wait(EC.element_to_be_clickable((By.XPATH, "//button[text()='Copy key']")), "the copy button")
        console.accessible("apps-key-created")
        created = value.get_attribute("value")
        # The new key revoked from the console by keyboard alone: Tab to its Revoke button, Enter,
        # then the confirmation's button; the API then refuses the key (401).
        console.tab_to(lambda e: e.get_attribute("aria-label") == "Revoke key made in the console",
                       "the new key's Revoke button")
        console.press(Keys.ENTER)
        console.has_text("Revoke key made in the console? Every request with it will be refused (401).",
                         "the revocation's confirmation")
        console.tab_to(lambda e: e.text == "Revoke key", "the confirmation's Revoke key button")
        console.press(Keys.ENTER)
        console.has_text("Key made in the console revoked.", "the revocation said")
        server.call("GET", "/v1/stats", created, expect=(401,))
        console.go("Overview")
        console.has_text("Devices per app and mode", "the operator's overview chart")
        console.accessible("overview-operator")
        console.go("Metrics")
        console.has_text("Requests since start", "the metrics")
        console.wait(lambda d: re.fullmatch(r"\d+\.\d\d", d.find_element(
            By.XPATH, "//dt[text()='Requests per second']/following-sibling::dd[1]").text), "a requests/s reading")
        console.accessible("metrics")
        console.sign_out()
        console.no_trace_of([admin, created])

        # An app key: its overview, a person, a device and its history.
        console.sign_in(full)
        assert console.nav() == ["Overview", "Changes", "Inactivity"], console.nav()
        console.has_text("Devices by platform", "the app's overview")
        console.has_text("Invalidated", "the state counts")
        console.accessible("overview")
        search = console.driver.find_element(By.ID, "search")
        assert console.driver.find_element(By.CSS_SELECTOR, "label[for='search']").text == "Search"
        search.send_keys("user_42")
        search.submit()
        console.has_text("Person user_42", "the person")
        console.has_text(old_phone, "the old phone among the person's devices")
        console.accessible("person")
        console.driver.find_element(By.LINK_TEXT, old_phone).click()
        console.has_text("Moved from person user_7 to person user_42", "the move as a sentence")
        console.has_text("Invalidated (Unregistered: the push service said the app is no longer installed",
                         "why the old phone stopped getting pushes")
        assert TOKEN_OLD_PHONE not in console.text(), "the token is shown before Reveal"
        console.accessible("device")
        console.driver.find_element(By.XPATH, "//button[text()='Reveal']").click()
        console.has_text(TOKEN_OLD_PHONE, "the revealed token")

        # Changes: a registration made through the API appears while we watch.
        console.go("Changes")
        console.has_text("Live: waiting for changes.", "the feed to reach its end")
        fresh = register(server, full, TOKEN_LIVE, "user_99")["id"]
        console.has_text(f"{fresh}: ios, person user_99", "the new registration under Changes")
        console.accessible("changes")
        pause = console.driver.find_element(By.XPATH, "//button[text()='Pause']")
        pause.click()
        console.has_text("Paused.", "the paused feed")
        assert pause.get_attribute("aria-pressed") == "true"

        console.go("Inactivity")
        console.has_text("have not registered for more than 90 days", "the inactivity preview")
        console.accessible("inactivity")

        # The registration seen under Changes, changed and then deleted from its page, each with If-Match.
        search_for(console, "user_99")
        console.has_text("Person user_99", "the person registered under Changes")
        console.driver.find_element(By.LINK_TEXT, fresh).click()
        tags = console.wait(EC.element_to_be_clickable((By.ID, "device-tags")), "the tags field")
        tags.clear()
        tags.send_keys('{"plan": "pro"}')
        console.driver.find_element(By.XPATH, "//button[text()='Save changes']").click()
        console.has_text("Saved: version 2.", "the saved change")
        assert server.call("GET", f"/v1/devices/{fresh}", full)["tags"] == {"plan": "pro"}, "the tags were not saved"
        console.driver.find_element(By.XPATH, "//button[text()='Delete device…']").click()
        console.has_text(f"Delete device {fresh}?", "the confirmation's question")
        console.accessible("device-delete-confirm")
        console.wait(EC.element_to_be_clickable((By.XPATH, "//dialog//button[text()='Delete device'] | "
                                                           "//*[@role='dialog']//button[text()='Delete device']")),
                     "the confirmation's button").click()
        console.has_text(f"Device {fresh} was deleted.", "the deletion")
        server.call("GET", f"/v1/devices/{fresh}", full, expect=(404,))

        # Nobody by that id: said in words.
        search_for(console, "nobody_here")
        console.has_text('Nobody with external id "nobody_here"', "the 404 in words")
        console.accessible("not-found")

        # The browser offline: a network failure, said in words; back online, the view loads.
        console.driver.execute_cdp_cmd("Network.enable", {})
        offline = {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
        console.driver.execute_cdp_cmd("Network.emulateNetworkConditions", offline)
        console.driver.find_element(By.LINK_TEXT, "Overview").click()
        console.has_text("The server could not be reached (network failure)", "the network failure in words")
        console.accessible("network-failure")
        console.driver.execute_cdp_cmd("Network.emulateNetworkConditions", {**offline, "offline": False})
        console.go("Inactivity")
        console.has_text("have not registered for more than 90 days", "the view once back online")
        console.sign_out()
        console.no_trace_of([full])

        # A key over its rate limit: 429 with the wait, said in words.
        limited = server.call("POST", f"/v1/apps/{app}/keys", admin,
                              {"kind": "secret", "mode": "live", "capabilities": ["devices:read"], "label": "slow",
                               "rate_limit_per_second": 1})["key"]
        console.sign_in(limited)
        console.has_text("Too many requests (429): this key is over its rate limit. Wait", "the 429 with its wait")
        console.accessible("rate-limited")
        if console.driver.find_element(By.ID, "signout").is_displayed():
            console.sign_out()
        console.no_trace_of([limited])

        # A key revoked while signed in: the console says 401.
        console.sign_in(doomed["key"])
        console.has_text("Devices by platform", "the overview of the key to revoke")
        server.call("DELETE", f"/v1/apps/{app}/keys/{doomed['id']}", admin)
        console.go("Inactivity")
        console.has_text("401 unauthorized", "the 401 after the revocation")
        console.accessible("revoked")
        console.sign_out()

        # A key without devices:read, signed in with the keyboard alone: the capability is named.
        console.keyboard_sign_in(no_read)
        console.has_text("403", "the 403")
        console.has_text("devices:read", "the missing capability named")
        console.accessible("forbidden")
        console.sign_out()
        console.no_trace_of([admin, full, no_read, doomed["key"], created, limited])
    finally:
        console.driver.quit()
    print(json.dumps({"views_checked_by_axe": console.checked, "seconds": round(time.monotonic() - started, 1)}))


def cluster_view(args, started):
    """A lone node of a cluster: the operator sees Cluster in the navigation, the
    node's role, epoch, leader and lag, and the members table."""
    server = Server(args.port)
    app = server.call("POST", "/v1/apps", args.admin, {"name": "Clustered"})["id"]
    key = server.call("POST", f"/v1/apps/{app}/keys", args.admin, {
        "kind": "secret", "mode": "live", "capabilities": ["devices:write", "devices:read", "devices:delete"],
        "label": "cluster"})["key"]
    written = {}
    device = server.call("POST", "/v1/devices", key, {
        "platform": "ios", "token": TOKEN_LIVE, "external_id": "user_c", "app_version": "2.4.0"},
        answer_headers=written)["id"]
    console = Console(args.port, args.screenshots)
    try:
        console.open()
        console.sign_in(args.admin)
        console.wait(lambda d: "Cluster" in [a.text for a in d.find_elements(By.CSS_SELECTOR, "#nav-list a")],
                     "Cluster in the navigation")
        assert console.nav() == ["Apps", "Overview", "Metrics", "Cluster"], console.nav()
        console.go("Cluster")
        console.has_text("(leader)", "this node's role")
        console.has_text("Members", "the members table")
        console.wait(lambda d: "ms ago" in d.find_element(By.TAG_NAME, "body").text, "a member's last sighting")
        console.accessible("cluster")
        console.sign_out()
        console.no_trace_of([args.admin])
        if args.follower_port:
            # On a follower, a device's change is refused, naming the leader (spec §13.4).
            # The follower waits until it has applied the registration (spec §13.3).
            follower = Server(args.follower_port)
            shown = follower.call("GET", f"/v1/devices/{device}", key,
                                  headers={"Roost-Min-Position": written["roost-position"]})
            assert shown["id"] == device, shown
            console.driver.get(f"http://127.0.0.1:{args.follower_port}/console")
            console.wait(EC.element_to_be_clickable((By.ID, "api-key")), "the follower's API key field")
            console.sign_in(key)
            search = console.wait(EC.element_to_be_clickable((By.ID, "search")), "the search field")
            search.send_keys("user_c")
            search.submit()
            console.has_text("Person user_c", "the person on the follower")
            console.driver.find_element(By.LINK_TEXT, device).click()
            console.has_text("History", "the device page on the follower")
            console.driver.find_element(By.XPATH, "//button[text()='Save changes']").click()
            console.has_text(f"This node is not the leader (503 not_leader): writes go to the leader at "
                             f"http://127.0.0.1:{args.port}.", "the refusal naming the leader")
            console.accessible("cluster-follower-refusal")
            console.sign_out()
            console.no_trace_of([key])
    finally:
        console.driver.quit()
    print(json.dumps({"views_checked_by_axe": console.checked, "seconds": round(time.monotonic() - started, 1)}))


if __name__ == "__main__":
    try:
        main()
    except AssertionError as failure:
        import traceback
        step = traceback.extract_tb(failure.__traceback__)[-1]
        print(f"console browser test failed at line {step.lineno} ({step.line}): {failure}", file=sys.stderr)
        sys.exit(1)
