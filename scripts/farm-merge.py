#!/usr/bin/env python3
"""Merges what `make farm` brought back: FARM/<board>/<study>/index.db (one experiment
index per board and study) into FARM/farm.db with SQLite ATTACH — tables experiment(board,
study, key, value) and runs(board, study, <the index's columns>: a row per point and round) — and, per study, a
table of every point's metrics with one column per board (FARM/compare/<study>.csv, .md)
and a figure of decode speed per point and board (FARM/compare/<study>-decode_tps.png/.svg,
gnuplot). Usage: farm-merge.py FARM"""
import csv
import os
import sqlite3
import subprocess
import sys


def boards_and_studies(farm):
    for board in sorted(os.listdir(farm)):
        d = os.path.join(farm, board)
        if board == "compare" or not os.path.isdir(d):
            continue
        for study in sorted(os.listdir(d)):
            if os.path.isfile(os.path.join(d, study, "index.db")):
                yield board, study


def merge_indexes(farm, pairs):
    out = os.path.join(farm, "farm.db")
    if os.path.exists(out):
        os.remove(out)
    con = sqlite3.connect(out)
    for board, study in pairs:
        con.execute("ATTACH DATABASE ? AS s", (f"file:{os.path.join(farm, board, study, 'index.db')}?mode=ro",))
        cols = [r[1] for r in con.execute("PRAGMA s.table_info(runs)")]
        if not cols:
            sys.exit(f"farm-merge: {board}/{study}/index.db has no runs table (an index from before interleaved rounds)")
        if not con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'runs'").fetchone()[0]:
            con.execute("CREATE TABLE experiment (board TEXT, study TEXT, key TEXT, value TEXT)")
            con.execute(f"CREATE TABLE runs (board TEXT, study TEXT, {', '.join(cols)})")
        con.execute("INSERT INTO experiment SELECT ?, ?, key, value FROM s.experiment", (board, study))
        con.execute(f"INSERT INTO runs SELECT ?, ?, {', '.join(cols)} FROM s.runs", (board, study))
        con.commit()
        con.execute("DETACH DATABASE s")
    n = con.execute("SELECT count(*), count(DISTINCT board) FROM runs").fetchone() if pairs else (0, 0)
    con.close()
    print(f"farm-merge: {out}: {n[0]} runs of {n[1]} boards", file=sys.stderr)


def compare(farm, study, boards):
    tables = {}
    for b in boards:
        path = os.path.join(farm, b, study, "table.csv")
        if os.path.isfile(path):
            with open(path) as f:
                tables[b] = list(csv.DictReader(f))
    if not tables:
        return
    header = next(iter(tables.values()))
    cols = list(header[0].keys()) if header else []
    if "decode_tps" not in cols:
        return
    # table.csv: the parameters that vary, n, the spread, then each metric's median, _lo, _hi.
    params = cols[: cols.index("n")] if "n" in cols else cols[: cols.index("decode_tps")]
    metrics = [c for c in cols[len(params):] if not c.endswith(("_lo", "_hi"))]
    keys = []
    for rows in tables.values():
        for r in rows:
            k = tuple(r[p] for p in params)
            if k not in keys:
                keys.append(k)
    by = {b: {tuple(r[p] for p in params): r for r in rows} for b, rows in tables.items()}
    os.makedirs(os.path.join(farm, "compare"), exist_ok=True)
    base = os.path.join(farm, "compare", study)
    out_cols = params + [f"{m}[{b}]" for m in metrics for b in tables]
    with open(base + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(out_cols)
        for k in keys:
            w.writerow(list(k) + [by[b].get(k, {}).get(m, "") for m in metrics for b in tables])
    with open(base + ".md", "w") as f:
        f.write(f"# {study}: boards side by side (decode_tps, tok/s)\n\n")
        f.write("| " + " | ".join(params + list(tables)) + " |\n|" + "---|" * (len(params) + len(tables)) + "\n")
        for k in keys:
            f.write("| " + " | ".join(list(k) + [by[b].get(k, {}).get("decode_tps", "–") or "–" for b in tables]) + " |\n")
    # decode speed per point, a bar per board
    data = base + "-decode_tps.dat"
    with open(data, "w") as f:
        f.write("point " + " ".join(f'"{b}"' for b in tables) + "\n")
        for k in keys:
            vals = [by[b].get(k, {}).get("decode_tps", "") or "NaN" for b in tables]
            f.write('"' + ",".join(k) + '" ' + " ".join(vals) + "\n")
    plots = ", ".join(f"'{data}' using {i + 2}:xtic(1) title columnheader" for i in range(len(tables)))
    for term, ext in (("pngcairo size 900,500", "png"), ("svg size 900,500", "svg")):
        script = (f"set terminal {term}; set output '{base}-decode_tps.{ext}'; set style data histograms; "
                  f"set style fill solid 0.8; set ylabel 'decode tok/s'; set title '{study}: boards side by side'; "
                  f"set xtics rotate by -30; set key top right; plot {plots}")
        subprocess.run(["gnuplot", "-e", script], check=True)
    os.remove(data)
    print(f"farm-merge: {base}.md, {base}-decode_tps.png", file=sys.stderr)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: farm-merge.py FARM_RESULTS_DIR (what make farm brought back)")
    farm = sys.argv[1]
    pairs = list(boards_and_studies(farm))
    if not pairs:
        sys.exit(f"farm-merge: no <board>/<study>/index.db under {farm}")
    merge_indexes(farm, pairs)
    boards = sorted({b for b, _ in pairs})
    for study in sorted({s for _, s in pairs}):
        compare(farm, study, boards)


if __name__ == "__main__":
    main()
