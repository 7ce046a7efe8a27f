/*
 * test_parser.c - parse_file (grammar/parser.y): the AST of every
 * statement form with its locations, the structural and syntax error
 * messages, error recovery, and inputs built to break a parser (garbage,
 * NUL bytes, huge names, deep nesting, many statements).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "sgc.h"

/* One parse: the AST and the diagnostics printed. */
typedef struct {
	Diag d;
	Arena *a;
	AstFile f;
	FILE *out;
	char *msgs;
	size_t msglen;
} Parse;

static void
parse_n(Parse *p, const char *src, size_t len)
{
	memset(p, 0, sizeof *p);
	p->out = open_memstream(&p->msgs, &p->msglen);
	diag_init(&p->d, "t.sg", src, len);
	p->d.out = p->out;
	p->a = arena_new();
	parse_file(src, len, &p->d, p->a, &p->f);
	fflush(p->out);
}

static void
parse(Parse *p, const char *src)
{
	parse_n(p, src, strlen(src));
}

static void
parse_done(Parse *p)
{
	for (uint32_t i = 0; i < p->f.graphs.n; i++)
		vec_free(&p->f.graphs.v[i].stmts);
	vec_free(&p->f.graphs);
	vec_free(&p->f.dims);
	fclose(p->out);
	free(p->msgs);
	diag_fini(&p->d);
	arena_free(p->a);
}

static void
assert_msg(Parse *p, const char *want)
{
	if (!strstr(p->msgs, want)) {
		print_error("wanted '%s' in:\n%s\n", want, p->msgs);
		fail();
	}
}

/* Exactly n errors, and nothing printed when n is 0. */
static void
assert_errors(Parse *p, int n)
{
	if (p->d.nerrors != n) {
		print_error("%d errors, wanted %d:\n%s\n", p->d.nerrors, n, p->msgs);
		fail();
	}
}

static void
assert_loc(Loc l, uint32_t line, uint32_t col, uint32_t len)
{
	if (l.line != line || l.col != col || l.len != len) {
		print_error("loc %u:%u+%u, wanted %u:%u+%u\n", l.line, l.col,
		            l.len, line, col, len);
		fail();
	}
}

static AstStmt *
stmt(Parse *p, uint32_t g, uint32_t i)
{
	assert_true(g < p->f.graphs.n);
	assert_true(i < p->f.graphs.v[g].stmts.n);
	return &p->f.graphs.v[g].stmts.v[i];
}

/* ------------------------------------------------------------------ the spec's example */

static const char mlp[] =
	"# mlp.sg: a two-layer MLP, one SGD step per call\n"
	"dim B = 64\n"
	"dim D = 1024\n"
	"\n"
	"graph mlp {\n"
	"  input  %x  : f32[B, D]\n"
	"  input  %y  : f32[B, D]\n"
	"  param  %w1 : f32[D, 4096]\n"
	"  param  %w2 : f32[4096, D]\n"
	"  stream side\n"
	"  event  h_ready\n"
	"\n"
	"  %h    = matmul(%x, %w1)\n"
	"  %a    = gelu(%h)\n"
	"  record_event(h_ready)\n"
	"  with stream(side) {\n"
	"    wait_event(h_ready)\n"
	"    %o = matmul(%a, %w2)\n"
	"  }\n"
	"  wait_stream(side)\n"
	"  %loss = mse_loss(%o, %y)\n"
	"  backward(%loss)\n"
	"  optimizer sgd(lr=0.001)\n"
	"  return %loss\n"
	"}\n";

