"""inplace_inputs.py - random programs of copies and in-place writes among
inputs, intermediates and views of them, `sgc run` against PyTorch eager.

Each program has three f32[4] inputs %x %y %z and a random chain of
`zeros`/`ones`, `copy_`, `add_`, `mul`, `sub` and `reshape` views (to
[2, 2] and back), written into whichever value the draw names: an input
copied into another and then overwritten, a copy of a view, a write
through a view.  It returns up to three of the values made (through a
`mul(..., 1.0)`, so that no returned value is a view of an input) and
`%x`.  PyTorch runs the same chain; every returned value and every input
the program writes (in --out) must equal PyTorch's, in four runs: -O2,
-O0, a random stream interleaving, and the printed IR (`--emit=ir`)
compiled again.  The printed IR must also print the same again.

These programs found the write-backs of functionalize.c reading memory
that an earlier copy had only named (a copy of an input read the values
written into the input later; two inputs swapped through copies), and a
write-back that left the written value's old version current.

Usage: inplace_inputs.py PATH/TO/sgc [COUNT [SEED]] (default 400 programs
from seed 0; a failure prints its seed and program).
"""
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Suite, compare  # noqa: E402
import torch  # noqa: E402

INPUTS = {"x": [1.0, 2.0, 3.0, 4.0], "y": [5.0, -6.0, 7.0, 8.0],
          "z": [-1.0, 0.5, 9.0, 3.0]}


def generate(rng):
    """A program: its .sg text, its statements in PyTorch, the names it
    returns."""
    shape = {n: 4 for n in INPUTS}
    made = []
    sg, pt = [], []
    for k in range(1, rng.randint(3, 10) + 1):
        names = list(shape)
        a, b = rng.choice(names), rng.choice(names)
        c = rng.random()
        if c < 0.15:
            f = rng.choice(["zeros", "ones"])
            n = "t%d" % k
            sg.append("%%%s = %s(shape=[4])" % (n, f))
            pt.append("%s = torch.%s(4)" % (n, f))
            shape[n] = 4
        elif c < 0.45:
            if a == b or shape[a] != shape[b]:
                continue
            sg.append("copy_(%%%s, %%%s)" % (a, b))
            pt.append("%s.copy_(%s)" % (a, b))
            continue
        elif c < 0.55:
            if shape[a] != shape[b]:
                continue
            sg.append("add_(%%%s, %%%s)" % (a, b))
            pt.append("%s.add_(%s)" % (a, b))
            continue
        elif c < 0.65:
            n = "t%d" % k
            sg.append("%%%s = mul(%%%s, 2.0)" % (n, a))
            pt.append("%s = torch.mul(%s, 2.0)" % (n, a))
            shape[n] = shape[a]
        elif c < 0.85:
            n = "v%d" % k
            to = "2, 2" if shape[a] == 4 else "4"
            sg.append("%%%s = reshape(%%%s, shape=[%s])" % (n, a, to))
            pt.append("%s = %s.reshape(%s)" % (n, a, to))
            shape[n] = 22 if shape[a] == 4 else 4
        else:
            if shape[a] != shape[b]:
                continue
            n = "t%d" % k
            sg.append("%%%s = sub(%%%s, %%%s)" % (n, a, b))
            pt.append("%s = torch.sub(%s, %s)" % (n, a, b))
            shape[n] = shape[a]
        made.append(n)
    rng.shuffle(made)
    rets = []
    for i, n in enumerate(made[:3]):
        sg.append("%%r%d = mul(%%%s, 1.0)" % (i, n))
        pt.append("r%d = torch.mul(%s, 1.0)" % (i, n))
        rets.append("r%d" % i)
    sg.append("%rx = add(%x, 0.0)")
    pt.append("rx = torch.add(x, 0.0)")
    rets.append("rx")
    text = ("graph g {\n" + "".join("  input %%%s : f32[4]\n" % n for n in INPUTS) +
            "".join("  %s\n" % s for s in sg) +
            "  return %s\n}\n" % ", ".join("%" + r for r in rets))
    return text, pt, rets


def main():
    S = Suite("inplace_inputs")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    first = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    inputs = {n: torch.tensor(v) for n, v in INPUTS.items()}
    for seed in range(first, first + count):
        text, pt, rets = generate(random.Random(seed))
        env = {"torch": torch}
        env.update({n: t.clone() for n, t in inputs.items()})
        for line in pt:
            exec(line, env)  # noqa: S102 (the generated chain)
        expected = {r: env[r] for r in rets}
        written = {n: env[n] for n in INPUTS if not torch.equal(env[n], inputs[n])}
        src = S.path("p%d.sg" % seed)
        with open(src, "w") as f:
            f.write(text)
        printed, again = S.path("q%d.sg" % seed), S.path("q%d_again.sg" % seed)
        pr = subprocess.run([S.sgc, src, "--emit=ir", "-o", printed],
                            capture_output=True, text=True)
        if pr.returncode != 0:
            S.report("seed %d: --emit=ir" % seed, pr.stderr[:500] + "\n" + text)
            continue
        subprocess.run([S.sgc, printed, "--emit=ir", "-o", again], capture_output=True)
        with open(printed) as f1, open(again) as f2:
            same = f1.read() == f2.read()
        S.report("seed %d: the printed IR prints the same again" % seed,
                 None if same else "it does not\n" + text)
        with open(printed) as f:
            printed_text = f.read()
        for label, prog, args in (("-O2", text, ()), ("-O0", text, ("-O0",)),
                                  ("--interleave=3", text, ("--interleave=3",)),
                                  ("printed IR", printed_text, ())):
            rc, out, err, _ = S.run(prog, inputs, args=args)
            why = None
            if rc != 0 or out is None:
                why = "sgc run exited %d: %s" % (rc, err.strip()[:500])
            else:
                for n, e in list(expected.items()) + list(written.items()):
                    if n not in out:
                        why = "'%s' missing from --out" % n
                    else:
                        why = compare(out[n].reshape(e.shape), e)
                        why = why and "%s: %s" % (n, why)
                    if why:
                        break
            S.report("seed %d %s" % (seed, label), why and why + "\n--- program:\n" + text)
    S.finish()


main()
