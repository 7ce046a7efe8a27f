/*
 * test_streams.c - the stream passes' helpers that golden tests cannot see:
 * the happens-before clocks (races.c), fusion legality (fusion.c), the
 * memory plan with its independent checker (memplan.c), and the verifier's
 * checks of the schedule the passes store on the graph (schedule.c).
 *
 * Each test compiles a small .sg program through the whole pipeline, as
 * `sgc check` does, then asks questions about the result.  The checker is
 * shown to fail on plans made wrong on purpose: two buffers live at once,
 * and a buffer reused on another stream with no event after its last use.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"

typedef struct {
	Module m;
	AstFile ast;
	Diag d;
	char *err;      /* diagnostics */
	size_t errlen;
	Graph *g;
} T;

/* Compiles src; fails the test on any diagnostic. */
static T *
compile(const char *src, int opt_level)
{
	T *t = calloc(1, sizeof *t);
	assert_non_null(t);
	ops_init();
	diag_init(&t->d, "t.sg", src, strlen(src));
	t->d.out = open_memstream(&t->err, &t->errlen);
	t->m.arena = arena_new();
	t->m.diag = &t->d;
	map_init(&t->m.dimmap);
	parse_file(src, strlen(src), &t->d, t->m.arena, &t->ast);
	if (!t->d.nerrors)
		sema_module(&t->m, &t->ast, NULL, 0);
	PassOptions po = {.opt_level = opt_level};
	if (!t->d.nerrors)
		passes_run(&t->m, &po);
	fflush(t->d.out);
	if (t->d.nerrors)
		fail_msg("compiling failed:\n%s", t->err);
	t->g = t->m.graphs.v[0];
	return t;
}

static void
release(T *t)
{
	ast_free(&t->ast);
	module_free(&t->m);
	arena_free(t->m.arena);
	fclose(t->d.out);
	free(t->err);
	diag_fini(&t->d);
	free(t);
}

/* The node defining %name. */
static NodeId
def_of(T *t, const char *name)
{
	uint32_t *v = map_get(&t->g->valmap, name, strlen(name));
	assert_non_null(v);
	return t->g->vals.v[*v].def;
}

static ValId
val_of(T *t, const char *name)
{
	uint32_t *v = map_get(&t->g->valmap, name, strlen(name));
	assert_non_null(v);
	return *v;
}

/* ------------------------------------------------------------------ clocks */

static const char two_streams[] =
	"graph g {\n"
	"  input %x : f32[4]\n"
	"  stream side\n"
	"  event e\n"
	"  %a = exp(%x)\n"
	"  record_event(e)\n"
	"  %b = sin(%x)\n"
	"  with stream(side) {\n"
	"    wait_event(e)\n"
	"    %c = neg(%a)\n"
	"  }\n"
	"  wait_stream(side)\n"
	"  %d = add(%c, %b)\n"
	"  return %d\n"
	"}\n";

/* A wait orders what the record captured, not what came after it. */
static void
test_clocks(void **state)
{
	(void)state;
	T *t = compile(two_streams, 2);
	Hb h;
	hb_init(&h, t->g);
	for (NodeId i = 0; i < t->g->nodes.n; i++)
		hb_step(&h, i);
	NodeId a = def_of(t, "a"), b = def_of(t, "b"), c = def_of(t, "c");
	NodeId d = def_of(t, "d");
	const int32_t *at_c = hb_before(&h, c), *at_d = hb_before(&h, d);
	assert_true(HB_DONE(at_c, 0, a + 1));   /* recorded before e */
	assert_false(HB_DONE(at_c, 0, b + 1));  /* issued after e */
	assert_true(HB_DONE(at_d, 1, c + 1));   /* wait_stream(side) */
	/* The side stream does not know the call start by itself. */
	assert_false(HB_DONE(h.init + h.ns, 0, 0));
	assert_true(HB_DONE(h.init, 0, 0));
	hb_free(&h);
	release(t);
}