static void
test_mlp(void **state)
{
	(void)state;
	Parse p;
	parse(&p, mlp);
	assert_errors(&p, 0);
	assert_int_equal(p.msglen, 0);

	assert_int_equal(p.f.dims.n, 2);
	assert_string_equal(p.f.dims.v[0].name, "B");
	assert_int_equal(p.f.dims.v[0].n, 64);
	assert_loc(p.f.dims.v[0].loc, 2, 5, 1);
	assert_string_equal(p.f.dims.v[1].name, "D");
	assert_int_equal(p.f.dims.v[1].n, 1024);

	assert_int_equal(p.f.graphs.n, 1);
	AstGraph *g = &p.f.graphs.v[0];
	assert_string_equal(g->name, "mlp");
	assert_loc(g->loc, 5, 7, 3);
	assert_int_equal(g->stmts.n, 16);

	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(s->kind, AS_INPUT);
	assert_loc(s->loc, 6, 3, 5);
	assert_string_equal(s->name, "x");
	assert_loc(s->nameloc, 6, 10, 2);
	assert_string_equal(s->type.dtype, "f32");
	assert_loc(s->type.dtloc, 6, 16, 3);
	assert_int_equal(s->type.ndims, 2);
	assert_string_equal(s->type.dims[0].name, "B");
	assert_loc(s->type.dims[0].loc, 6, 20, 1);
	assert_string_equal(s->type.dims[1].name, "D");
	assert_null(s->stream);

	s = stmt(&p, 0, 2);
	assert_int_equal(s->kind, AS_PARAM);
	assert_string_equal(s->name, "w1");
	assert_string_equal(s->type.dims[0].name, "D");
	assert_null(s->type.dims[1].name);
	assert_int_equal(s->type.dims[1].n, 4096);
	assert_loc(s->type.dims[1].loc, 8, 23, 4);

	s = stmt(&p, 0, 4);
	assert_int_equal(s->kind, AS_STREAM);
	assert_string_equal(s->name, "side");
	assert_loc(s->nameloc, 10, 10, 4);
	assert_int_equal(s->nargs, 0);

	s = stmt(&p, 0, 5);
	assert_int_equal(s->kind, AS_EVENT);
	assert_int_equal(s->nnames, 1);
	assert_string_equal(s->names[0], "h_ready");
	assert_loc(s->namelocs[0], 11, 10, 7);

	s = stmt(&p, 0, 6);
	assert_int_equal(s->kind, AS_OP);
	assert_loc(s->loc, 13, 3, 2);
	assert_int_equal(s->nnames, 1);
	assert_string_equal(s->names[0], "h");
	assert_loc(s->namelocs[0], 13, 3, 2);
	assert_string_equal(s->op, "matmul");
	assert_loc(s->oploc, 13, 11, 6);
	assert_int_equal(s->nargs, 2);
	assert_int_equal(s->args[0].kind, AA_VALUE);
	assert_null(s->args[0].key);
	assert_string_equal(s->args[0].s, "x");
	assert_loc(s->args[0].loc, 13, 18, 2);
	assert_string_equal(s->args[1].s, "w1");
	assert_loc(s->args[1].loc, 13, 22, 3);

	s = stmt(&p, 0, 8);
	assert_int_equal(s->kind, AS_OP);
	assert_int_equal(s->nnames, 0);
	assert_string_equal(s->op, "record_event");
	assert_loc(s->loc, 15, 3, 12);
	assert_int_equal(s->args[0].kind, AA_IDENT);
	assert_string_equal(s->args[0].s, "h_ready");
	assert_null(s->stream);

	/* inside with stream(side) */
	for (uint32_t i = 9; i <= 10; i++) {
		s = stmt(&p, 0, i);
		assert_non_null(s->stream);
		assert_string_equal(s->stream, "side");
		assert_loc(s->streamloc, 16, 15, 4);
	}
	assert_string_equal(stmt(&p, 0, 9)->op, "wait_event");
	assert_loc(stmt(&p, 0, 9)->loc, 17, 5, 10);
	assert_string_equal(stmt(&p, 0, 10)->names[0], "o");

	s = stmt(&p, 0, 11);
	assert_string_equal(s->op, "wait_stream");
	assert_null(s->stream);

	s = stmt(&p, 0, 13);
	assert_int_equal(s->kind, AS_BACKWARD);
	assert_int_equal(s->has_block, 0);
	assert_loc(s->loc, 22, 3, 8);
	assert_int_equal(s->nargs, 1);
	assert_string_equal(s->args[0].s, "loss");

	s = stmt(&p, 0, 14);
	assert_int_equal(s->kind, AS_OPTIMIZER);
	assert_string_equal(s->op, "sgd");
	assert_loc(s->oploc, 23, 13, 3);
	assert_int_equal(s->nargs, 1);
	assert_string_equal(s->args[0].key, "lr");
	assert_loc(s->args[0].keyloc, 23, 17, 2);
	assert_int_equal(s->args[0].kind, AA_FLOAT);
	assert_true(s->args[0].f == 0.001);
	assert_loc(s->args[0].loc, 23, 20, 5);

	s = stmt(&p, 0, 15);
	assert_int_equal(s->kind, AS_RETURN);
	assert_int_equal(s->nnames, 1);
	assert_string_equal(s->names[0], "loss");
	assert_loc(s->namelocs[0], 24, 10, 5);
	parse_done(&p);
}

