"""attention_cases.py - the attention matrix of tests/gpu/run_attention.sh.

  attention_cases.py gen DIR SGC        here: programs, inputs, expected
  attention_cases.py check DIR NAME     on the GPU: compares one run

gen writes DIR/NAME/{case.sg, inputs.safetensors, expected.safetensors}
for every case (run_attention.sh makes case.cu on the GPU machine): bf16 and f16, head dims 64 and 128, each of
  gqa16_4    16 query heads over 4 key/value heads, causal
  mqa16_1    16 query heads over 1 key/value head, not causal
  bool_mask  grouped (16/4) with a random bool mask [B, 1, T, S]
  float_mask 16 heads with a float mask [T, S] added to the scores
  causal_mask 16 heads with the causal mask built from aranges, which
             -O2 turns into causal=true (the causal fused path)
as one training-style graph: q, k, v params (seeded, the same in `sgc run`
and the driver), o = attention, loss = sum(o * r), backward, returning the
loss, o and grad.q, grad.k, grad.v.  And q, k, v from one fused qkv
linear of a param %x (batch 2, 2 heads), causal, o's heads merged back:
  qkv_chunk  chunk(dim=2), reshape, transpose (bench/transformer.sg)
  qkv_split  split(sizes=, dim=2), reshape, permute (torch.export's GPT-2)
  qkv_unbind reshape to [B, T, 3, H, D], permute, split into parts of one,
             squeeze (torch.export's timm ViT)
  qkv_side   qkv_chunk with v also read by a linear (param %wv) added to
             the output: the products read v's slice with a row stride
returning the loss, o, grad.x and grad.wqkv (and grad.wv): -O2 reads q,
k, v as strided slices of the linear's result and writes dq, dk, dv into
the slices of the backward cat's buffer, so check also fails when the
trace shows a chunk, split or cat kernel (a copy left; qkv_side's cat
stays, its v operand being a sum).  expected: `sgc run` (the CPU
interpreter).  DIR/cases lists the names.  ATTN_CASES (space-separated
case names) generates only those.

check compares DIR/NAME/got-VARIANT.safetensors with expected and prints
`PASS|FAIL NAME VARIANT: max |error| per tensor (ran: ...)`, ran from
the driver's trace (which attention kernels ran: cuDNN's or sgk's).
"""
import json
import os
import re
import subprocess
import sys

B, T = 1, 80  # T: not a multiple of the kernels' tiles (B = 2: cg_attn_gqa.sg in run_gpu_tests.sh)
CASES = ["gqa16_4", "mqa16_1", "bool_mask", "float_mask", "causal_mask",
         "qkv_chunk", "qkv_split", "qkv_unbind", "qkv_side"]
# |got - exp| <= atol + rtol |exp|, by dtype: outputs and gradients of
# 16-bit attention (f32 accumulation) against the interpreter's; F32 is
# the loss, a sum over o of 16-bit rounding differences.  The qkv cases'
# values are those of small initialised params: atol times the largest
# |exp| of the tensor there.
TOL = {"BF16": (3e-2, 3e-2), "F16": (4e-3, 8e-3), "F32": (5e-2, 2e-2)}


