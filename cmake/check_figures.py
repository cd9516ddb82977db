"""Every measured figure the docs quote has a dated source.

    python3 cmake/check_figures.py ROOT

A figure is a measurement: a rate (env-steps/s, calls/s, GB/s, ...), a speedup (8-13x), a
latency in microseconds, or how long a run took ("solved in 27 s", "17-34 s of training",
"took 30 min"). It is sourced when its paragraph or table (the block of lines it is in), the
block just above it, or the heading it sits under (or that section's first block) carries a date
(2026-11-27) or a link to
docs/benchmarks.md, the one page where measurements live with their machine and date. Settings
(timeouts, intervals) are not measurements and are not matched.

Checked: README.md, docs/*.md, every folder's README.md and the comments of configs/*.yaml.
Prints each unsourced figure as FILE:LINE: text, and exits 1; prints nothing when all are sourced.
"""
import pathlib
import re
import sys

NUMBER = r"~?\d(?:[\d,.]*\d)?(?:\s?[-\u2013]\s?\d(?:[\d,.]*\d)?)?\s?k?"
FIGURE = re.compile(
    "|".join(
        [
            NUMBER + r"\s?(?:env-steps/s|steps/s|calls/s|samples/s|images/s|img/s|chars/s|characters/s|pairs/s|"
            r"requests/s|GB/s|MB/s|GFLOP/s)",
            NUMBER + r"\s?(?:s|min|minutes|seconds)\s(?:of training|to solve|wall|on (?:a |\d))",
            r"(?:solved in|solves in|took|takes|trains in|learns in|in about|finishes in)\s" + NUMBER + r"\s?(?:s|min|minutes|seconds)\b",
        ]
    )
)
# Speedups and microseconds are measurements only where the line says what was measured (a spin
# of 20 us, messages 64x the ring are settings and test sizes).
MEASURED_WORDS = re.compile(r"faster|slower|speedup|than|over |\bvs\b|throughput|round trip|median|p99|p50|latency|"
                            r"ping-pong|per call|per request|per message|measured|env-steps|batching", re.I)
IN_CONTEXT = re.compile(NUMBER + r"(?:\s?\u00d7|x(?=[\s,.;:)]|$))|" + NUMBER + r"\s?(?:\u00b5s|us)\b")
SOURCE = re.compile(r"20\d\d-\d\d-\d\d|benchmarks\.md")
# Not measurements: a multiplier in a key or command (4x4 weights, mlp:256x256), a version.
NOT_A_FIGURE = re.compile(r"\d+x\d+|\bv\d|\d+\.\d+\.\d+")


def blocks(lines):
    """The index of the block (run of non-blank lines) each line is in."""
    index, current, prev_blank = [], -1, True
    for line in lines:
        blank = not line.strip()
        if not blank and prev_blank:
            current += 1
        index.append(current)
        prev_blank = blank
    return index


def check(path, root, text_of_line=lambda line: line):
    lines = path.read_text(encoding="utf-8").splitlines()
    texts = [text_of_line(l) for l in lines]
    block = blocks(texts)
    block_text = {}
    for i, t in enumerate(texts):
        block_text.setdefault(block[i], []).append(t)
    heading = ""
    section_intro = ""  # the first block after the heading
    in_code = False
    bad = []
    for i, t in enumerate(texts):  # code blocks too: a command's comment may quote a figure
        if t.lstrip().startswith("```"):
            in_code = not in_code
            continue
        starts_block = i == 0 or not texts[i - 1].strip()
        if path.suffix == ".md" and not in_code and (t.startswith("#") or (starts_block and t.startswith("**"))):
            # A heading, or a block led by a bold title (docs/benchmarks.md's sections): the
            # section's dated lead covers what follows until the next.
            heading = "\n".join(block_text.get(block[i], [])) if t.startswith("**") else t
            section_intro = "\n".join(block_text.get(block[i] + 1, []))
        plain = NOT_A_FIGURE.sub(" ", t)
        found = [m.group(0) for m in FIGURE.finditer(plain)]
        if MEASURED_WORDS.search(plain):
            found += [m.group(0) for m in IN_CONTEXT.finditer(plain)]
        if not found:
            continue
        here = "\n".join(block_text.get(block[i], []))
        above = "\n".join(block_text.get(block[i] - 1, []))
        if any(SOURCE.search(x) for x in (here, above, heading, section_intro)):
            continue
        bad.append(f"{path.relative_to(root)}:{i + 1}: {', '.join(found)}: no date or link to the benchmark page "
                   f"in its paragraph, the one above or its section's lead")
    return bad


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    pages += sorted(p for p in root.glob("*/README.md") if p.parent.name not in ("build", "docs"))
    pages += sorted(p for p in root.glob("*/*/README.md") if p.parts[-3] not in ("build",))
    bad = []
    for page in pages:
        if page.exists() and "build" not in page.relative_to(root).parts[0]:
            bad += check(page, root)
    for config in sorted((root / "configs").glob("*.yaml")):
        # Only comments: the values themselves are settings.
        bad += check(config, root, lambda line: line.split("#", 1)[1] if "#" in line else "")
    for b in bad:
        print(b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