/* ------------------------------------------------------------------ statement forms */

static void
test_declarations(void **state)
{
	(void)state;
	Parse p;
	parse(&p,
	      "graph g {\n"
	      "  const %mask : bool[]\n"
	      "  input %i : i64[8, N, 2,]\n"
	      "  stream hi (priority=-1)\n"
	      "  event a, b,c\n"
	      "  extern event done\n"
	      "}\n");
	assert_errors(&p, 0);
	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(s->kind, AS_CONST);
	assert_string_equal(s->type.dtype, "bool");
	assert_int_equal(s->type.ndims, 0);
	s = stmt(&p, 0, 1);
	assert_int_equal(s->kind, AS_INPUT);
	assert_int_equal(s->type.ndims, 3);
	assert_int_equal(s->type.dims[0].n, 8);
	assert_string_equal(s->type.dims[1].name, "N");
	assert_int_equal(s->type.dims[2].n, 2);
	s = stmt(&p, 0, 2);
	assert_int_equal(s->kind, AS_STREAM);
	assert_string_equal(s->name, "hi");
	assert_int_equal(s->nargs, 1);
	assert_string_equal(s->args[0].key, "priority");
	assert_int_equal(s->args[0].kind, AA_INT);
	assert_int_equal(s->args[0].i, -1);
	s = stmt(&p, 0, 3);
	assert_int_equal(s->kind, AS_EVENT);
	assert_int_equal(s->nnames, 3);
	assert_string_equal(s->names[2], "c");
	assert_loc(s->namelocs[2], 5, 14, 1);
	s = stmt(&p, 0, 4);
	assert_int_equal(s->kind, AS_EXTERN_EVENT);
	assert_loc(s->loc, 6, 3, 6);
	assert_int_equal(s->nnames, 1);
	assert_string_equal(s->names[0], "done");
	parse_done(&p);
}

static void
test_statements(void **state)
{
	(void)state;
	Parse p;
	parse(&p,
	      "graph g {\n"
	      "  %v, %m = var_mean(%x, dims=[0, -1], keepdim=false)\n"
	      "  %p, %q = chunk(%x, chunks=2, dim=0,)\n"
	      "  synchronize()\n"
	      "  del %p\n"
	      "  offload %q\n"
	      "  backward(%loss, grad_sync=all_reduce)\n"
	      "  optimizer adamw(lr=1e-3, beta1=0.9, fused=true)\n"
	      "  optimizer sgd\n"
	      "  return\n"
	      "  return %a, %b\n"
	      "}\n");
	assert_errors(&p, 0);
	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(s->kind, AS_OP);
	assert_int_equal(s->nnames, 2);
	assert_string_equal(s->names[0], "v");
	assert_string_equal(s->names[1], "m");
	assert_loc(s->namelocs[1], 2, 7, 2);
	assert_string_equal(s->op, "var_mean");
	assert_int_equal(s->nargs, 3);
	AstArg *dims = &s->args[1];
	assert_string_equal(dims->key, "dims");
	assert_int_equal(dims->kind, AA_LIST);
	assert_loc(dims->loc, 2, 30, 1);
	assert_int_equal(dims->nitems, 2);
	assert_int_equal(dims->items[0].i, 0);
	assert_int_equal(dims->items[1].i, -1);
	assert_loc(dims->items[1].loc, 2, 34, 2);
	assert_int_equal(s->args[2].kind, AA_BOOL);
	assert_int_equal(s->args[2].b, 0);

	s = stmt(&p, 0, 1);
	assert_int_equal(s->nargs, 3); /* trailing comma */
	assert_string_equal(s->args[2].key, "dim"); /* a keyword as a key */
	assert_loc(s->args[2].keyloc, 3, 32, 3);

	s = stmt(&p, 0, 2);
	assert_int_equal(s->kind, AS_OP);
	assert_string_equal(s->op, "synchronize");
	assert_int_equal(s->nargs, 0);
	assert_int_equal(s->nnames, 0);

	s = stmt(&p, 0, 3);
	assert_int_equal(s->kind, AS_DEL);
	assert_string_equal(s->name, "p");
	assert_loc(s->nameloc, 5, 7, 2);
	s = stmt(&p, 0, 4);
	assert_int_equal(s->kind, AS_OFFLOAD);
	assert_string_equal(s->name, "q");

	s = stmt(&p, 0, 5);
	assert_int_equal(s->kind, AS_BACKWARD);
	assert_int_equal(s->nargs, 2);
	assert_string_equal(s->args[1].key, "grad_sync");
	assert_int_equal(s->args[1].kind, AA_IDENT);
	assert_string_equal(s->args[1].s, "all_reduce");

	s = stmt(&p, 0, 6);
	assert_int_equal(s->kind, AS_OPTIMIZER);
	assert_string_equal(s->op, "adamw");
	assert_int_equal(s->nargs, 3);
	assert_int_equal(s->args[2].kind, AA_BOOL);
	assert_int_equal(s->args[2].b, 1);
	s = stmt(&p, 0, 7);
	assert_int_equal(s->kind, AS_OPTIMIZER);
	assert_string_equal(s->op, "sgd");
	assert_int_equal(s->nargs, 0);

	s = stmt(&p, 0, 8);
	assert_int_equal(s->kind, AS_RETURN);
	assert_int_equal(s->nnames, 0);
	s = stmt(&p, 0, 9);
	assert_int_equal(s->nnames, 2);
	assert_string_equal(s->names[1], "b");
	parse_done(&p);
}

