"""Two `bench` results of one paired A/B (scripts/gpu_ab.sh) as a table: each row's cake time in
both arms, new / base, and every peer's new / base as the run's drift; then the geomean and the
worst row. Usage: python lab/ab_table.py BASE.json NEW.json [--markdown]"""

import argparse
import json
import math


def key(row):
    return (row["op"], row["H"], row["T"], row.get("residual"), row.get("weight"), row.get("dtype"),
            row.get("per_head"), row.get("path"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("new")
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    base = {key(r): r for r in json.load(open(a.base))["rows"]}
    new = {key(r): r for r in json.load(open(a.new))["rows"]}
    ratios, drifts = [], []
    lines = ["| op | H | T | base us | new us | new/base | peers new/base |", "|---|---|---|---|---|---|---|"]
    for k in base:
        if k not in new or "cake" not in base[k]["us"] or "cake" not in new[k]["us"]:
            continue
        b, n = base[k]["us"], new[k]["us"]
        ratio = n["cake"] / b["cake"]
        peers = {p: n[p] / b[p] for p in b if p != "cake" and p in n and b[p]}
        ratios.append(ratio)
        drifts.extend(peers.values())
        peer_text = " ".join(f"{p} {v:.3f}" for p, v in peers.items())
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {b['cake']:.2f} | {n['cake']:.2f} | {ratio:.3f} | {peer_text} |")
    geo = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
    drift = math.exp(sum(map(math.log, drifts)) / len(drifts)) if drifts else float("nan")
    lines.append(f"\ngeomean new/base {geo:.4f} over {len(ratios)} rows (peers {drift:.4f}); "
                 f"worst {max(ratios, default=float('nan')):.3f}")
    print("\n".join(lines) if a.markdown else "\n".join(l.replace("| ", "").replace(" |", "") for l in lines))


if __name__ == "__main__":
    main()