/* ------------------------------------------------------------------ fusion */

static const char fusion_src[] =
	"graph g {\n"
	"  input %x : f32[4]\n"
	"  stream side\n"
	"  event e\n"
	"  %a = exp(%x)\n"
	"  %b = sin(%a)\n"
	"  with stream(side) {\n"
	"    wait_stream(default)\n"
	"    %s = neg(%x)\n"
	"  }\n"
	"  %c = cos(%b)\n"
	"  record_event(e)\n"
	"  %d = add(%c, %x)\n"
	"  wait_stream(side)\n"
	"  %r = add(%d, %s)\n"
	"  return %r\n"
	"}\n";

static void
test_fusion(void **state)
{
	(void)state;
	T *t = compile(fusion_src, 2);
	NodeId a = def_of(t, "a"), b = def_of(t, "b"), c = def_of(t, "c");
	NodeId d = def_of(t, "d"), s = def_of(t, "s");
	assert_true(fusion_legal(t->g, a, b));
	/* side's wait_stream(default) between %b and %c waits for the work
	 * issued on default so far: %c may not join %b's kernel. */
	assert_false(fusion_legal(t->g, b, c));
	assert_false(fusion_legal(t->g, c, d));   /* record_event between */
	assert_false(fusion_legal(t->g, b, s));   /* other stream */
	assert_false(fusion_legal(t->g, a, a + 100000));
	FusionInfo fi;
	fusion_analyse(t->g, &fi);
	assert_int_equal(fi.region[a], fi.region[b]);
	assert_int_not_equal(fi.region[c], fi.region[d]);
	assert_int_not_equal(fi.region[b], fi.region[s]);
	for (NodeId i = 0; i < t->g->nodes.n; i++) {
		uint32_t tg;
		if (ir_sync_of(&t->g->nodes.v[i], &tg) >= 0)
			assert_int_equal(fi.region[i], NONE);
	}
	fusion_free(&fi);
	release(t);
}

/* Nodes of another stream between two nodes do not stop their fusion; a
 * sync op of any stream does. */
static void
test_fusion_across_streams(void **state)
{
	(void)state;
	T *t = compile(
		"graph g {\n"
		"  input %x : f32[4]\n"
		"  stream side\n"
		"  with stream(side) {\n"
		"    wait_stream(default)\n"
		"    %s = neg(%x)\n"
		"    %s2 = exp(%s)\n"
		"  }\n"
		"  %a = exp(%x)\n"
		"  with stream(side) {\n"
		"    %s3 = sin(%s2)\n"
		"  }\n"
		"  %b = sin(%a)\n"
		"  wait_stream(side)\n"
		"  %r = add(%b, %s3)\n"
		"  return %r\n"
		"}\n", 2);
	assert_true(fusion_legal(t->g, def_of(t, "a"), def_of(t, "b")));
	assert_true(fusion_legal(t->g, def_of(t, "s2"), def_of(t, "s3")));
	assert_false(fusion_legal(t->g, def_of(t, "b"), def_of(t, "r")));
	release(t);
}

/* ------------------------------------------------------------------ memory plan */

static uint32_t
buf(T *t, const MemPlan *mp, const char *name)
{
	uint32_t b = mp->bufof[val_of(t, name)];
	assert_int_not_equal(b, NONE);
	return b;
}

/* %a and %b are both live at %c: the plan keeps them apart, and the
 * checker rejects a plan that puts them together. */
