/*
 * parser.y - the .sg grammar: a pure bison parser building the flat AST
 * declared in sgc.h.
 *
 * The grammar is flat on purpose.  A file is a list of lines; each line is
 * one statement, the opening line of a block (`graph g {`, `with
 * stream(s) {`, `backward(%l) {`) or a lone `}`.  Blocks are matched by a
 * stack held in the Parser, not by grammar recursion, so a file with
 * 100,000 nested blocks costs neither C stack nor bison stack; every list
 * rule is left-recursive for the same reason.
 *
 * Choices the language spec leaves open, made here (to be carried into the
 * project's language reference):
 *   - `{` ends its line (a comment may follow); `}` stands alone on its
 *     line (a comment may follow), except that an empty block may be
 *     written `{}` on the line that opens it.  A block is opened as soon as
 *     its `{` is read, so an error later on that line does not unbalance
 *     the braces.
 *   - Arguments, lists and the sizes of a type may end with a trailing
 *     comma; an empty list `[]` is allowed; list items may be any literal,
 *     identifier or value, but not a list.
 *   - `return` with no values, and `optimizer NAME` without parentheses,
 *     are accepted.
 *   - Backward blocks do not nest; `graph` and `dim` appear only at top
 *     level; any other statement only inside a graph.  Declaration order
 *     is left to sema.
 *   - Scanner: only space, tab and newline (`\n` or `\r\n`) are white
 *     space; `inf` and `nan` are float literals (so `-inf`, `-nan` too);
 *     `2.`, `.5` and `1e5` are floats; a float literal beyond the double
 *     range is an error, one below it rounds to zero; a string may hold
 *     any byte but a newline and knows only the escapes `\"` and `\\`;
 *     a comment may hold any byte.
 *
 * After a syntax error the parser skips to the end of the statement
 * (`error NEWLINE`) and goes on, so independent errors are all reported.
 */

%code requires {
#include "sgc.h"

/* A token's text, for names, values and strings (arena copies). */
typedef struct {
	const char *s;
	uint32_t len;
} Str;

/* An unclosed '(' or '['. */
typedef struct {
	Loc loc;
	char c;
} Bracket;

/* The scanner's state (flex's "extra"), shared with the parser, which
 * reads the bracket stack for its messages and asks the scanner to skip
 * to the end of the statement after an error. */
struct Lexer {
	Diag *d;
	Arena *a;
	void *scanner;      /* the flex scanner (yyscan_t) */
	char *buf;          /* the source plus two NULs, scanned in place */
	uint32_t line, col; /* position of the next byte, 1-based */
	VEC(Bracket) open;  /* unclosed brackets; newlines inside continue */
	uint8_t skip;       /* recovering: the next newline ends the statement */
	uint8_t last_nl;    /* the last token returned was NEWLINE */
	uint8_t eof;        /* the end-of-file NEWLINE was returned */
	uint8_t tok_eof;    /* the token just returned is at end of file */
	uint8_t tok_bad;    /* the token just returned had a lexical error */
	uint8_t line_bad;   /* the statement being scanned had a lexical error */
	const char *tok;    /* text of the token just returned */
	size_t toklen;
};

struct Parser;
}

%code provides {
int sgyylex(SGYYSTYPE *lval, Loc *lloc, void *scanner);
/* Makes the scanner end the statement at the next newline, whatever the
 * bracket depth: error recovery. */
void lexer_recover(Lexer *lx);
}

%define api.pure full
%define api.prefix {sgyy}
%define api.token.prefix {T_}
%define api.location.type {Loc}
%define parse.error custom
%define parse.lac full
%locations
%expect 0
%param {void *scanner}
%parse-param {struct Parser *P}

/* Kept small: bison copies it on every shift and reduction.  Arguments
 * and types are built in the Parser instead (P->val, P->type). */
%union {
	Str str;
	int64_t i;
	double f;
	int b;
}

