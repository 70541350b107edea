"""Renders the HTML reports in headless Chromium and checks them through the DOM.

gpipe-opt --report draws the predicted step; gpipe-run --report draws it
beside a measured step. Both pages are opened in a real browser with a
script that reads every SVG element's laid-out geometry; the checks:
title from the model file, a time axis with increasing ticks, a legend
with a swatch per kind drawn (recompute only when compiled with it),
boxes where their data says (x from the begin time, width from the
duration), inside the plot, one after the other within a row, the right
number of forward/backward boxes per stage, and stages sharing a core
never computing at the same time in the prediction.

    report_browser.py GPIPE_OPT GPIPE_RUN WORK_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch

M = 4
COMPUTE = {"forward", "backward", "recompute", "send", "optimizer"}

PROBE = """<script>
window.addEventListener('load', () => {
  const out = [];
  for (const svg of document.querySelectorAll('svg.timeline')) {
    const origin = svg.getBoundingClientRect();
    const rel = r => ({x: r.left - origin.left, w: r.width});
    out.push({
      axis: +svg.dataset.axisSeconds, seconds: +svg.dataset.seconds,
      left: +svg.dataset.plotLeft, width: +svg.dataset.plotWidth,
      rows: [...svg.querySelectorAll('text.row-label')].map(t => t.textContent),
      ticks: [...svg.querySelectorAll('text.tick')].map(
          t => ({text: t.textContent, ...rel(t.getBoundingClientRect())})),
      legend: [...svg.querySelectorAll('text.legend')].map(t => t.textContent),
      swatches: svg.querySelectorAll('rect.swatch').length,
      boxes: [...svg.querySelectorAll('rect.box')].map(b => ({
        kind: b.classList[1], row: +b.dataset.row, mb: +b.dataset.microBatch,
        begin: +b.dataset.begin, end: +b.dataset.end,
        ...rel(b.getBoundingClientRect())})),
    });
  }
  const pre = document.createElement('pre');
  pre.id = 'dom-check';
  pre.textContent = JSON.stringify({title: document.title,
                                    h1: document.querySelector('h1').textContent,
                                    timelines: out});
  document.body.appendChild(pre);
});
</script>"""


def browse(chromium, page, work):
    """The probe's findings for one page, read back from the dumped DOM."""
    probed = os.path.join(work, "probed-" + os.path.basename(page))
    html = open(page).read()
    open(probed, "w").write(html.replace("</body>", PROBE + "</body>"))
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu",
         "--window-size=1100,900", "--virtual-time-budget=5000",
         "--dump-dom", "file://" + probed],
        capture_output=True, text=True, timeout=120).stdout
    m = re.search(r"<pre id=\"dom-check\">(.*?)</pre>", dom, re.S)
    if not m:
        raise RuntimeError(f"{page}: the probe did not run:\n{dom[-2000:]}")
    text = m.group(1).replace("&quot;", '"').replace("&lt;", "<") \
        .replace("&gt;", ">").replace("&amp;", "&")
    return json.loads(text)


