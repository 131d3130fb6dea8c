#!/usr/bin/env python3
"""Folds `perf script` output into stacks, draws a flame graph (SVG) and tables the
top costs, grouped. Standard library only; used by scripts/profile-serve.

    flamegraph.py PERF_SCRIPT_TEXT SVG_OUT TABLE_OUT [TITLE]

PERF_SCRIPT_TEXT is `perf script` output, Swift names already demangled. Each
sample is one stack (leaf first in perf's text); a function's self cost is the
samples where it is the leaf, its inclusive cost the samples where it appears
anywhere in the stack (once a sample, however often it recurs).
"""

import html
import re
import sys
from collections import Counter

# The groups of the table, tried in this order on each frame's name and library.
# A sample belongs to the group of its leaf-most frame that falls in one (so a
# memcpy called by OpenSSL counts as verification), kernel frames to "kernel".
GROUPS = [
    ("kernel", re.compile(r"\[kernel\.|kallsyms|^\[unknown\]$")),
    ("verification", re.compile(r"libcrypto|libssl|SIWAVerification|SIWACrypto|Verifier|Base64|JSON|JWS|JWK|RSA|EVP_", re.I)),
    ("Redis", re.compile(r"hiredis|redis|SIWARedis|NotificationStore|NodeRouting", re.I)),
    ("FastCGI", re.compile(r"libfcgi|FCGX|FCGI|FastCGI|Acceptor", re.I)),
    (
        "Swift runtime",
        re.compile(
            r"libswiftCore|libswift_|libFoundation|swift_retain|swift_release|swift_alloc|swift_dealloc|"
            r"swift_bridgeObject|swift_beginAccess|swift_endAccess|swift_|String|malloc|free|_int_|"
            r"cfree|realloc|calloc|Array|Dictionary",
        ),
    ),
]
COLOURS = {
    "verification": "#e8a33d",
    "Redis": "#d9534f",
    "FastCGI": "#5b9bd5",
    "Swift runtime": "#9b7fc7",
    "kernel": "#8fbc5a",
    "other": "#b0b0b0",
}
ORDER = ["verification", "Redis", "FastCGI", "Swift runtime", "kernel", "other"]
# The group of each frame's name, learnt with its library while reading.
NAME_GROUP = {}
# serve's stages, by the frame that holds each: a sample counts for a stage when
# the frame is anywhere in its stack. The worker's loop less the responder is the
# FastCGI read, accept and write; the responder less verification and the store is
# the routing, logging and metrics around them.
STAGES = [
    ("worker threads' FastCGI loop (FastCGIServer.start)", "FastCGIServer.start()"),
    ("the responder (NotificationResponder.handle)", "NotificationResponder.handle("),
    ("verification (NotificationVerifier.verify)", "NotificationVerifier.verify"),
    ("the Redis script call (NotificationStore.apply)", "NotificationStore.apply("),
]
FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def frame_name(symbol, library):
    symbol = re.sub(r"\+0x[0-9a-f]+$", "", symbol)
    if symbol == "[unknown]":
        return "[unknown] (" + library.rsplit("/", 1)[-1] + ")"
    return symbol


def group_of_frame(name, library):
    if library.startswith("[kernel") or library.endswith("kallsyms"):
        return "kernel"
    text = name + " " + library
    for group, pattern in GROUPS[1:]:
        if pattern.search(text):
            return group
    return None


def read_samples(path):
    """Yields (stack root-first as a tuple of names, group of the sample)."""
    frames = []
    with open(path, errors="replace") as text:
        for line in text:
            if not line.strip():
                if frames:
                    yield finish(frames)
                frames = []
                continue
            if line[0] not in " \t":
                frames = []
                continue
            match = FRAME.match(line)
            if match:
                name, library = frame_name(match.group(1), match.group(2)), match.group(2)
                NAME_GROUP.setdefault(name, group_of_frame(name, library) or "other")
                frames.append((name, library))
    if frames:
        yield finish(frames)


def finish(frames):
    group = "other"
    for name, library in frames:  # leaf first
        found = group_of_frame(name, library)
        if found:
            group = found
            break
    names = tuple(name for name, _ in reversed(frames))
    return names, group