%token NEWLINE "newline"
%token <str> IDENT "name" VALUE "value" STRING "string"
%token <i> INT "integer"
%token <f> FLOAT "number"
%token <b> BOOL "boolean"
%token <str> GRAPH "graph" DIM "dim" INPUT "input" PARAM "param" CONST "const"
%token <str> STREAM "stream" EVENT "event" WITH "with" RETURN "return"
%token <str> BACKWARD "backward" OPTIMIZER "optimizer" OFFLOAD "offload"
%token <str> DEL "del" EXTERN "extern"

%type <str> key
%type <b> rbrace_opt

%code {
#include <stdlib.h>
#include <string.h>

#define YYLLOC_DEFAULT(Cur, Rhs, N)                                          \
	do {                                                                  \
		(Cur) = YYRHSLOC(Rhs, (N) ? 1 : 0);                           \
	} while (0)

typedef enum {
	BLK_GRAPH,    /* graph NAME { */
	BLK_WITH,     /* with stream(NAME) { */
	BLK_BACKWARD, /* backward(...) { */
	BLK_DISCARD,  /* a block opened in error: its statements are dropped */
} BlockKind;

typedef struct {
	uint8_t kind;        /* BlockKind */
	uint8_t in_backward; /* inside a derived backward block */
	Loc brace;           /* its '{' */
	const char *stream;  /* innermost stream scope; NULL: default */
	Loc streamloc;
} Block;

typedef struct Parser {
	Lexer *lx;
	Diag *d;
	Arena *a;
	AstFile *out;
	int32_t graph;        /* index of the open graph in out->graphs, -1 */
	Loc graphloc;         /* its name */
	VEC(Block) blocks;
	AstStmt st;           /* the statement being built */
	AstArg val;           /* the argument value just parsed */
	AstType type;         /* the type just parsed */
	VEC(AstArg) args;     /* its arguments so far */
	uint8_t seen_key;     /* a key=value argument was seen */
	VEC(AstArg) items;    /* the list being built */
	VEC(const char *) names;
	VEC(Loc) namelocs;
	VEC(AstDim) dims;     /* the type being built */
} Parser;

static void line_end(Parser *P);
static void dim_decl(Parser *P, Loc kw, Str name, Loc nameloc, int64_t n);
static void graph_open(Parser *P, Loc kw, Str name, Loc nameloc, Loc brace);
static void with_open(Parser *P, Loc kw, Str name, Loc nameloc, Loc brace);
static void backward_stmt(Parser *P, Loc kw, int block, Loc brace);
static void block_close(Parser *P, Loc brace);
static void file_end(Parser *P);
static AstStmt *stmt_begin(Parser *P, int kind, Loc loc);
static void stmt_end(Parser *P);
static void decl_stmt(Parser *P, int kind, Loc kw, Str name, Loc nameloc,
                      AstType *t);
static void op_stmt(Parser *P, int kind, Loc loc, Str op, Loc oploc);
static void names_stmt(Parser *P, int kind, Loc kw);
static void name_add(Parser *P, Str s, Loc loc);
static void arg_add(Parser *P, const Str *key, Loc keyloc);
static AstArg *scalar_arg(Parser *P, int kind, Loc loc);
static void str_arg(Parser *P, int kind, Str s, Loc loc);
static void list_arg(Parser *P, Loc loc);
static void type_make(Parser *P, Str dt, Loc dtloc);
static void nested_list(Parser *P, Loc loc);
static void yyerror(Loc *loc, void *scanner, Parser *P, const char *msg);
}

%%

file:
	lines                  { file_end(P); }
	;

lines:
	%empty
	| lines line
	;

/* Every statement ends with a NEWLINE; the scanner supplies one at the
 * end of a file that lacks it. */
line:
	NEWLINE
	| stmt NEWLINE         { line_end(P); }
	| error NEWLINE        {
		yyerrok;
		line_end(P);
		if (diag_full(P->d))
			YYABORT;
	}
	;