static void
test_argument_kinds(void **state)
{
	(void)state;
	Parse p;
	parse(&p,
	      "graph g {\n"
	      "  %r = f(%x, 1.0, -2, true, \"s\\\"q\", bf16, [a, 1, 2.5, \"t\", %y],\n"
	      "         [], stream=side, dim=N, approximate=\"tanh\",\n"
	      "         value=-inf, xs=[1,\n"
	      "                      2,])\n"
	      "}\n");
	assert_errors(&p, 0);
	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(s->nargs, 13);
	AstArg *a = s->args;
	assert_int_equal(a[0].kind, AA_VALUE);
	assert_int_equal(a[1].kind, AA_FLOAT);
	assert_true(a[1].f == 1.0);
	assert_int_equal(a[2].kind, AA_INT);
	assert_int_equal(a[2].i, -2);
	assert_int_equal(a[3].kind, AA_BOOL);
	assert_int_equal(a[4].kind, AA_STRING);
	assert_string_equal(a[4].s, "s\"q");
	assert_int_equal(a[4].slen, 3);
	assert_int_equal(a[5].kind, AA_IDENT);
	assert_string_equal(a[5].s, "bf16");
	assert_int_equal(a[6].kind, AA_LIST);
	assert_int_equal(a[6].nitems, 5);
	assert_int_equal(a[6].items[0].kind, AA_IDENT);
	assert_int_equal(a[6].items[2].kind, AA_FLOAT);
	assert_int_equal(a[6].items[3].kind, AA_STRING);
	assert_int_equal(a[6].items[4].kind, AA_VALUE);
	assert_null(a[6].items[0].key);
	assert_int_equal(a[7].kind, AA_LIST);
	assert_int_equal(a[7].nitems, 0);
	assert_loc(a[7].loc, 3, 10, 1);
	assert_string_equal(a[8].key, "stream");
	assert_string_equal(a[8].s, "side");
	assert_string_equal(a[9].key, "dim");
	assert_string_equal(a[10].s, "tanh");
	assert_true(isinf(a[11].f) && a[11].f < 0);
	assert_int_equal(a[12].nitems, 2);
	assert_loc(a[12].items[1].loc, 5, 23, 1);
	parse_done(&p);
}

static void
test_stream_scopes(void **state)
{
	(void)state;
	Parse p;
	parse(&p,
	      "graph g {\n"
	      "  with stream(a) {\n"
	      "    %x = f()\n"
	      "    with stream(b) {  # inner wins\n"
	      "      %y = f()\n"
	      "    }\n"
	      "    %z = f()\n"
	      "  }\n"
	      "  %w = f()\n"
	      "  with stream(c) {}\n"
	      "}\n");
	assert_errors(&p, 0);
	assert_int_equal(p.f.graphs.v[0].stmts.n, 4);
	assert_string_equal(stmt(&p, 0, 0)->stream, "a");
	assert_loc(stmt(&p, 0, 0)->streamloc, 2, 15, 1);
	assert_string_equal(stmt(&p, 0, 1)->stream, "b");
	assert_loc(stmt(&p, 0, 1)->streamloc, 4, 17, 1);
	assert_string_equal(stmt(&p, 0, 2)->stream, "a");
	assert_null(stmt(&p, 0, 3)->stream);
	parse_done(&p);
}