static void
test_memplan_live_together(void **state)
{
	(void)state;
	T *t = compile(
		"graph g {\n"
		"  input %x : f32[64]\n"
		"  %a = exp(%x)\n"
		"  %b = sin(%x)\n"
		"  %c = add(%a, %b)\n"
		"  %d = cos(%c)\n"
		"  %e = neg(%d)\n"
		"  return %e\n"
		"}\n", 2);
	MemPlan mp;
	char why[256];
	memplan_build(t->g, 2, &mp);
	uint32_t a = buf(t, &mp, "a"), b = buf(t, &mp, "b"), c = buf(t, &mp, "c");
	uint32_t d = buf(t, &mp, "d");
	assert_int_equal(memplan_verify(t->g, &mp, why), 1);
	assert_true(mp.buf[a].offset != mp.buf[b].offset);
	/* %d reuses the memory of %a or %b, which are dead by then. */
	assert_true(mp.buf[d].offset == mp.buf[a].offset ||
	            mp.buf[d].offset == mp.buf[b].offset);
	assert_true(mp.peak < mp.unshared);
	assert_int_equal(mp.buf[buf(t, &mp, "e")].where, MEM_OUTPUT);
	mp.buf[b].offset = mp.buf[a].offset;
	assert_int_equal(memplan_verify(t->g, &mp, why), 0);
	assert_non_null(strstr(why, "share memory"));
	(void)c;
	memplan_free(&mp);

	/* -O0: no reuse at all. */
	memplan_build(t->g, 0, &mp);
	assert_int_equal(memplan_verify(t->g, &mp, why), 1);
	assert_int_equal(mp.peak, mp.unshared);
	memplan_free(&mp);
	release(t);
}

/* %a is freed on default; %s on side could take its memory only after an
 * event orders it after %a's last use.  Without one the planner keeps them
 * apart, and the checker rejects a plan that shares. */
static void
test_memplan_other_stream(void **state)
{
	(void)state;
	T *t = compile(
		"graph g {\n"
		"  input %x : f32[64]\n"
		"  stream side\n"
		"  event go, a_done\n"
		"  record_event(go)\n"
		"  %a = exp(%x)\n"
		"  %b = sin(%a)\n"
		"  with stream(side) {\n"
		"    wait_event(go)\n"
		"    %s = neg(%x)\n"
		"    %s2 = cos(%s)\n"
		"  }\n"
		"  record_event(a_done)\n"
		"  with stream(side) {\n"
		"    wait_event(a_done)\n"
		"    %u = exp(%s2)\n"
		"    %u2 = sin(%u)\n"
		"  }\n"
		"  wait_stream(side)\n"
		"  %r = add(%b, %u2)\n"
		"  return %r\n"
		"}\n", 2);
	MemPlan mp;
	char why[256];
	memplan_build(t->g, 2, &mp);
	uint32_t a = buf(t, &mp, "a"), s = buf(t, &mp, "s"), u = buf(t, &mp, "u");
	assert_int_equal(memplan_verify(t->g, &mp, why), 1);
	assert_true(mp.buf[a].offset != mp.buf[s].offset);
	/* After waiting for a_done, side may take %a's memory. */
	assert_true(mp.buf[u].offset == mp.buf[a].offset ||
	            mp.buf[u].offset == mp.buf[s].offset);
	mp.buf[s].offset = mp.buf[a].offset;
	assert_int_equal(memplan_verify(t->g, &mp, why), 0);
	memplan_free(&mp);
	release(t);
}

/* ------------------------------------------------------------------ the schedule */

/* Runs verify_graph on t's graph in a child process (an internal error
 * exits); returns its exit status, with its standard error in err. */