stmt:
	DIM IDENT '=' INT      { dim_decl(P, @1, $2, @2, $4); }
	| GRAPH IDENT '{'      { graph_open(P, @1, $2, @2, @3); }
	  rbrace_opt           { if ($5) block_close(P, @5); }
	| WITH STREAM '(' IDENT ')' '{' { with_open(P, @1, $4, @4, @6); }
	  rbrace_opt           { if ($8) block_close(P, @8); }
	| '}'                  { block_close(P, @1); }
	| INPUT VALUE ':' type { decl_stmt(P, AS_INPUT, @1, $2, @2, &P->type); }
	| PARAM VALUE ':' type { decl_stmt(P, AS_PARAM, @1, $2, @2, &P->type); }
	| CONST VALUE ':' type { decl_stmt(P, AS_CONST, @1, $2, @2, &P->type); }
	| STREAM IDENT         { decl_stmt(P, AS_STREAM, @1, $2, @2, NULL); }
	| STREAM IDENT '(' args ')' {
		decl_stmt(P, AS_STREAM, @1, $2, @2, NULL);
	}
	| EVENT identlist      { names_stmt(P, AS_EVENT, @1); }
	| EXTERN EVENT identlist { names_stmt(P, AS_EXTERN_EVENT, @1); }
	| results '=' IDENT '(' args ')' { op_stmt(P, AS_OP, @1, $3, @3); }
	| IDENT '(' args ')'   { op_stmt(P, AS_OP, @1, $1, @1); }
	| DEL VALUE            { decl_stmt(P, AS_DEL, @1, $2, @2, NULL); }
	| OFFLOAD VALUE        { decl_stmt(P, AS_OFFLOAD, @1, $2, @2, NULL); }
	| BACKWARD '(' args ')' { backward_stmt(P, @1, 0, @4); }
	| BACKWARD '(' args ')' '{' { backward_stmt(P, @1, 1, @5); }
	  rbrace_opt           { if ($7) block_close(P, @7); }
	| OPTIMIZER IDENT '(' args ')' { op_stmt(P, AS_OPTIMIZER, @1, $2, @2); }
	| OPTIMIZER IDENT      { op_stmt(P, AS_OPTIMIZER, @1, $2, @2); }
	| RETURN               { names_stmt(P, AS_RETURN, @1); }
	| RETURN valuelist     { names_stmt(P, AS_RETURN, @1); }
	;

rbrace_opt:
	%empty                 { $$ = 0; }
	| '}'                  { $$ = 1; }
	;

results:
	valuelist
	;

valuelist:
	VALUE                  { name_add(P, $1, @1); }
	| valuelist ',' VALUE  { name_add(P, $3, @3); }
	;

identlist:
	IDENT                  { name_add(P, $1, @1); }
	| identlist ',' IDENT  { name_add(P, $3, @3); }
	;

/* f32[B, 64], f32[] */
type:
	IDENT '[' ']'          { type_make(P, $1, @1); }
	| IDENT '[' dimlist ']' { type_make(P, $1, @1); }
	| IDENT '[' dimlist ',' ']' { type_make(P, $1, @1); }
	;

dimlist:
	dim
	| dimlist ',' dim
	;

dim:
	INT {
		AstDim x = {.n = $1, .loc = @1};
		vec_push(&P->dims, x);
	}
	| IDENT {
		AstDim x = {.name = $1.s, .loc = @1};
		vec_push(&P->dims, x);
	}
	;

/* Positional operands, then key=value attributes; a trailing comma is
 * allowed.  The order rule is checked in arg_add for a clear message. */
args:
	%empty
	| arglist
	| arglist ','
	;

arglist:
	arg
	| arglist ',' arg
	;

arg:
	value                  { arg_add(P, NULL, @1); }
	| key '=' value        { arg_add(P, &$1, @1); }
	;