static void
test_backward_block(void **state)
{
	(void)state;
	Parse p;
	parse(&p,
	      "graph g {\n"
	      "  with stream(s) {\n"
	      "    backward(%loss) {\n"
	      "      %grad.w = f(%loss)\n"
	      "      with stream(t) {\n"
	      "        %u = g()\n"
	      "      }\n"
	      "    }\n"
	      "  }\n"
	      "  return %loss\n"
	      "}\n");
	assert_errors(&p, 0);
	assert_int_equal(p.f.graphs.v[0].stmts.n, 5);
	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(s->kind, AS_BACKWARD);
	assert_int_equal(s->has_block, 1);
	assert_int_equal(s->in_backward, 0);
	assert_string_equal(s->stream, "s");
	s = stmt(&p, 0, 1);
	assert_int_equal(s->kind, AS_OP);
	assert_int_equal(s->in_backward, 1);
	assert_string_equal(s->names[0], "grad.w");
	assert_string_equal(s->stream, "s");
	s = stmt(&p, 0, 2);
	assert_int_equal(s->in_backward, 1);
	assert_string_equal(s->stream, "t");
	s = stmt(&p, 0, 3);
	assert_int_equal(s->kind, AS_BACKWARD_END);
	assert_int_equal(s->in_backward, 0);
	assert_loc(s->loc, 8, 5, 1);
	assert_string_equal(s->stream, "s");
	s = stmt(&p, 0, 4);
	assert_int_equal(s->kind, AS_RETURN);
	assert_int_equal(s->in_backward, 0);
	assert_null(s->stream);
	parse_done(&p);
}

static void
test_several_graphs(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph a {}\n# between\ngraph b {\n  %x = f()\n}  # done\ndim Z = 3");
	assert_errors(&p, 0);
	assert_int_equal(p.f.graphs.n, 2);
	assert_int_equal(p.f.graphs.v[0].stmts.n, 0);
	assert_string_equal(p.f.graphs.v[1].name, "b");
	assert_int_equal(p.f.graphs.v[1].stmts.n, 1);
	assert_int_equal(p.f.dims.n, 1);
	assert_int_equal(p.f.dims.v[0].n, 3);
	parse_done(&p);
}

static void
test_crlf(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\r\n  %a = f(x=[1,\r\n    2])\r\n}\r\n");
	assert_errors(&p, 0);
	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(s->args[0].nitems, 2);
	assert_loc(s->args[0].items[1].loc, 3, 5, 1);
	parse_done(&p);
}

/* ------------------------------------------------------------------ structural errors */

static void
test_unclosed_block(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  with stream(s) {\n    %a = f()\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:5:1: error: '}' expected (to close '{' at line 1)");
	/* what parsed is kept */
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
	parse_done(&p);
}

static void
test_unexpected_brace(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n}\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:3:1: error: unexpected '}'");
	parse_done(&p);
}

static void
test_nested_graph(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  graph h {\n    %a = f()\n  }\n  %b = f()\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:2:3: error: graph definitions cannot nest");
	assert_msg(&p, "t.sg:1:7: note: graph 'g' starts here");
	/* the braces still match: %b is in g, %a was dropped */
	assert_int_equal(p.f.graphs.n, 1);
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
	assert_string_equal(stmt(&p, 0, 0)->names[0], "b");
	parse_done(&p);
}

static void
test_dim_in_graph(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  dim X = 3\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:2:3: error: 'dim' is only allowed at top level");
	assert_int_equal(p.f.dims.n, 0);
	parse_done(&p);
}

static void
test_outside_graph(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "input %x : f32[]\nwith stream(s) {\n  %a = f()\n}\nbackward(%l) {\n}\n");
	assert_errors(&p, 3);
	assert_msg(&p, "t.sg:1:1: error: statement outside a graph");
	assert_msg(&p, "t.sg:2:1: error: statement outside a graph");
	assert_msg(&p, "t.sg:5:1: error: statement outside a graph");
	assert_int_equal(p.f.graphs.n, 0);
	parse_done(&p);
}

static void
test_backward_nesting(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  backward(%l) {\n    backward(%m) {\n    }\n  }\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:3:5: error: backward blocks cannot nest");
	parse_done(&p);
}

static void
test_argument_order(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  %a = f(%x, dim=1, %y)\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:2:21: error: positional argument after a keyword argument");
	parse_done(&p);
}

static void
test_nested_list(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  %a = f(x=[1, [2]])\n  %b = f()\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:2:16: error: lists cannot nest");
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1); /* %b */
	parse_done(&p);
}

