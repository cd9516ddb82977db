#!/usr/bin/env python3
"""A flame graph (SVG) from `perf script` output, for docs/benchmarks.md.

    perf record -F 700 --call-graph dwarf,65528 -o perf.data -- distrl-bench autograd ...
    perf script -i perf.data -F comm,pid,tid,ip,sym,dso | tools/flamegraph.py --out flame.svg \
        --title "..." [--thread 'rpc-handlers|distrl-bench'] [--under 'train_step|run_part'] [--name 4711=ps]

Stacks are grouped per process and thread (the bottom row: "pid thread"), folded, and drawn
root at the bottom, each frame as wide as its share of the samples. --thread keeps the samples of
threads whose name matches; --under keeps only the part of each stack from the first frame that
matches (the rest is dropped), so a graph can start at one function. Colours: distrl's own code
orange, LibTorch red, the C library and loader yellow, the kernel grey. Standard library only.
"""
import argparse
import collections
import html
import re
import sys

FRAME = re.compile(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)$")


def stacks(lines):
    """(thread key, [(symbol, dso), ...] leaf first) per sample."""
    head, frames = None, []
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            if head:
                yield head, frames
            head, frames = None, []
        elif not line[0].isspace():
            parts = line.split()
            head = (parts[1].split("/")[0] if len(parts) > 1 else "?") + " " + parts[0]
        else:
            m = FRAME.match(line)
            if m:
                frames.append((m.group(1), m.group(2)))
    if head:
        yield head, frames


def short(sym):
    sym = re.sub(r"\(.*", "", sym)  # argument lists
    sym = re.sub(r"<[^<>]*(<[^<>]*>[^<>]*)*>", "<>", sym)  # template arguments, two levels
    return sym[:160]


def colour(sym, dso):
    if "kallsyms" in dso or sym.startswith("[k]"):
        return "#b8b8b8"
    if "distrl" in sym:
        return "#f0a04b"
    if "torch" in dso or "c10" in dso or sym.startswith(("at::", "c10::", "torch::")):
        return "#e0604b"
    if "libc" in dso or "ld-linux" in dso or "libstdc++" in dso:
        return "#e8d060"
    return "#d0a0a0"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", nargs="?", help="perf script output (default: stdin)")
    ap.add_argument("--out", required=True, help="the SVG to write")
    ap.add_argument("--title", default="flame graph")
    ap.add_argument("--thread", help="regex: keep the threads whose name matches")
    ap.add_argument("--under", help="regex: keep each stack from its first frame that matches (others dropped)")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--name", action="append", default=[], metavar="PID=NAME", help="call a process by a name")
    ap.add_argument("--min-width", type=float, default=1.0, help="frames narrower than this (pixels) are left out")
    args = ap.parse_args()
    src = open(args.input, errors="replace") if args.input else sys.stdin
    thread_re = re.compile(args.thread) if args.thread else None
    under_re = re.compile(args.under) if args.under else None
    names = dict(n.split("=", 1) for n in args.name)

    tree = {"n": 0, "kids": collections.OrderedDict(), "dso": ""}
    total = 0
    for key, frames in stacks(src):
        if thread_re and not thread_re.search(key.split(" ", 1)[1]):
            continue
        path = [(short(s), d) for s, d in reversed(frames)]  # root first
        if under_re:
            at = next((i for i, (s, _) in enumerate(path) if under_re.search(s)), None)
            if at is None:
                continue
            path = path[at:]
        total += 1
        pid, thread = key.split(" ", 1)
        key = f"{names.get(pid, pid)} {thread}"
        node = tree
        node["n"] += 1
        for sym, dso in [(key, "")] + path:
            node = node["kids"].setdefault(sym, {"n": 0, "kids": collections.OrderedDict(), "dso": dso})
            node["n"] += 1
    if total == 0:
        sys.exit("flamegraph: no samples matched")

    row, depth_max, rects = 17, 0, []

    def walk(node, name, x, depth):
        nonlocal depth_max
        w = node["n"] / total * args.width
        if w < args.min_width:
            return
        depth_max = max(depth_max, depth)
        rects.append((x, depth, w, name, node))
        cx = x
        for kid_name, kid in sorted(node["kids"].items(), key=lambda kv: kv[0]):
            walk(kid, kid_name, cx, depth + 1)
            cx += kid["n"] / total * args.width

    cx = 0.0
    for name, kid in sorted(tree["kids"].items(), key=lambda kv: kv[0]):
        walk(kid, name, cx, 0)
        cx += kid["n"] / total * args.width
    height = (depth_max + 1) * row + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{height}" font-family="monospace" '
        f'font-size="11">',
        f'<rect width="100%" height="100%" fill="#fdfdf6"/>',
        f'<text x="6" y="16" font-size="14">{html.escape(args.title)} ({total} samples)</text>',
    ]
    for x, depth, w, name, node in rects:
        y = height - (depth + 1) * row - 4
        pct = 100.0 * node["n"] / total
        label = name if w > 7 * len(name) else name[: max(0, int(w / 7) - 2)] + ".." if w > 21 else ""
        tip = html.escape(f"{name} ({node['n']} samples, {pct:.1f}%)")
        out.append(
            f'<g><title>{tip}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
            f'fill="{colour(name, node["dso"])}" rx="2"/>'
            + (f'<text x="{x + 3:.1f}" y="{y + 12}">{html.escape(label)}</text>' if label else "")
            + "</g>"
        )
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"flamegraph: {total} samples, {len(rects)} frames drawn -> {args.out}")


if __name__ == "__main__":
    main()