/* A keyword may be an attribute name: dim=1, stream=side. */
key:
	IDENT | GRAPH | DIM | INPUT | PARAM | CONST | STREAM | EVENT | WITH
	| RETURN | BACKWARD | OPTIMIZER | OFFLOAD | DEL | EXTERN
	;

value:
	scalar
	| list
	;

/* Each value is built in P->val. */
scalar:
	VALUE                  { str_arg(P, AA_VALUE, $1, @1); }
	| IDENT                { str_arg(P, AA_IDENT, $1, @1); }
	| STRING               { str_arg(P, AA_STRING, $1, @1); }
	| INT                  { scalar_arg(P, AA_INT, @1)->i = $1; }
	| FLOAT                { scalar_arg(P, AA_FLOAT, @1)->f = $1; }
	| BOOL                 { scalar_arg(P, AA_BOOL, @1)->b = $1; }
	;

/* Lists are flat: an item that opens another list is an error. */
list:
	'[' ']'                { list_arg(P, @1); }
	| '[' items ']'        { list_arg(P, @1); }
	| '[' items ',' ']'    { list_arg(P, @1); }
	;

items:
	item
	| items ',' item
	;

item:
	scalar                 { vec_push(&P->items, P->val); }
	| '['                  { nested_list(P, @1); YYERROR; }
	;

%%

/* ------------------------------------------------------------------ blocks */

/* The innermost open block, or NULL at top level. */
static Block *
block_top(Parser *P)
{
	return P->blocks.n ? &P->blocks.v[P->blocks.n - 1] : NULL;
}

/* Opens a block of the given kind, inheriting the enclosing stream scope
 * and backward flag. */
static Block *
block_push(Parser *P, int kind, Loc brace)
{
	Block b = {0}, *top = block_top(P);
	if (top)
		b = *top;
	b.kind = (uint8_t)kind;
	b.brace = brace;
	if (top && top->kind == BLK_DISCARD)
		b.kind = BLK_DISCARD;
	vec_push(&P->blocks, b);
	return block_top(P);
}

/*
 * dim NAME = INT, at top level only.
 */
static void
dim_decl(Parser *P, Loc kw, Str name, Loc nameloc, int64_t n)
{
	if (P->blocks.n) {
		diag_error(P->d, kw, "'dim' is only allowed at top level");
		return;
	}
	AstDimDecl x = {.name = name.s, .n = n, .loc = nameloc};
	vec_push(&P->out->dims, x);
}

/*
 * graph NAME {: a new graph at top level; inside a block an error, and the
 * nested block's statements are dropped.
 */
static void
graph_open(Parser *P, Loc kw, Str name, Loc nameloc, Loc brace)
{
	if (P->blocks.n) {
		diag_error(P->d, kw, "graph definitions cannot nest");
		if (P->graph >= 0)
			diag_note(P->d, P->graphloc, "graph '%s' starts here",
			          P->out->graphs.v[P->graph].name);
		block_push(P, BLK_DISCARD, brace);
		return;
	}
	AstGraph g = {.name = name.s, .loc = nameloc};
	vec_push(&P->out->graphs, g);
	P->graph = (int32_t)(P->out->graphs.n - 1);
	P->graphloc = nameloc;
	block_push(P, BLK_GRAPH, brace);
}

/*
 * with stream(NAME) {: the statements inside run on NAME.
 */
static void
with_open(Parser *P, Loc kw, Str name, Loc nameloc, Loc brace)
{
	if (!P->blocks.n) {
		diag_error(P->d, kw, "statement outside a graph");
		block_push(P, BLK_DISCARD, brace);
		return;
	}
	Block *b = block_push(P, BLK_WITH, brace);
	b->stream = name.s;
	b->streamloc = nameloc;
}

/*
 * backward(args), or backward(args) { derived statements }.
 */