static void
test_block_layout(void **state)
{
	(void)state;
	Parse p;
	/* '{' ends its line; the block is open all the same. */
	parse(&p, "graph g { %a = f()\n  %b = f()\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:1:11: error: expected newline or '}' before '%a'");
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
	parse_done(&p);
	/* '}' stands alone */
	parse(&p, "graph g {\n  %a = f() }\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:2:12: error: expected newline before '}'");
	parse_done(&p);
}

/* ------------------------------------------------------------------ syntax errors */

static void
test_syntax_messages(void **state)
{
	(void)state;
	Parse p;
	parse(&p,
	      "graph g {\n"
	      "  %a = matmul(%x %y)\n"
	      "  %c = foo bar\n"
	      "  %d =\n"
	      "  : x\n"
	      "  input %v f32[]\n"
	      "  %ok = f()\n"
	      "}\n");
	assert_errors(&p, 5);
	assert_msg(&p, "t.sg:2:18: error: expected ')' or ',' before '%y'");
	assert_msg(&p, "t.sg:3:12: error: expected '(' before 'bar'");
	assert_msg(&p, "t.sg:4:7: error: expected a name before newline");
	assert_msg(&p, "t.sg:5:3: error: unexpected ':'");
	assert_msg(&p, "t.sg:6:12: error: expected ':' before 'f32'");
	/* every error was recovered from: the last statement is there */
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
	assert_string_equal(stmt(&p, 0, 0)->names[0], "ok");
	parse_done(&p);
}

static void
test_unclosed_paren(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "graph g {\n  %a = add(%x, %y\n  %b = relu(%a)\n  %c = f()\n}\n");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:3:3: error: ')' expected (to close '(' at line 2) before '%b'");
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
	assert_string_equal(stmt(&p, 0, 0)->names[0], "c");
	parse_done(&p);
	parse(&p, "graph g {\n  %a = f(x=[1, 2");
	assert_errors(&p, 2);
	assert_msg(&p, "t.sg:2:17: error: ']' expected (to close '[' at line 2)");
	assert_msg(&p, "t.sg:2:17: error: '}' expected (to close '{' at line 1)");
	parse_done(&p);
}

static void
test_no_second_message(void **state)
{
	(void)state;
	Parse p;
	/* A token the scanner reported is not reported again by the parser. */
	parse(&p, "graph g {\n  %a = 12abc(%x)\n  %b = f(\"x\n  %c = f(%x $ %y)\n  %d = f()\n}\n");
	assert_errors(&p, 3);
	assert_msg(&p, "t.sg:2:8: error: invalid number '12abc'");
	assert_msg(&p, "t.sg:3:10: error: unterminated string");
	assert_msg(&p, "t.sg:4:13: error: stray '$' in program");
	assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
	parse_done(&p);
}

static void
test_many_errors_stop(void **state)
{
	(void)state;
	/* 100 bad lines: 20 reported, then the parse stops. */
	char src[4096];
	size_t o = (size_t)snprintf(src, sizeof src, "graph g {\n");
	for (int i = 0; i < 100; i++)
		o += (size_t)snprintf(src + o, sizeof src - o, "  %%a = f(\n)x\n");
	Parse p;
	parse(&p, src);
	assert_true(p.d.nerrors >= 20);
	assert_true(diag_full(&p.d));
	assert_msg(&p, "too many errors emitted");
	/* each bad line's `%a = f()` parsed before its error; none after */
	assert_true(p.f.graphs.v[0].stmts.n <= 20);
	parse_done(&p);
}

/* ------------------------------------------------------------------ robustness */

static void
test_empty_inputs(void **state)
{
	(void)state;
	static const char *srcs[] = {"", "\n", "# only a comment", "# a\n\n# b\n",
	                             "\r\n", "   \t  "};
	for (size_t i = 0; i < sizeof srcs / sizeof *srcs; i++) {
		Parse p;
		parse(&p, srcs[i]);
		assert_errors(&p, 0);
		assert_int_equal(p.f.graphs.n, 0);
		assert_int_equal(p.f.dims.n, 0);
		parse_done(&p);
	}
}

