#!/usr/bin/env python3
"""Force kiln's tactic choices through a timing cache, for A/B runs on a loaded machine.

    python3 bench/force_tactic.py CACHE OUT RULE [RULE...]

A builder on a shared machine picks tactics by noise (a 2-thread build at load
3 timed MobileNetV2's mbconv candidates at 2-3x their cost and chose among
them at random), so two libraries' engines differ in more than the code under
test.  The timing cache (`kiln build --timing-cache FILE`) is text, one
`ms key|tactic=N` a line; this rewrites the times so that a build reading it
takes the tactic each RULE names:

    OP=TACTIC[@MAXPIX][~SUBSTR]

For every layer of op OP (as the cache spells it: kiln::mbconv, ai.onnx::Conv)
that has an entry for TACTIC, and whose output (the key's last shape) has at
most MAXPIX pixels in its last two dims where @MAXPIX is given, TACTIC's time
becomes 0.001 ms and the layer's other tactics' 9 ms, in the greedy pass's
entries and in the later look's (keys ending in `|late`) alike.  Later rules
win; other entries are kept.  Get CACHE from one build that times every candidate (a
build of the newer library, which offers the most tactics), then build each
side from a copy of OUT (the build rewrites it); a library that does not offer
a tactic times its own candidates for those layers.  Session 10's MobileNetV2
A/B (bench/README.md): "old" = kiln::mbconv=2 kiln::mbconv=3 kiln::mbconv=4@49,
"new" = the same and kiln::mbconv=5@49.
"""
import re
import sys


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    src, dst, rules = sys.argv[1], sys.argv[2], []
    for r in sys.argv[3:]:
        m = re.fullmatch(r"([^=]+)=(\d+)(?:@(\d+))?(?:~(.+))?", r)
        if not m:
            sys.exit("bad rule %r: expected OP=TACTIC[@MAXPIX][~SUBSTR]" % r)
        rules.append((m.group(1), int(m.group(2)), int(m.group(3)) if m.group(3) else None, m.group(4)))
    lines = open(src).read().splitlines()
    entries = {}  # layer key -> {tactic: line index}
    for i, line in enumerate(lines):
        m = re.match(r"^\S+ (.*)\|tactic=(\d+)((?:\|\w+)?)$", line)
        if m:
            entries.setdefault((m.group(1), m.group(3)), {})[int(m.group(2))] = i
    forced = 0
    for (key, suf), tactics in entries.items():
        want = None
        dims = re.findall(r"\[(\d+(?:x\d+)*)\]", key)
        out = [int(d) for d in dims[-1].split("x")] if dims else []
        pix = out[-1] * out[-2] if len(out) >= 2 else None
        for op, t, maxpix, sub in rules:
            if key.startswith(op + " ") and t in tactics and (maxpix is None or (pix is not None and pix <= maxpix)) \
                    and (sub is None or sub in key):
                want = t
        if want is None:
            continue
        forced += 1
        for t, i in tactics.items():
            lines[i] = "%r %s|tactic=%d%s" % (0.001 if t == want else 9.0, key, t, suf)
    open(dst, "w").write("\n".join(lines) + "\n")
    print("%s: %d layers forced" % (dst, forced))


if __name__ == "__main__":
    main()