def svg(stacks, path, title):
    """stacks: Counter of root-first tuples. A plain icicle-free flame graph."""
    total = sum(stacks.values())
    width, row, pad = 1200, 16, 10
    tree = {}
    for stack, count in stacks.items():
        node = tree
        for name in stack[:60]:
            entry = node.setdefault(name, [0, {}])
            entry[0] += count
            node = entry[1]
    boxes = []
    depth_max = 0

    def walk(node, x, depth):
        nonlocal depth_max
        for name, (count, children) in sorted(node.items()):
            w = count / total * (width - 2 * pad)
            if w >= 0.3:
                boxes.append((x, depth, w, name, count))
                depth_max = max(depth_max, depth)
                walk(children, x, depth + 1)
            x += w

    walk(tree, pad, 0)
    height = (depth_max + 1) * row + 60
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="monospace" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="{pad}" y="18" font-size="14">{html.escape(title)}</text>',
    ]
    legend_x = pad
    for group in ORDER:
        out.append(f'<rect x="{legend_x}" y="26" width="12" height="12" fill="{COLOURS[group]}"/>')
        out.append(f'<text x="{legend_x + 16}" y="36">{group}</text>')
        legend_x += 20 + 8 * len(group) + 20
    for x, depth, w, name, count in boxes:
        y = height - (depth + 1) * row - 4
        group = NAME_GROUP.get(name, "other")
        label = html.escape(f"{name} ({count} samples, {100 * count / total:.1f} %)")
        out.append(
            f'<g><title>{label}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 1}" '
            f'fill="{COLOURS[group]}"/>'
        )
        chars = int(w / 6.6)
        if chars >= 4:
            text = name if len(name) <= chars else name[: chars - 2] + ".."
            out.append(f'<text x="{x + 2:.1f}" y="{y + 12}">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    source, svg_path, table_path = sys.argv[1:4]
    title = sys.argv[4] if len(sys.argv) > 4 else "siwa-endpoint serve"
    stacks = Counter()
    stages = Counter()
    stage_groups = Counter()
    syscalls = Counter()
    groups = Counter()
    self_cost = Counter()
    inclusive = Counter()
    for names, group in read_samples(source):
        if not names:
            continue
        stacks[names] += 1
        groups[group] += 1
        self_cost[names[-1]] += 1
        for name in set(names):
            inclusive[name] += 1
        for stage, frame in STAGES:
            if any(frame in name for name in names):
                stages[stage] += 1
                stage_groups[stage, group] += 1
        # Kernel time entered by a system call: which one (the kernel's handler, the
        # frame after do_syscall_64); other kernel time (interrupts, softirq) apart.
        if group == "kernel":
            call = "not in a system call (interrupts, softirq, scheduling)"
            if "do_syscall_64" in names:
                after = names.index("do_syscall_64") + 1
                if after < len(names):
                    call = names[after]
            syscalls[call] += 1
    total = sum(stacks.values())
    if total == 0:
        sys.exit("flamegraph.py: no samples in " + source)
    svg(stacks, svg_path, f"{title}: {total} samples")
    with open(svg_path.rsplit(".", 1)[0] + ".folded", "w") as folded:
        for stack, count in sorted(stacks.items()):
            folded.write(";".join(stack) + f" {count}\n")

    def pct(n):
        return f"{100 * n / total:.1f} %"

    def short(name):
        return (name[:90] + "..") if len(name) > 92 else name

    lines = [f"{total} samples", "", "| group | share of samples (each sample by its leaf-most grouped frame) |", "|---|---|"]
    for group in ORDER:
        lines.append(f"| {group} | {pct(groups[group])} |")
    lines += [
        "",
        "Stages (share of samples with the frame anywhere in the stack), and within each, its groups:",
        "",
        "| stage | share | " + " | ".join(ORDER) + " |",
        "|---|---|" + "---|" * len(ORDER),
    ]
    for stage, _ in STAGES:
        within = " | ".join(pct(stage_groups[stage, group]) for group in ORDER)
        lines.append(f"| {stage} | {pct(stages[stage])} | {within} |")
    lines += ["", "Kernel samples by system call:", "", "| share of all samples | entered through |", "|---|---|"]
    for call, n in syscalls.most_common(8):
        lines.append(f"| {pct(n)} | `{short(call)}` |")
    lines += ["", "Top functions by self cost:", "", "| self | inclusive | group | function |", "|---|---|---|---|"]
    for name, n in self_cost.most_common(20):
        group = NAME_GROUP.get(name, "other")
        lines.append(f"| {pct(n)} | {pct(inclusive[name])} | {group} | `{short(name)}` |")
    lines += ["", "Top functions by inclusive cost:", "", "| inclusive | self | group | function |", "|---|---|---|---|"]
    for name, n in inclusive.most_common(25):
        group = NAME_GROUP.get(name, "other")
        lines.append(f"| {pct(n)} | {pct(self_cost[name])} | {group} | `{short(name)}` |")
    with open(table_path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