static void
test_garbage(void **state)
{
	(void)state;
	size_t n = 1 << 20;
	char *src = malloc(n);
	uint64_t x = 88172645463325252u;
	for (int round = 0; round < 3; round++) {
		for (size_t i = 0; i < n; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift */
			/* round 1: printable punctuation soup; round 2: ()[]{} only */
			unsigned char c = (unsigned char)(x >> 24);
			if (round == 1)
				c = (unsigned char)("(){}[]%=,:\"#-\n 1ae."[c % 20]);
			else if (round == 2)
				c = (unsigned char)("(){}[]\n"[c % 7]);
			src[i] = (char)c;
		}
		Parse p;
		parse_n(&p, src, n);
		assert_true(p.d.nerrors > 0);
		parse_done(&p);
	}
	free(src);
}

static void
test_nul_bytes(void **state)
{
	(void)state;
	static const char src[] = "graph g {\n\0  %a = f()\n  %b = f(\"\0\")\n}\n\0";
	Parse p;
	parse_n(&p, src, sizeof src - 1);
	assert_errors(&p, 2);
	assert_msg(&p, "t.sg:2:1: error: stray '\\x00' in program");
	assert_msg(&p, "t.sg:5:1: error: stray '\\x00' in program");
	/* the NUL inside a string is kept, with its length */
	AstStmt *s = stmt(&p, 0, 1);
	assert_int_equal(s->args[0].slen, 1);
	assert_int_equal(s->args[0].s[0], 0);
	parse_done(&p);
}

static void
test_invalid_utf8(void **state)
{
	(void)state;
	static const char src[] =
		"graph g {  # caf\xc3\xa9 \xff\n"
		"  %a = f(\"\xff\xfe\")\n"
		"  %b\xff = f()\n"
		"}\n";
	Parse p;
	parse(&p, src);
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:3:5: error: stray '\\xff' in program");
	assert_int_equal(p.f.graphs.v[0].stmts.n, 2);
	parse_done(&p);
}

static void
test_huge_name(void **state)
{
	(void)state;
	size_t n = 1000000;
	size_t cap = 2 * n + 64;
	char *src = malloc(cap);
	size_t o = (size_t)snprintf(src, cap, "graph g {\n  %%");
	memset(src + o, 'v', n);
	o += n;
	o += (size_t)snprintf(src + o, cap - o, " = relu(%%");
	memset(src + o, 'w', n);
	o += n;
	o += (size_t)snprintf(src + o, cap - o, ")\n}\n");
	Parse p;
	parse_n(&p, src, o);
	assert_errors(&p, 0);
	AstStmt *s = stmt(&p, 0, 0);
	assert_int_equal(strlen(s->names[0]), n);
	assert_loc(s->namelocs[0], 2, 3, (uint32_t)n + 1);
	assert_int_equal(s->args[0].slen, n);
	assert_loc(s->oploc, 2, (uint32_t)n + 7, 4);
	parse_done(&p);
	free(src);
}

static void
test_huge_integers(void **state)
{
	(void)state;
	size_t n = 100000;
	char *src = malloc(n + 64);
	size_t o = (size_t)snprintf(src, n + 64, "dim X = ");
	memset(src + o, '9', n);
	o += n;
	src[o] = 0;
	Parse p;
	parse(&p, src);
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:1:9: error: integer literal");
	parse_done(&p);
	free(src);
}

static void
test_lone_minus(void **state)
{
	(void)state;
	Parse p;
	parse(&p, "-");
	assert_errors(&p, 1);
	assert_msg(&p, "t.sg:1:1: error: expected a number after '-'");
	parse_done(&p);
	parse(&p, "graph g {\n  %a = f(x=-)\n}\n");
	assert_errors(&p, 1);
	parse_done(&p);
}

/* 100,000 nested `with` blocks parse in constant stack. */
static void
test_deep_nesting(void **state)
{
	(void)state;
	int depth = 100000;
	size_t cap = (size_t)depth * 24 + 64, o = 0;
	char *src = malloc(cap);
	o += (size_t)snprintf(src + o, cap - o, "graph g {\n");
	for (int i = 0; i < depth; i++)
		o += (size_t)snprintf(src + o, cap - o, "with stream(s%d) {\n", i % 10);
	o += (size_t)snprintf(src + o, cap - o, "%%a = f()\n");
	for (int i = 0; i < depth; i++)
		o += (size_t)snprintf(src + o, cap - o, "}\n");
	o += (size_t)snprintf(src + o, cap - o, "%%b = f()\n}\n");
	Parse p;
	parse_n(&p, src, o);
	assert_errors(&p, 0);
	assert_int_equal(p.f.graphs.v[0].stmts.n, 2);
	assert_string_equal(stmt(&p, 0, 0)->stream, "s9");
	assert_int_equal(stmt(&p, 0, 0)->loc.line, (uint32_t)depth + 2);
	assert_null(stmt(&p, 0, 1)->stream);
	parse_done(&p);

	/* unclosed: one error naming the innermost '{' */
	o = (size_t)snprintf(src, cap, "graph g {\n");
	for (int i = 0; i < depth; i++)
		o += (size_t)snprintf(src + o, cap - o, "with stream(s) {\n");
	parse_n(&p, src, o);
	assert_errors(&p, 1);
	assert_msg(&p, "'}' expected (to close '{' at line 100001)");
	parse_done(&p);
	free(src);
}

