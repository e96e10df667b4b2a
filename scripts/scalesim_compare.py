#!/usr/bin/env python3
"""GEMM cycles of tessera on systolic-os against SCALE-Sim, per dataflow and with the compiler's own mapping.

Requirements (this script installs nothing):
  pip install onnx==1.23.2 numpy                      # this interpreter
  python3 -m venv /tmp/ssenv && /tmp/ssenv/bin/pip install scalesim==3.0.0 "numpy<2"
(scalesim 3.0.0 fails under numpy 2, onnx 1.23 needs numpy 2, hence two interpreters.)

Usage: python3 scripts/scalesim_compare.py [--scalesim-python PY] [--shapes 64x64x64,...]
       [--arrays 32x32,16x16] [--out table.md] [--report-only]

Builds on scripts/scalesim_check.py (same SCALE-Sim config, same models).
Per shape, array and dataflow: SCALE-Sim "Total Cycles" (compute) and
"Total Cycles (incl. prefetch)" against tessera's array-busy cycles and whole
run (`tessera run --format json`), with --set ROWS/COLS/DATAFLOW. Then a row
"auto": tessera with no DATAFLOW override (the compiler's own mapping, the
description's default) against SCALE-Sim's best of its three dataflows.

Checks (exit 1 unless --report-only): compute within 1% per dataflow; the
auto mapping's whole run no slower than SCALE-Sim's best incl. prefetch.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import scalesim_check as sc  # noqa: E402


def tessera_auto(exe, model, rows, cols):
    p = subprocess.run([exe, "run", model, "-t", "systolic-os", "--set", f"ROWS={rows}", "--set", f"COLS={cols}",
                        "--format", "json"], capture_output=True, text=True)
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(p.stdout)["cycles"], None


def dims(s):
    return [tuple(int(x) for x in t.split("x")) for t in s.split(",")]


def main():
    root = pathlib.Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tessera", default=str(root / "target/release/tessera"))
    ap.add_argument("--scalesim-python", default="/tmp/ssenv/bin/python" if os.path.exists("/tmp/ssenv/bin/python") else sys.executable)
    ap.add_argument("--shapes", type=dims, default=sc.SHAPES, help="MxKxN,... (default: those of scalesim_check.py)")
    ap.add_argument("--arrays", type=dims, default=sc.ARRAYS, help="ROWSxCOLS,...")
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    lines = ["| GEMM M×K×N | array | dataflow | SCALE-Sim compute | SCALE-Sim incl. prefetch | tessera array busy | tessera whole run | compute ratio | within 1% |",
             "|---|---|---|---|---|---|---|---|---|"]
    best = ["| GEMM M×K×N | array | SCALE-Sim best (incl. prefetch) | tessera best of 3 (whole run) | tessera auto (whole run) | auto / SCALE-Sim best | auto no slower |",
            "|---|---|---|---|---|---|---|"]
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for (m, k, n) in a.shapes:
            model = os.path.join(tmp, f"g{m}_{k}_{n}.onnx")
            sc.gemm_model(model, m, k, n)
            for (rows, cols) in a.arrays:
                sres, tres = [], []
                for df in sc.DATAFLOWS:
                    scomp, spre = sc.scalesim_cycles(a.scalesim_python, tmp, m, k, n, rows, cols, df)
                    sres.append((df, spre))
                    tw, tb, err = sc.tessera_cycles(a.tessera, model, rows, cols, df)
                    if err:
                        fails += 1
                        lines.append(f"| {m}×{k}×{n} | {rows}×{cols} | {df} | {scomp} | {spre} | {err} | | | no |")
                    else:
                        r = tb / scomp
                        ok = abs(r - 1) <= 0.01
                        fails += not ok
                        tres.append((df, tw))
                        lines.append(f"| {m}×{k}×{n} | {rows}×{cols} | {df} | {scomp} | {spre} | {tb} | {tw} | {r:.3f} | {'yes' if ok else 'no'} |")
                    print(lines[-1], flush=True)
                sb = min(sres, key=lambda x: x[1])
                tb3 = min(tres, key=lambda x: x[1]) if tres else None
                auto, err = tessera_auto(a.tessera, model, rows, cols)
                if err:
                    fails += 1
                    best.append(f"| {m}×{k}×{n} | {rows}×{cols} | {sb[0]} {sb[1]} | {tb3} | {err} | | no |")
                else:
                    ok = auto <= sb[1]
                    fails += not ok
                    t3 = f"{tb3[0]} {tb3[1]}" if tb3 else "-"
                    best.append(f"| {m}×{k}×{n} | {rows}×{cols} | {sb[0]} {sb[1]} | {t3} | {auto} | {auto / sb[1]:.3f} | {'yes' if ok else 'no'} |")
                print(best[-1], flush=True)
    sc.finish(lines + [""] + best, a, fails, "check(s) failed")


if __name__ == "__main__":
    main()