def check_timeline(name, t, recompute, shared_rows):
    errors = []
    scale = t["width"] / t["axis"]
    left, right = t["left"], t["left"] + t["width"]
    if len(t["rows"]) != 4:
        errors.append(f"{name}: {len(t['rows'])} rows, expected 4 stages")
    ticks = t["ticks"]
    xs = [tick["x"] + tick["w"] / 2 for tick in ticks]
    if not (4 <= len(ticks) <= 11) or xs != sorted(xs) or \
            not ticks[0]["text"].startswith("0 "):
        errors.append(f"{name}: time axis ticks {[x['text'] for x in ticks]}")
    kinds = {b["kind"] for b in t["boxes"]}
    if t["swatches"] != len(kinds) or len(t["legend"]) != len(kinds):
        errors.append(f"{name}: {t['swatches']} swatches and legend "
                      f"{t['legend']} for kinds {sorted(kinds)}")
    if recompute != any("recompute" in l for l in t["legend"]):
        errors.append(f"{name}: legend {t['legend']} (recompute={recompute})")
    for row in range(4):
        boxes = sorted((b for b in t["boxes"] if b["row"] == row),
                       key=lambda b: b["begin"])
        for kind in ("forward", "backward"):
            mbs = sorted(b["mb"] for b in boxes if b["kind"] == kind)
            if mbs != list(range(M)):
                errors.append(f"{name}: row {row} {kind} micro-batches {mbs}")
        for a, b in zip(boxes, boxes[1:]):
            if b["begin"] < a["end"] - 1e-9:
                errors.append(f"{name}: row {row} boxes overlap: {a} {b}")
                break
        for b in boxes:
            x = left + b["begin"] * scale
            if abs(b["x"] - x) > 1.0 or \
                    abs(b["w"] - max((b["end"] - b["begin"]) * scale, 0.5)) > 1.0:
                errors.append(f"{name}: box {b} drawn at x={b['x']:.1f} "
                              f"w={b['w']:.1f}, expected x={x:.1f}")
                break
            if b["x"] < left - 0.5 or b["x"] + b["w"] > right + 0.5:
                errors.append(f"{name}: box {b} outside the plot")
                break
    # Stages on one core take turns: their compute never overlaps.
    for r0, r1 in shared_rows:
        a = [b for b in t["boxes"] if b["row"] == r0 and b["kind"] in COMPUTE
             and b["end"] > b["begin"]]
        c = [b for b in t["boxes"] if b["row"] == r1 and b["kind"] in COMPUTE
             and b["end"] > b["begin"]]
        for x in a:
            for y in c:
                if x["begin"] < y["end"] - 1e-9 and y["begin"] < x["end"] - 1e-9:
                    errors.append(f"{name}: rows {r0} and {r1} share a core "
                                  f"but compute together: {x} {y}")
                    break
    return errors


def main():
    gpipe_opt, gpipe_run, work = sys.argv[1:4]
    chromium = shutil.which("chromium")
    if not chromium:
        print("SKIP: no chromium (apt-get install chromium)")
        return 0
    os.makedirs(work, exist_ok=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
        torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))
    onnx_path = os.path.join(work, "four_layers.onnx")
    torch.onnx.export(model, torch.randn(32, 32), onnx_path)
    rng = np.random.default_rng(1)
    data = os.path.join(work, "data.npz")
    np.savez(data, x=rng.standard_normal((320, 32), dtype=np.float32),
             labels=rng.integers(0, 10, 320))
    errors = []
    for recompute in ("never", "always"):
        bundle = os.path.join(work, f"{recompute}.gpipe")
        compiled = os.path.join(work, f"compiled-{recompute}.html")
        measured = os.path.join(work, f"measured-{recompute}.html")
        subprocess.run([gpipe_opt, onnx_path,
                        "--devices=cpu:0,cpu:1,cpu:0,cpu:1",
                        f"--micro-batches={M}", f"--recompute={recompute}",
                        "--stages=manual:2,4,6", f"--report={compiled}",
                        "-o", bundle], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([gpipe_run, bundle, "--train", f"--data={data}",
                        "--steps=6", f"--report={measured}"], check=True,
                       stdout=subprocess.DEVNULL)
        page = browse(chromium, compiled, work)
        if not page["h1"].startswith("four_layers.onnx: 4 stages, gpipe "
                                     "schedule, 4 micro-batches"):
            errors.append(f"compiled report title: {page['h1']}")
        if len(page["timelines"]) != 1:
            errors.append(f"compiled report: {len(page['timelines'])} timelines")
        for t in page["timelines"]:
            errors += check_timeline(f"predicted ({recompute})", t,
                                     recompute == "always", [(0, 2), (1, 3)])
        page = browse(chromium, measured, work)
        titles = len(page["timelines"])
        if titles != 2:
            errors.append(f"run report: {titles} timelines, expected the "
                          "predicted and the measured step")
        else:
            pred, meas = page["timelines"]
            if pred["axis"] != meas["axis"]:
                errors.append("the two timelines have different time scales")
            errors += check_timeline(f"run's predicted ({recompute})", pred,
                                     recompute == "always", [(0, 2), (1, 3)])
            errors += check_timeline(f"measured ({recompute})", meas,
                                     recompute == "always", [])
        print(f"recompute={recompute}: compiled and run reports rendered, "
              f"{sum(len(t['boxes']) for t in page['timelines'])} boxes in "
              "the run's")
    for e in errors:
        print("FAIL:", e)
    print(f"{len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
