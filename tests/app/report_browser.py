#!/usr/bin/env python3
"""The HTML report in a real browser (issue 12): trains two tiny runs on a tiny
synth corpus (the semi-CRF and the linear CRF, K=1), checks that `train` wrote
RUN_DIR/report.html, writes `timitseg report` over them plus a third run folder
with a missing metric and no best checkpoint, loads the page in headless
Chromium and checks: no console message, a screenshot that is not blank
(decoded here: PNG chunks, zlib, the five PNG filters), and the DOM: every plot's
SVG with its data (a curve has as many points as its run has epochs, the
confusion heat map 39x39 cells, 39 duration panels, the drawn utterances with
one segment bar per segment), "n/a" where a value is missing, never "nan", no
script and nothing fetched from the network.

Usage: report_browser.py TIMITSEG_BINARY. Exit 77 (skipped) without chromium."""
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

SKIP = 77


def run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(args)} (exit {p.returncode})\n{p.stdout}\n{p.stderr}")
    return p


def png_pixels(path):
    """(width, height, rows of bytes) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    at, idat, w = 8, b"", None
    while at < len(data):
        (n,) = struct.unpack(">I", data[at:at + 4])
        typ, body = data[at + 4:at + 8], data[at + 8:at + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, f"unexpected PNG format {depth} {ctype}"
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        at += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


class Dom(html.parser.HTMLParser):
    """Elements as (tag, attrs, parent svg id, text) in document order."""

    def __init__(self):
        super().__init__()
        self.elems, self.stack, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        svg = next((s for s in reversed(self.stack) if s is not None), None)
        if tag == "svg":
            self.stack.append(a.get("id") or a.get("data-phone") or "svg")
        elif tag not in ("rect", "circle", "line", "polyline", "image", "br", "meta"):
            self.stack.append(None)
        self.elems.append((tag, a, svg))

    def handle_endtag(self, tag):
        if tag not in ("rect", "circle", "line", "polyline", "image", "br", "meta") and self.stack:
            self.stack.pop()

    def handle_data(self, d):
        self.text.append(d)


def check(cond, msg):
    if not cond:
        sys.exit("FAILED: " + msg)


def main():
    binary = sys.argv[1]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("report_browser: skipped: chromium not installed (Debian package `chromium`, scripts/setup.sh)")
        return SKIP
    tmp = tempfile.mkdtemp(prefix="timitseg_report_browser_")
    try:
        os.chdir(tmp)
        run([binary, "synth", "--out", "synth", "--speakers", "6", "--utterances-per-speaker", "4", "--seed", "5"])
        run([binary, "prepare", "--timit", "synth", "--out", "work"])
        with open("tiny.yaml", "w") as f:
            f.write(f"data:\n  workdir: {tmp}/work\nmodel:\n  hidden_dim: 16\n  num_layers: 1\n"
                    "crf:\n  max_duration: 12\ntrain:\n  epochs: 3\n  batch_size: 4\n  lr: 0.01\n  seed: 3\n"
                    f"  threads: 2\n  run_dir: {tmp}/semi\n")
        run([binary, "train", "--config", "tiny.yaml"])
        run([binary, "train", "--config", "tiny.yaml", "--set", f"train.run_dir={tmp}/linear", "--set",
             "crf.max_duration=1", "--set", "train.epochs=2"])
        epochs = {"semi": 3, "linear": 2}
        # train refreshed RUN_DIR/report.html: its curves hold every epoch
        own = open("semi/report.html").read()
        m = re.search(r'<svg[^>]*id="plot-train-loss".*?</svg>', own)
        check(m and 'data-points="3"' in m.group(0), "semi/report.html: train-loss curve without 3 points")
        # a third run: a copy of semi without best.safetensors and without "lr" in epoch 2
        shutil.copytree("semi", "gappy")
        os.remove("gappy/checkpoints/best.safetensors")
        lines = [json.loads(l) for l in open("gappy/metrics.jsonl") if l.strip()]
        del lines[1]["lr"]
        with open("gappy/metrics.jsonl", "w") as f:
            f.write("".join(json.dumps(l) + "\n" for l in lines))
        p = run([binary, "report", "semi", "linear", "gappy", "--out", "report.html", "--threads", "2"])
        page = os.path.join(tmp, "report.html")
        check(p.stdout.strip() == page, f"report printed {p.stdout!r}, expected the path {page}")
        src = open(page).read()
        check("<script" not in src.lower(), "the report holds a script")
        check(not re.search(r'(src|href)="(https?:)?//', src), "the report fetches something from the network")
        check("@import" not in src and "url(" not in src, "the report's CSS loads something")
        # the metrics table beside "Boundary F1 against tolerance": tolerances 0..5, then the field's
        # metrics at 20 ms (= 2 frames of the 10 ms features: F1 at 20 ms equals F1 at tolerance 2),
        # PER, segment F1, frame accuracy; n/a for the run without a best checkpoint
        sec = src[src.index('id="tolerance"'):]
        sec = sec[:sec.index("<h2")] if "<h2" in sec else sec
        heads = re.findall(r"<th>([^<]*)</th>", sec)
        check(heads == ["run", "0", "1", "2", "3", "4", "5", "P 20 ms", "R 20 ms", "F1 20 ms", "R-value 20 ms",
                        "PER", "segment F1", "frame accuracy"], f"metrics table header {heads}")
        check("2 frames" in sec, "the tolerance text does not say 20 ms = 2 frames")
        rows = {m.group(1): re.findall(r"<td>([^<]*)</td>", m.group(2))
                for m in re.finditer(r"<tr><td>([^<]*)</td>((?:<td>[^<]*</td>)+)</tr>", sec)}
        check(sorted(rows) == ["gappy", "linear", "semi"], f"metrics table rows {sorted(rows)}")
        for name in ("semi", "linear"):
            cells = rows[name]
            check(len(cells) == 13 and all(c.endswith(" %") for c in cells), f"{name}: metrics cells {cells}")
            check(cells[8] == cells[2], f"{name}: F1 at 20 ms {cells[8]} is not F1 at tolerance 2 {cells[2]}")
            check(float(cells[9].split()[0]) <= 100, f"{name}: R-value {cells[9]} above 100 %")
        check(rows["gappy"] == ["n/a"] * 13, f"gappy: metrics cells {rows['gappy']}")

        # headless Chromium: screenshot and console
        url = "file://" + page
        shot = os.path.join(tmp, "shot.png")
        base = [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--hide-scrollbars",
                f"--user-data-dir={tmp}/profile"]
        s = subprocess.run(base + [f"--screenshot={shot}", "--window-size=1280,4000", "--enable-logging=stderr",
                                   "--v=0", url], capture_output=True, text=True, timeout=120)
        check(s.returncode == 0 and os.path.exists(shot), f"chromium screenshot failed:\n{s.stderr[-3000:]}")
        console = [l for l in s.stderr.splitlines() if ":CONSOLE" in l]
        check(not console, "console messages:\n" + "\n".join(console))
        w, h, bpp, rows = png_pixels(shot)
        check((w, h) == (1280, 4000), f"screenshot is {w}x{h}")
        colours, non_white = set(), 0
        for row in rows[::4]:
            for x in range(0, w * bpp, 4 * bpp):
                px = row[x:x + 3]
                colours.add(px)
                non_white += px != b"\xff\xff\xff"
        total = len(rows[::4]) * len(range(0, w * bpp, 4 * bpp))
        check(len(colours) > 50, f"screenshot looks blank: {len(colours)} distinct colours")
        check(non_white > 0.05 * total, f"screenshot looks blank: {non_white}/{total} sampled pixels not white")

        # the DOM as the browser built it
        d = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
        check(d.returncode == 0 and "</html>" in d.stdout, f"chromium --dump-dom failed:\n{d.stderr[-3000:]}")
        dom = Dom()
        dom.feed(d.stdout)
        text = " ".join(dom.text)
        check(not re.search(r"\bnan\b", text, re.I), "the page shows 'nan'")
        svgs = {a.get("id"): a for t, a, _ in dom.elems if t == "svg" and a.get("id")}
        runs = ["semi", "linear", "gappy"]
        n_epochs = [3, 2, 3]
        for plot in ["plot-train-loss", "plot-dev-per", "plot-dev-boundary-f1", "plot-lr", "plot-max-transition",
                     "plot-max-duration-bias", "plot-grad-norm", "plot-frames-per-sec"]:
            check(plot in svgs, f"no <svg id={plot}>")
            polys = [a for t, a, svg in dom.elems if t == "polyline" and svg == plot and "series" in a.get("class", "")
                     and "second" not in a.get("class", "").split()]
            for i, run_name in enumerate(runs):
                pts = sum(int(a["data-points"]) for a in polys if a["data-run"] == str(i))
                want = n_epochs[i] - (1 if (plot == "plot-lr" and run_name == "gappy") else 0)
                check(pts == want, f"{plot}: run {run_name} has {pts} points, expected {want}")
                drawn = sum(len(a["points"].split()) for a in polys if a["data-run"] == str(i))
                check(drawn == want, f"{plot}: run {run_name} draws {drawn} points, expected {want}")
        # boundary F1 against tolerance 0..5 for the runs with predictions
        tol = [a for t, a, svg in dom.elems if t == "polyline" and svg == "plot-boundary-f1-tolerance"]
        check(sorted((a["data-run"], a["data-points"]) for a in tol) == [("0", "6"), ("1", "6")],
              f"boundary F1 against tolerance: {[(a['data-run'], a['data-points']) for a in tol]}")
        # confusion heat maps: 39x39 cells for the two runs with a best checkpoint, none for gappy
        for i in range(2):
            cells = [a for t, a, svg in dom.elems if t == "rect" and svg == f"plot-confusion-{i}" and a.get("class") == "cell"]
            check(len(cells) == 39 * 39, f"confusion run {i}: {len(cells)} cells")
            check(sum(int(a["data-count"]) for a in cells) > 0, f"confusion run {i}: no frame counted")
        check("plot-confusion-2" not in svgs, "a confusion matrix for the run without best.safetensors")
        # durations: 39 panels
        panels = [a for t, a, _ in dom.elems if t == "svg" and "dur" in a.get("class", "").split()]
        check(len(panels) == 39, f"{len(panels)} duration panels")
        # decoded utterances: spectrogram image, reference + one tier per run, a bar per segment
        utts = [k for k in svgs if k.startswith("utt-")]
        check(len(utts) == 3, f"{len(utts)} drawn utterances")
        for u in utts:
            imgs = [a for t, a, svg in dom.elems if t == "image" and svg == u]
            check(len(imgs) == 1 and imgs[0].get("href", "").startswith("data:image/png;base64,"), f"{u}: no spectrogram")
            tiers = [(a["data-tier"], int(a["data-segments"])) for t, a, svg in dom.elems if t == "g" and svg == u
                     and a.get("class") == "tier"]
            check([t for t, _ in tiers] == ["reference", "run-0", "run-1", "run-2"], f"{u}: tiers {tiers}")
            check(all(n > 0 for _, n in tiers[:3]) and tiers[3][1] == 0, f"{u}: segments per tier {tiers}")
            segs = [a for t, a, svg in dom.elems if t == "rect" and svg == u and a.get("class") == "seg"]
            check(len(segs) == sum(n for _, n in tiers), f"{u}: {len(segs)} bars for {tiers}")
        # environment: one block per run with the CRF backend
        for i in range(3):
            check(any(t == "div" and a.get("id") == f"env-{i}" for t, a, _ in dom.elems), f"no environment of run {i}")
        check("n/a" in text, "no n/a for the missing values")
        print(f"OK: report of {len(runs)} runs, {len(colours)} colours in the screenshot, {len(dom.elems)} elements")
        return 0
    finally:
        os.chdir("/")
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