static void
backward_stmt(Parser *P, Loc kw, int block, Loc brace)
{
	Block *top = block_top(P);
	AstStmt *s = stmt_begin(P, AS_BACKWARD, kw);
	s->has_block = (uint8_t)block;
	if (block && top && top->in_backward)
		diag_error(P->d, kw, "backward blocks cannot nest");
	stmt_end(P);
	if (!block)
		return;
	if (!P->blocks.n) {
		block_push(P, BLK_DISCARD, brace); /* reported by stmt_end */
		return;
	}
	block_push(P, BLK_BACKWARD, brace)->in_backward = 1;
}

/*
 * }: closes the innermost block.  A derived backward block ends with an
 * AS_BACKWARD_END statement in the enclosing scope.
 */
static void
block_close(Parser *P, Loc brace)
{
	Block *top = block_top(P);
	if (!top) {
		diag_error(P->d, brace, "unexpected '}'");
		return;
	}
	int kind = top->kind;
	P->blocks.n--;
	if (kind == BLK_GRAPH)
		P->graph = -1;
	if (kind == BLK_BACKWARD) {
		stmt_begin(P, AS_BACKWARD_END, brace);
		stmt_end(P);
	}
}

/*
 * End of file: every block must be closed.
 */
static void
file_end(Parser *P)
{
	Block *top = block_top(P);
	if (!top)
		return;
	Loc at = {P->lx->line, P->lx->col, 0};
	diag_error(P->d, at, "'}' expected (to close '{' at line %u)",
	           top->brace.line);
}

/* ------------------------------------------------------------------ statements */

/* The temporaries of one statement are reset when its line ends. */
static void
line_end(Parser *P)
{
	P->args.n = 0;
	P->items.n = 0;
	P->names.n = 0;
	P->namelocs.n = 0;
	P->dims.n = 0;
	P->seen_key = 0;
	P->lx->open.n = 0;
	P->lx->skip = 0;
}

/* Starts building a statement; its rule has been parsed whole, so the
 * temporaries hold its names, arguments and type. */
static AstStmt *
stmt_begin(Parser *P, int kind, Loc loc)
{
	memset(&P->st, 0, sizeof P->st);
	P->st.kind = (uint8_t)kind;
	P->st.loc = loc;
	return &P->st;
}

/*
 * Finishes the statement being built: copies the temporaries into the
 * arena and appends it to the open graph with the innermost stream scope.
 * Outside a graph it is an error; inside a block opened in error it is
 * dropped quietly (the block's opening line was reported).
 */
static void
stmt_end(Parser *P)
{
	AstStmt *s = &P->st;
	Block *top = block_top(P);
	if (!top) {
		diag_error(P->d, s->loc, "statement outside a graph");
		return;
	}
	if (top->kind == BLK_DISCARD || P->graph < 0 || diag_full(P->d))
		return;
	if (P->args.n) {
		s->args = arena_alloc(P->a, P->args.n * sizeof *s->args);
		memcpy(s->args, P->args.v, P->args.n * sizeof *s->args);
		s->nargs = P->args.n;
	}
	if (P->names.n) {
		s->names = arena_alloc(P->a, P->names.n * sizeof *s->names);
		s->namelocs = arena_alloc(P->a, P->names.n * sizeof *s->namelocs);
		memcpy(s->names, P->names.v, P->names.n * sizeof *s->names);
		memcpy(s->namelocs, P->namelocs.v, P->names.n * sizeof *s->namelocs);
		s->nnames = P->names.n;
	}
	s->stream = top->stream;
	s->streamloc = top->streamloc;
	s->in_backward = top->in_backward;
	vec_push(&P->out->graphs.v[P->graph].stmts, *s);
}

/*
 * input/param/const %v : T, stream NAME (priority=..), del %v, offload %v:
 * the statements naming one thing.
 */
static void
decl_stmt(Parser *P, int kind, Loc kw, Str name, Loc nameloc, AstType *t)
{
	AstStmt *s = stmt_begin(P, kind, kw);
	s->name = name.s;
	s->nameloc = nameloc;
	if (t)
		s->type = *t;
	stmt_end(P);
}

