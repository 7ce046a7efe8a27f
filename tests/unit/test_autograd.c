/*
 * test_autograd.c - structural properties of the `autograd` pass that the
 * numeric tests (tests/torch/test_grad_ops.py, test_train_samples.py)
 * cannot see: the stream of each derived node (rules 3 and 4 of the
 * language), the derived block's flags, the saved marks, a derived block
 * taken as written, the snapshot of a version an in-place op overwrites
 * (the pass run right after sema, without functionalisation), and the
 * no-derivative error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"

typedef struct {
	Diag d;
	Module m;
	AstFile ast;
	char *errs;
	size_t errlen;
	int ok;      /* sema and autograd succeeded */
} Ctx;

/* Parses and checks src, then runs autograd on its graph (errors go to
 * c->errs). */
static Graph *
derive(Ctx *c, const char *src)
{
	ops_init();
	memset(c, 0, sizeof *c);
	diag_init(&c->d, "t.sg", src, strlen(src));
	c->d.out = open_memstream(&c->errs, &c->errlen);
	c->m.arena = arena_new();
	c->m.diag = &c->d;
	parse_file(src, strlen(src), &c->d, c->m.arena, &c->ast);
	assert_int_equal(c->d.nerrors, 0);
	assert_true(sema_module(&c->m, &c->ast, NULL, 0));
	Graph *g = c->m.graphs.v[0];
	PassOptions po = {.opt_level = 2};
	c->ok = autograd_run(g, &po, &c->d);
	fflush(c->d.out);
	if (c->ok)
		verify_graph(g, "autograd");
	return g;
}

/* Frees everything derive made (as main.c does). */
static void
done(Ctx *c)
{
	ast_free(&c->ast);
	module_free(&c->m);
	fclose(c->d.out);
	free(c->errs);
	diag_fini(&c->d);
	arena_free(c->m.arena);
}

/* The value called name (which must exist). */
static ValId
val(Graph *g, const char *name)
{
	uint32_t *slot = map_get(&g->valmap, name, strlen(name));
	assert_non_null(slot);
	return *slot;
}

/* The stream called name. */
static uint32_t
stream(Graph *g, const char *name)
{
	uint32_t *slot = map_get(&g->streammap, name, strlen(name));
	assert_non_null(slot);
	return *slot;
}

/* Whether node n reads value v. */
static int
reads(const Node *n, ValId v)
{
	for (uint32_t k = 0; k < n->nopnd; k++)
		if (n->opnd[k].kind == OK_VAL && n->opnd[k].v == v)
			return 1;
	return 0;
}

static const char two_streams[] =
    "graph g {\n"
    "  input %x : f32[4, 4]\n"
    "  param %w : f32[4, 4]\n"
    "  stream s1\n"
    "  event e, f\n"
    "  %a = matmul(%x, %w)\n"
    "  record_event(e)\n"
    "  with stream(s1) {\n"
    "    wait_event(e)\n"
    "    %b = tanh(%a)\n"
    "    record_event(f)\n"
    "  }\n"
    "  %c = exp(%a)\n"
    "  wait_event(f)\n"
    "  %d = add(%b, %c)\n"
    "  %l = sum(%d)\n"
    "  backward(%l)\n"
    "  optimizer sgd(lr=0.1)\n"
    "  return %l\n"
    "}\n";

/* Rule 3: derived nodes run on their forward node's stream; rule 4: %a's
 * two contributions are summed on the stream of its first user (tanh, on
 * s1), in the order backward makes them (exp's first); the update of %w
 * runs on its gradient's stream, followed by its del. */
static void
test_streams(void **state)
{
	(void)state;
	Ctx c;
	Graph *g = derive(&c, two_streams);
	assert_true(c.ok);
	uint32_t s1 = stream(g, "s1");
	ValId b = val(g, "b"), cv = val(g, "c"), x = val(g, "x");
	int adds = 0, in_block = 0, tanh_seen = 0, exp_seen = 0, upd = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op == OP_BACKWARD)
			in_block = 1;
		if (!in_block || n->op == OP_BACKWARD)
			continue;
		if (reads(n, b)) {
			assert_int_equal(n->stream, s1);
			tanh_seen = 1;
		}
		if (reads(n, cv)) {
			assert_int_equal(n->stream, 0);
			exp_seen = 1;
		}
		if (reads(n, x))
			assert_int_equal(n->stream, 0);
		if (n->op == OP_ADD) {
			adds++;
			assert_int_equal(n->stream, s1);
			/* first operand: exp's contribution (made on default) */
			const Node *def0 = &g->nodes.v[g->vals.v[n->opnd[0].v].def];
			assert_int_equal(def0->stream, 0);
			assert_true(reads(def0, cv));
		}
		if (n->op == OP_SGD_UPDATE_) {
			upd++;
			const Node *gd = &g->nodes.v[g->vals.v[n->opnd[1].v].def];
			assert_int_equal(n->stream, gd->stream);
			assert_string_equal(g->vals.v[n->opnd[1].v].name, "grad.w");
			assert_int_equal(g->nodes.v[i + 1].op, OP_DEL);
			assert_int_equal(g->nodes.v[i + 1].opnd[0].v, n->opnd[1].v);
		}
	}
	assert_int_equal(adds, 1);
	assert_int_equal(upd, 1);
	assert_true(tanh_seen && exp_seen);
	done(&c);
}