def program_qkv(case, dt, hd):
    """A fused qkv linear, its parts as q, k, v (see the top)."""
    b, h, c = 2, 2, 2 * hd
    lines = ["dim B = %d" % b, "dim T = %d" % T, "dim H = %d" % h, "dim D = %d" % hd,
             "dim C = %d" % c, "dim C3 = %d" % (3 * c), "", "graph %s {" % case,
             "  param %%x : %s[B, T, C]" % dt, "  param %%wqkv : %s[C3, C]" % dt,
             "  input %%r : %s[B, T, C]" % dt]
    if case == "qkv_side":
        lines.append("  param %%wv : %s[C, C]" % dt)
    lines += ["", "  %qkv = linear(%x, %wqkv)"]
    if case == "qkv_unbind":
        lines += ["  %r5 = reshape(%qkv, shape=[B, T, 3, H, D])",
                  "  %p5 = permute(%r5, dims=[2, 0, 3, 1, 4])",
                  "  %u0, %u1, %u2 = split(%p5, sizes=[1, 1, 1], dim=0)",
                  "  %q = squeeze(%u0, dim=0)", "  %k = squeeze(%u1, dim=0)",
                  "  %v = squeeze(%u2, dim=0)"]
    else:
        part = ("split(%qkv, sizes=[C, C, C], dim=2)" if case == "qkv_split"
                else "chunk(%qkv, chunks=3, dim=2)")
        lines.append("  %%q3, %%k3, %%v3 = %s" % part)
        for t in "qkv":
            lines.append("  %%%s4 = reshape(%%%s3, shape=[B, T, H, D])" % (t, t))
            lines.append("  %%%s = permute(%%%s4, dims=[0, 2, 1, 3])" % (t, t)
                         if case == "qkv_split" else
                         "  %%%s = transpose(%%%s4, dim0=1, dim1=2)" % (t, t))
    lines += ["  %o = scaled_dot_product_attention(%q, %k, %v, causal=true)",
              "  %o4 = transpose(%o, dim0=1, dim1=2)",
              "  %o3 = reshape(%o4, shape=[B, T, C])"]
    if case == "qkv_side":
        lines += ["  %side = linear(%v3, %wv)", "  %y = add(%o3, %side)",
                  "  %w = mul(%y, %r)"]
    else:
        lines.append("  %w = mul(%o3, %r)")
    lines += ["  %wf = cast(%w, dtype=f32)", "  %loss = sum(%wf)",
              "  backward(%loss)", "  return %loss, %o", "}"]
    return "\n".join(lines) + "\n"


def program(case, dt, hd):
    if case.startswith("qkv_"):
        return program_qkv(case, dt, hd)
    hk = {"gqa16_4": 4, "mqa16_1": 1, "bool_mask": 4}.get(case, 16)
    decl = ["dim B = %d" % B, "dim T = %d" % T, "dim H = 16", "dim HK = %d" % hk,
            "dim D = %d" % hd, "", "graph %s {" % case,
            "  param %%q : %s[B, H, T, D]" % dt,
            "  param %%k : %s[B, HK, T, D]" % dt,
            "  param %%v : %s[B, HK, T, D]" % dt,
            "  input %%r : %s[B, H, T, D]" % dt]
    gqa = ", enable_gqa=true" if hk != 16 else ""
    body = []
    if case == "gqa16_4":
        body.append("  %%o = scaled_dot_product_attention(%%q, %%k, %%v, causal=true%s)" % gqa)
    elif case == "mqa16_1":
        body.append("  %%o = scaled_dot_product_attention(%%q, %%k, %%v%s)" % gqa)
    elif case == "bool_mask":
        decl.append("  input %keep : bool[B, 1, T, T]")
        body.append("  %%o = scaled_dot_product_attention(%%q, %%k, %%v, %%keep%s)" % gqa)
    elif case == "float_mask":
        decl.append("  input %%bias : %s[T, T]" % dt)
        body.append("  %o = scaled_dot_product_attention(%q, %k, %v, %bias)")
    else:
        body += ["  %i = arange(end=T)", "  %row = unsqueeze(%i, dim=1)",
                 "  %col = unsqueeze(%i, dim=0)", "  %keep = ge(%row, %col)",
                 "  %o = scaled_dot_product_attention(%q, %k, %v, %keep)"]
    body += ["  %w = mul(%o, %r)", "  %wf = cast(%w, dtype=f32)", "  %loss = sum(%wf)",
             "  backward(%loss)", "  return %loss, %o", "}"]
    return "\n".join(decl + [""] + body) + "\n"


