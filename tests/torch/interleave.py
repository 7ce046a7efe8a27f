"""interleave.py - `sgc run --interleave=SEED`: statements of different
streams run in a random order that keeps every sync; buffers nobody has
written yet (or already released) read as NaN.  A race-free program gives
the same result for every seed; the same program without its wait_event
gives a NaN-poisoned result for some seed."""
import torch

from _common import F32, Suite, compare, rand

S = Suite("interleave")
SEEDS = range(20)

TWO_STREAMS = """graph g {
  input %x : f32[16]
  stream side
  event h_ready, o_ready
  %h = exp(%x)
  record_event(h_ready)
  with stream(side) {
    WAIT
    %o = mul(%h, 2.0)
    %p = add(%o, 1.0)
    record_event(o_ready)
  }
  %q = sin(%x)
  %q2 = mul(%q, 3.0)
  wait_event(o_ready)
  %r = add(%p, %q2)
  return %r
}
"""

WAIT_STREAM = """graph g {
  input %x : f32[8]
  stream a
  stream b
  with stream(a) {
    wait_stream(default)
    %u = exp(%x)
    %u2 = mul(%u, 2.0)
  }
  with stream(b) {
    wait_stream(a)
    %v = add(%u2, 1.0)
  }
  %w = neg(%x)
  wait_stream(b)
  %r = add(%v, %w)
  return %r
}
"""

SYNC_DEALLOC = """graph g {
  input %x : f32[8]
  stream side
  event e, f
  %h = exp(%x)
  record_event(e)
  with stream(side) {
    wait_event(e)
    %o = mul(%h, 2.0)
    record_event(f)
  }
  sync_dealloc(%h, event=f, stream=default)
  %z = cos(%x)
  wait_stream(side)
  %r = add(%o, %z)
  return %r
}
"""

SYNCHRONIZE = """graph g {
  input %x : f32[8]
  stream side
  with stream(side) {
    wait_stream(default)
    %o = exp(%x)
  }
  synchronize()
  %t = add(%o, 1.0)
  synchronize()
  with stream(side) {
    %r = mul(%t, 2.0)
  }
  return %r
}
"""


def runs(src, x, seeds, extra=()):
    """--out tensor r for each seed (None where sgc failed)."""
    res = []
    for seed in seeds:
        rc, out, err, _ = S.run(src, {"x": x}, args=("--interleave=%d" % seed,) + extra)
        res.append(out["r"] if rc == 0 and out else err)
    return res


def all_equal(label, src, x, ref, extra=()):
    res = runs(src, x, SEEDS, extra)
    for seed, r in zip(SEEDS, res):
        if not isinstance(r, torch.Tensor):
            S.report(label, "seed %d: sgc failed: %s" % (seed, r))
            return
        why = compare(r, ref)
        if why:
            S.report(label, "seed %d: %s" % (seed, why))
            return
        if not torch.equal(r, res[0]):
            S.report(label, "seed %d differs from seed 0" % seed)
            return
    S.report(label, None)


x = rand([16], F32, -2, 2)
ref = torch.exp(x) * 2 + 1 + torch.sin(x) * 3
good = TWO_STREAMS.replace("WAIT", "wait_event(h_ready)")
racy = TWO_STREAMS.replace("WAIT", "")
all_equal("two streams with events: same result for 20 seeds", good, x, ref)

res = runs(racy, x, SEEDS, ("--allow-races",))
poisoned = [s for s, r in zip(SEEDS, res) if isinstance(r, torch.Tensor) and torch.isnan(r).any()]
fails = [r for r in res if not isinstance(r, torch.Tensor)]
S.report("without wait_event: NaN-poisoned for some seed",
         None if poisoned and not fails else "no seed gave NaN (%s)" % (fails[:1] or ""))
clean = [s for s, r in zip(SEEDS, res) if isinstance(r, torch.Tensor) and compare(r, ref) is None]
S.report("without wait_event: some seed still runs in a safe order",
         None if clean else "every seed poisoned")
again = runs(racy, x, [poisoned[0] if poisoned else 0], ("--allow-races",))[0]
S.report("same seed, same (racy) result",
         None if isinstance(again, torch.Tensor) and torch.equal(again.isnan(), res[poisoned[0] if poisoned else 0].isnan())
         else "differs")
rc, out, err, _ = S.run(racy, {"x": x}, args=("--allow-races",))
S.report("racy program without --interleave runs in program order",
         compare(out["r"], ref) if rc == 0 and out else "exit %d: %s" % (rc, err))

x8 = rand([8], F32, -2, 2)
all_equal("wait_stream chain over three streams", WAIT_STREAM, x8,
          torch.exp(x8) * 2 + 1 - x8)
all_equal("sync_dealloc after the consumer's event", SYNC_DEALLOC, x8,
          torch.exp(x8) * 2 + torch.cos(x8))
all_equal("synchronize orders both ways", SYNCHRONIZE, x8, (torch.exp(x8) + 1) * 2)

# releasing a buffer too early: the free on default does not wait for the
# use on side, so some seed reads it poisoned
EARLY_FREE = SYNC_DEALLOC.replace("sync_dealloc(%h, event=f, stream=default)",
                                  "sync_dealloc(%h, event=e, stream=default)")
res = runs(EARLY_FREE, x8, SEEDS, ("--allow-races",))
poisoned = [s for s, r in zip(SEEDS, res) if isinstance(r, torch.Tensor) and torch.isnan(r).any()]
S.report("sync_dealloc on the wrong event: poisoned for some seed",
         None if poisoned else "no seed gave NaN: %s" % ([r for r in res if not isinstance(r, torch.Tensor)][:1]))
S.finish()