/* 100,000 nested parentheses and brackets: an error, not a crash. */
static void
test_deep_parens(void **state)
{
	(void)state;
	int depth = 100000;
	char *src = malloc((size_t)depth + 64);
	static const char *pre[] = {"", "graph g {\n  %a = f", "graph g {\n  %a = f(x="};
	static const char open[] = {'(', '(', '['};
	for (int k = 0; k < 3; k++) {
		size_t o = (size_t)sprintf(src, "%s", pre[k]);
		memset(src + o, open[k], (size_t)depth);
		o += (size_t)depth;
		o += (size_t)sprintf(src + o, "\n  %%b = f()\n}\n");
		Parse p;
		parse_n(&p, src, o);
		if (k == 0) { /* no graph: its lines are errors too */
			assert_msg(&p, "t.sg:1:1: error: unexpected '('");
		} else { /* the statement after the bad one is parsed */
			assert_errors(&p, 1);
			assert_int_equal(p.f.graphs.v[0].stmts.n, 1);
		}
		parse_done(&p);
	}
	free(src);
}

/* 200,000 statements parse, every one of them.  (Speed is measured by
 * bench/compile_speed.sh, not asserted here: timed tests are flaky.) */
static void
test_many_statements(void **state)
{
	(void)state;
	int n = 200000;
	size_t cap = (size_t)n * 64 + 256, o = 0;
	char *src = malloc(cap);
	o += (size_t)snprintf(src + o, cap - o,
	                      "dim B = 64\ngraph g {\n  input %%x : f32[B, 64]\n"
	                      "  param %%w : f32[64, 64]\n  stream s\n");
	for (int i = 0; i < n; i++) {
		if (i % 4 == 0)
			o += (size_t)snprintf(src + o, cap - o,
			    "  with stream(s) {\n    %%v%d = matmul(%%x, %%w)\n  }\n", i);
		else if (i % 4 == 1)
			o += (size_t)snprintf(src + o, cap - o,
			    "  %%v%d = reshape(%%v%d, shape=[B, 64])\n", i, i - 1);
		else
			o += (size_t)snprintf(src + o, cap - o,
			    "  %%v%d = add(%%v%d, 0.5)\n", i, i - 1);
	}
	o += (size_t)snprintf(src + o, cap - o, "  return %%v%d\n}\n", n - 1);
	Parse p;
	parse_n(&p, src, o);
	assert_errors(&p, 0);
	assert_int_equal(p.f.graphs.v[0].stmts.n, (uint32_t)n + 4);
	parse_done(&p);
	free(src);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mlp),
		cmocka_unit_test(test_declarations),
		cmocka_unit_test(test_statements),
		cmocka_unit_test(test_argument_kinds),
		cmocka_unit_test(test_stream_scopes),
		cmocka_unit_test(test_backward_block),
		cmocka_unit_test(test_several_graphs),
		cmocka_unit_test(test_crlf),
		cmocka_unit_test(test_unclosed_block),
		cmocka_unit_test(test_unexpected_brace),
		cmocka_unit_test(test_nested_graph),
		cmocka_unit_test(test_dim_in_graph),
		cmocka_unit_test(test_outside_graph),
		cmocka_unit_test(test_backward_nesting),
		cmocka_unit_test(test_argument_order),
		cmocka_unit_test(test_nested_list),
		cmocka_unit_test(test_block_layout),
		cmocka_unit_test(test_syntax_messages),
		cmocka_unit_test(test_unclosed_paren),
		cmocka_unit_test(test_no_second_message),
		cmocka_unit_test(test_many_errors_stop),
		cmocka_unit_test(test_empty_inputs),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_nul_bytes),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_huge_name),
		cmocka_unit_test(test_huge_integers),
		cmocka_unit_test(test_lone_minus),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test(test_deep_parens),
		cmocka_unit_test(test_many_statements),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