/*
 * %r, ... = OP(args), OP(args) and optimizer NAME(args).
 */
static void
op_stmt(Parser *P, int kind, Loc loc, Str op, Loc oploc)
{
	AstStmt *s = stmt_begin(P, kind, loc);
	s->op = op.s;
	s->oploc = oploc;
	stmt_end(P);
}

/* event A, B / extern event A, B / return %a, %b. */
static void
names_stmt(Parser *P, int kind, Loc kw)
{
	stmt_begin(P, kind, kw);
	stmt_end(P);
}

static void
name_add(Parser *P, Str s, Loc loc)
{
	vec_push(&P->names, s.s);
	vec_push(&P->namelocs, loc);
}

/*
 * Appends the argument in P->val; positional operands must come before
 * every key=value attribute.
 */
static void
arg_add(Parser *P, const Str *key, Loc keyloc)
{
	AstArg *v = &P->val;
	if (key) {
		v->key = key->s;
		v->keyloc = keyloc;
		P->seen_key = 1;
	} else if (P->seen_key) {
		diag_error(P->d, v->loc,
		           "positional argument after a keyword argument");
	}
	vec_push(&P->args, *v);
}

/* Starts a scalar value in P->val. */
static AstArg *
scalar_arg(Parser *P, int kind, Loc loc)
{
	memset(&P->val, 0, sizeof P->val);
	P->val.kind = (uint8_t)kind;
	P->val.loc = loc;
	return &P->val;
}

static void
str_arg(Parser *P, int kind, Str s, Loc loc)
{
	AstArg *a = scalar_arg(P, kind, loc);
	a->s = s.s;
	a->slen = s.len;
}

/* [items]: the items collected so far become an arena array in P->val. */
static void
list_arg(Parser *P, Loc loc)
{
	AstArg *a = scalar_arg(P, AA_LIST, loc);
	if (P->items.n) {
		a->items = arena_alloc(P->a, P->items.n * sizeof *a->items);
		memcpy(a->items, P->items.v, P->items.n * sizeof *a->items);
		a->nitems = P->items.n;
	}
	P->items.n = 0;
}

/* DTYPE[dims]: the dims collected so far become P->type. */
static void
type_make(Parser *P, Str dt, Loc dtloc)
{
	AstType *t = &P->type;
	memset(t, 0, sizeof *t);
	t->dtype = dt.s;
	t->dtloc = dtloc;
	if (P->dims.n) {
		t->dims = arena_alloc(P->a, P->dims.n * sizeof *t->dims);
		memcpy(t->dims, P->dims.v, P->dims.n * sizeof *t->dims);
		t->ndims = P->dims.n;
	}
	P->dims.n = 0;
}

/* '[' inside a list: reported here; the caller's YYERROR skips the line. */
static void
nested_list(Parser *P, Loc loc)
{
	diag_error(P->d, loc, "lists cannot nest");
	lexer_recover(P->lx);
}

/* ------------------------------------------------------------------ syntax errors */

/* How a token kind reads in a message. */
static const char *
sym_text(yysymbol_kind_t k, char *buf, size_t n)
{
	switch (k) {
	case YYSYMBOL_YYEOF: return "end of file";
	case YYSYMBOL_NEWLINE: return "newline";
	case YYSYMBOL_IDENT: return "a name";
	case YYSYMBOL_VALUE: return "a value";
	case YYSYMBOL_STRING: return "a string";
	case YYSYMBOL_INT: return "an integer";
	case YYSYMBOL_FLOAT: return "a number";
	case YYSYMBOL_BOOL: return "'true' or 'false'";
	default: break;
	}
	const char *s = yysymbol_name(k);
	size_t len = strlen(s);
	if (len >= 2 && s[0] == '"') /* "graph" -> 'graph' */
		snprintf(buf, n, "'%.*s'", (int)(len - 2), s + 1);
	else
		snprintf(buf, n, "%s", s);
	return buf;
}