/* Every node of the block is flagged; exactly the forward results the
 * block reads are marked saved; running the pass again (the block is now
 * derived) changes nothing. */
static void
test_flags_saved_idempotent(void **state)
{
	(void)state;
	Ctx c;
	Graph *g = derive(&c, two_streams);
	assert_true(c.ok);
	uint8_t *read = calloc(g->vals.n, 1);
	int in_block = 0;
	NodeId bw = NONE;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op == OP_BACKWARD) {
			assert_true(n->flags & NF_BACKWARD);
			in_block = 1;
			bw = i;
			continue;
		}
		if (n->op == OP_BACKWARD_END)
			in_block = 0;
		if (!in_block)
			continue;
		assert_true(n->flags & NF_BACKWARD);
		assert_false(n->flags & NF_USER);
		for (uint32_t k = 0; k < n->nopnd; k++)
			if (n->opnd[k].kind == OK_VAL)
				read[n->opnd[k].v] = 1;
	}
	for (ValId v = 0; v < g->vals.n; v++) {
		Value *val = &g->vals.v[v];
		int fwd = val->kind == VK_NODE && val->def < bw;
		assert_int_equal(val->saved, fwd && read[v]);
	}
	assert_true(g->vals.v[val(g, "b")].saved);
	free(read);
	uint32_t nn = g->nodes.n, nv = g->vals.n, nr = g->rets.n;
	PassOptions po = {.opt_level = 2};
	assert_true(autograd_run(g, &po, &c.d));
	assert_int_equal(g->nodes.n, nn);
	assert_int_equal(g->vals.n, nv);
	assert_int_equal(g->rets.n, nr);
	done(&c);
}

/* Without functionalisation, mul_ overwrites %h while backward still needs
 * its old value (for %y's and mul_'s own derivatives): a copy is made in
 * forward right before the mul_, and the block reads the copy. */
static void
test_snapshot(void **state)
{
	(void)state;
	Ctx c;
	Graph *g = derive(&c,
	    "graph g {\n"
	    "  input %v : f32[3]\n"
	    "  param %w : f32[3]\n"
	    "  %h = exp(%w)\n"
	    "  %y = mul(%h, %v)\n"
	    "  mul_(%h, %w)\n"
	    "  %z = mul(%y, %h)\n"
	    "  %l = sum(%z)\n"
	    "  backward(%l)\n"
	    "  return %l\n"
	    "}\n");
	assert_true(c.ok);
	ValId snap = val(g, "h.saved"), h = val(g, "h");
	NodeId copy = NONE, mul_ = NONE, bw = NONE;
	int readers = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		Node *n = &g->nodes.v[i];
		if (n->op == OP_COPY_ && n->opnd[0].v == snap && n->opnd[1].v == h)
			copy = i;
		if (n->op == OP_MUL_)
			mul_ = i;
		if (n->op == OP_BACKWARD)
			bw = i;
		if (bw != NONE && i > bw && reads(n, snap))
			readers++;
	}
	assert_int_not_equal(copy, NONE);
	assert_int_equal(copy + 1, mul_);
	assert_int_equal(g->nodes.v[g->vals.v[snap].def].op, OP_ZEROS);
	assert_int_equal(readers, 2);
	done(&c);
}

/* An op without a derivative on the path is an error at its statement. */
static void
test_no_derivative(void **state)
{
	(void)state;
	Ctx c;
	derive(&c,
	    "graph g {\n"
	    "  param %w : f32[4]\n"
	    "  %b = all_reduce(%w, op=\"min\")\n"
	    "  %l = sum(%b)\n"
	    "  backward(%l)\n"
	    "  return %l\n"
	    "}\n");
	assert_false(c.ok);
	assert_non_null(strstr(c.errs, "t.sg:3:3: error: 'all_reduce' with op=\"min\" has no "
	                               "derivative"));
	done(&c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_streams),
		cmocka_unit_test(test_flags_saved_idempotent),
		cmocka_unit_test(test_snapshot),
		cmocka_unit_test(test_no_derivative),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