def gen(d, sgc):
    here = os.path.dirname(os.path.abspath(__file__))
    names = []
    for dt in ("bf16", "f16"):
        for hd in (64, 128):
            for case in os.environ.get("ATTN_CASES", " ".join(CASES)).split():
                name = "%s_%s_d%d" % (case, dt, hd)
                t = os.path.join(d, name)
                os.makedirs(t, exist_ok=True)
                sg = os.path.join(t, "case.sg")
                with open(sg, "w") as f:
                    f.write(program(case, dt, hd))
                ir = os.path.join(t, "ir.sg")
                steps = [[sgc, sg, "--emit=ir", "-o", ir],
                         [sys.executable, os.path.join(here, "make_inputs.py"), ir,
                          os.path.join(t, "inputs.safetensors")],
                         [sgc, "run", sg, "--inputs", os.path.join(t, "inputs.safetensors"),
                          "--out", os.path.join(t, "expected.safetensors")]]
                for cmd in steps:
                    pr = subprocess.run(cmd, capture_output=True, text=True)
                    if pr.returncode:
                        sys.exit("%s: %s failed: %s" % (name, " ".join(cmd[:3]), pr.stderr))
                os.unlink(ir)
                names.append(name)
                print("generated %s" % name)
    with open(os.path.join(d, "cases"), "w") as f:
        f.write("\n".join(names) + "\n")


def ran(trace):
    """The attention kernels a driver's trace names, and its copies of
    chunk, split or cat parts."""
    try:
        ev = json.load(open(trace))
    except (OSError, ValueError):
        return "no trace", []
    ev = ev.get("traceEvents", ev) if isinstance(ev, dict) else ev
    names = sorted({e.get("name", "") for e in ev if isinstance(e, dict)} - {""})
    att = [n for n in names if "flash" in n or "sdpa" in n]
    copies = [n for n in names if re.search(r"_(chunk|split|cat)\d", n)]
    return ", ".join(att) or "no attention kernel in the trace", copies


def check(d, name, variant):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    import sgtensors
    t = os.path.join(d, name)
    got_p = os.path.join(t, "got-%s.safetensors" % variant)
    why, errs = None, []
    try:
        exp, got = sgtensors.read(os.path.join(t, "expected.safetensors")), sgtensors.read(got_p)
    except (OSError, ValueError) as e:
        exp, got, why = {}, {}, "cannot read: %s (log: %s)" % (
            e, open(os.path.join(t, variant + ".log")).read()[-600:]
            if os.path.exists(os.path.join(t, variant + ".log")) else "none")
    for n, (dt, e) in sorted(exp.items()):
        if n not in got:
            why = why or "%s missing" % n
            continue
        g = got[n][1].astype(np.float64)
        e = e.astype(np.float64)
        if g.shape != e.shape:
            why = why or "%s has shape %s, expected %s" % (n, g.shape, e.shape)
            continue
        atol, rtol = TOL.get(dt, (1e-3, 1e-3))
        if name.startswith("qkv_"):  # small params (init.c): atol of the tensor's scale
            atol *= max(float(np.abs(e).max()) if e.size else 0.0, 1e-30)
        err = np.abs(g - e)
        errs.append("%s %.3g" % (n, float(err.max()) if err.size else 0.0))
        if not np.all(err <= atol + rtol * np.abs(e)):
            why = why or "%s beyond tolerance (atol %g, rtol %g)" % (n, atol, rtol)
    att, copies = ran(os.path.join(t, "trace-%s.json" % variant))
    if name.startswith("qkv_side"):
        copies = [c for c in copies if "_cat" not in c]
    if variant == "cudnn" and name.split("_")[0] in ("gqa16", "mqa16") and "[cudnn]" not in att:
        why = why or "grouped heads did not run on cuDNN"
    if name.startswith("qkv_") and copies:
        why = why or "copies of q, k, v or dq, dk, dv ran: %s" % ", ".join(copies)
    print("%s %s %s: max |error| %s (ran: %s)%s" % (
        "PASS" if why is None else "FAIL", name, variant, ", ".join(errs) or "-",
        att, "" if why is None else ": " + why))
    return why is None


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    if sys.argv[1] == "gen":
        gen(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "check":
        ok = check(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else "cudnn")
        sys.exit(0 if ok else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