static int
verify_in_child(T *t, char *err, size_t cap)
{
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		verify_graph(t->g, "test");
		_exit(0);
	}
	close(fd[1]);
	size_t n = 0;
	ssize_t r;
	while (n + 1 < cap && (r = read(fd[0], err + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	err[n] = 0;
	close(fd[0]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The passes store their groups on the graph: %a and %b fuse; %c (after
 * side's wait for default) and %s (another stream) are kernels of their
 * own; the verifier accepts the schedule as made. */
static void
test_schedule_groups(void **state)
{
	(void)state;
	T *t = compile(fusion_src, 2);
	const Sched *s = t->g->sched;
	assert_non_null(s);
	assert_true(s->planned);
	NodeId a = def_of(t, "a"), b = def_of(t, "b"), c = def_of(t, "c");
	NodeId sn = def_of(t, "s");
	assert_true(s->group[a] >= 0);
	assert_int_equal(s->group[a], s->group[b]);
	assert_int_not_equal(s->group[c], s->group[b]);
	assert_int_not_equal(s->group[sn], s->group[a]);
	assert_true(s->reg[val_of(t, "a")]);   /* used only inside its group */
	assert_false(s->reg[val_of(t, "b")]);  /* read by %c's kernel */
	char err[4096];
	assert_int_equal(verify_in_child(t, err, sizeof err), 0);
	release(t);
}

/* Group k of t's schedule made to hold node m too (after its members). */
static void
join_group(T *t, int k, NodeId m)
{
	Sched *s = t->g->sched;
	FuseGroup *grp = &s->groups.v[k];
	NodeId *nodes = arena_alloc(s->a, (grp->n + 2) * sizeof *nodes);
	memcpy(nodes, grp->nodes, grp->n * sizeof *nodes);
	nodes[grp->n] = m;
	grp->nodes = nodes;
	grp->n++;
	s->group[m] = k;
}

/* A group spanning two streams is an internal error after the pass. */
static void
test_verify_group_two_streams(void **state)
{
	(void)state;
	T *t = compile(fusion_src, 2);
	join_group(t, t->g->sched->group[def_of(t, "a")], def_of(t, "s"));
	char err[4096];
	assert_int_equal(verify_in_child(t, err, sizeof err), 4);
	assert_non_null(strstr(err, "internal compiler error"));
	assert_non_null(strstr(err, "after pass 'test'"));
	assert_non_null(strstr(err, "spans streams 'default' and 'side'"));
	release(t);
}

/* So is a group across a sync: record_event between %c and %d. */
static void
test_verify_group_across_sync(void **state)
{
	(void)state;
	T *t = compile(fusion_src, 2);
	NodeId c = def_of(t, "c"), d = def_of(t, "d");
	assert_true(t->g->sched->group[c] >= 0);
	join_group(t, t->g->sched->group[c], d);
	char err[4096];
	assert_int_equal(verify_in_child(t, err, sizeof err), 4);
	assert_non_null(strstr(err, "spans a sync"));
	release(t);
}

/* A plan in which two buffers live at once share bytes is an internal
 * error too (-O0: every value has a buffer of its own). */
static void
test_verify_plan_overlap(void **state)
{
	(void)state;
	T *t = compile(
		"graph g {\n"
		"  input %x : f32[64]\n"
		"  %a = exp(%x)\n"
		"  %b = sin(%x)\n"
		"  %c = add(%a, %b)\n"
		"  return %c\n"
		"}\n", 0);
	Sched *s = t->g->sched;
	assert_true(s->planned);
	assert_int_equal(s->groups.n, 0);
	char err[4096];
	assert_int_equal(verify_in_child(t, err, sizeof err), 0);
	MemBuf *a = &s->plan.buf[buf(t, &s->plan, "a")];
	MemBuf *b = &s->plan.buf[buf(t, &s->plan, "b")];
	assert_true(a->offset != b->offset);
	b->offset = a->offset;
	assert_int_equal(verify_in_child(t, err, sizeof err), 4);
	assert_non_null(strstr(err, "the memory plan is wrong"));
	assert_non_null(strstr(err, "share memory"));
	b->offset = s->plan.peak; /* beyond the arena */
	assert_int_equal(verify_in_child(t, err, sizeof err), 4);
	assert_non_null(strstr(err, "lies outside its arena"));
	release(t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clocks),
		cmocka_unit_test(test_fusion),
		cmocka_unit_test(test_fusion_across_streams),
		cmocka_unit_test(test_memplan_live_together),
		cmocka_unit_test(test_memplan_other_stream),
		cmocka_unit_test(test_schedule_groups),
		cmocka_unit_test(test_verify_group_two_streams),
		cmocka_unit_test(test_verify_group_across_sync),
		cmocka_unit_test(test_verify_plan_overlap),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
