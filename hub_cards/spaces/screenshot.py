"""A screenshot of the routing explorer for the docs (`make screenshot`): the app launched locally, the page taken with
headless Chromium (Debian's `chromium`; `apt-get install chromium`).

    python hub_cards/spaces/screenshot.py [--out docs/images/routing_explorer.png] [--chromium /usr/bin/chromium]

The page draws its first input and computes its maps when it loads; Chromium's virtual-time budget lets that finish
before the picture is taken. The flags keep Chromium off the network (it would try Google's hosts at every start).
"""

import argparse
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "images" / "routing_explorer.png"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--window_size", default="1400,1450")
    parser.add_argument("--budget_ms", type=int, default=60_000, help="Chromium's virtual-time budget")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.chromium):
        sys.exit(f"screenshot.py: error: no Chromium at {args.chromium} (apt-get install chromium)")

    # the Space's app.py is a script, not a module of a package: load it by path
    spec = importlib.util.spec_from_file_location("ndr_routing_app", HERE / "ndr-routing" / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)

    port = free_port()
    app.demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=2)
            break
        except OSError:
            time.sleep(0.2)
    app.load(app.MODELS[0])  # load the first model before the page asks for it, so the page is drawn in time
    with tempfile.TemporaryDirectory() as profile:
        command = [
            args.chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={args.window_size}",
            f"--virtual-time-budget={args.budget_ms}",
            f"--screenshot={os.path.abspath(args.out)}",
            url,
        ]
        started = time.time()
        subprocess.run(command, check=True, capture_output=True, timeout=300)
    app.demo.close()
    print(f"wrote {args.out} ({os.path.getsize(args.out):,} bytes) in {time.time() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