/* The source text of the token just scanned, quoted, escaped and cut. */
static const char *
tok_text(Lexer *lx, char *buf, size_t n)
{
	size_t o = 0, max = 40;
	buf[o++] = '\'';
	for (size_t i = 0; i < lx->toklen && o + 8 < n; i++) {
		unsigned char c = (unsigned char)lx->tok[i];
		if (i == max) {
			o += (size_t)snprintf(buf + o, n - o, "...");
			break;
		}
		if (c >= 0x20 && c < 0x7f)
			buf[o++] = (char)c;
		else
			o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
	}
	buf[o++] = '\'';
	buf[o] = 0;
	return buf;
}

/*
 * Reports a syntax error at the lookahead: "expected A or B before X",
 * "unexpected X", or, inside an unclosed bracket, Lua's "')' expected (to
 * close '(' at line 3)".  Quiet when the scanner already reported an error
 * in this statement.  Either way the scanner is told to end the statement
 * at the next newline.
 */
static int
yyreport_syntax_error(const yypcontext_t *ctx, void *scanner, Parser *P)
{
	(void)scanner;
	Lexer *lx = P->lx;
	Loc at = *yypcontext_location(ctx);
	yysymbol_kind_t la = yypcontext_token(ctx);
	char what[64], ebuf[4][32];
	yysymbol_kind_t exp[5];
	int nexp = yypcontext_expected_tokens(ctx, exp, 5);
	int quiet = lx->tok_bad || lx->line_bad;

	if (la == YYSYMBOL_YYEOF || lx->tok_eof)
		snprintf(what, sizeof what, "end of file");
	else if (la == YYSYMBOL_NEWLINE)
		snprintf(what, sizeof what, "newline");
	else
		tok_text(lx, what, sizeof what);

	if (quiet) {
		/* already reported */
	} else if (lx->open.n && (lx->tok_eof ||
	           at.line > lx->open.v[lx->open.n - 1].loc.line)) {
		Bracket *b = &lx->open.v[lx->open.n - 1];
		diag_error(P->d, at, "'%c' expected (to close '%c' at line %u)%s%s",
		           b->c == '(' ? ')' : ']', b->c, b->loc.line,
		           lx->tok_eof ? "" : " before ", lx->tok_eof ? "" : what);
	} else if (nexp >= 1 && nexp <= 4) {
		char list[160] = "";
		for (int i = 0; i < nexp; i++) {
			const char *e = sym_text(exp[i], ebuf[i], sizeof ebuf[i]);
			size_t o = strlen(list);
			snprintf(list + o, sizeof list - o, "%s%s",
			         i == 0 ? "" : i == nexp - 1 ? " or " : ", ", e);
		}
		diag_error(P->d, at, "expected %s before %s", list, what);
	} else {
		diag_error(P->d, at, "unexpected %s", what);
	}
	lexer_recover(lx);
	return 0;
}

/* Bison's own failures (its stack is bounded by one statement's length,
 * so this is not expected). */
static void
yyerror(Loc *loc, void *scanner, Parser *P, const char *msg)
{
	(void)scanner;
	diag_error(P->d, *loc, "%s", msg);
}

/*
 * parse_file - parses a whole .sg file into out (see sgc.h).
 */
void
parse_file(const char *src, size_t len, Diag *d, Arena *a, AstFile *out)
{
	memset(out, 0, sizeof *out);
	if (len > INT32_MAX) {
		Loc none = {0, 0, 0};
		diag_error(d, none, "file is too large (more than 2 GiB)");
		return;
	}
	Parser P = {.d = d, .a = a, .out = out, .graph = -1};
	P.lx = lexer_new(src, len, d, a);
	sgyyparse(P.lx->scanner, &P);
	lexer_free(P.lx);
	vec_free(&P.blocks);
	vec_free(&P.args);
	vec_free(&P.items);
	vec_free(&P.names);
	vec_free(&P.namelocs);
	vec_free(&P.dims);
}
