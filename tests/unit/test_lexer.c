/*
 * test_lexer.c - the .sg scanner (grammar/lexer.l) on its own: the token
 * stream, token values and locations, and every lexical error.
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

/* A scan of one source text: its tokens and the diagnostics printed. */
typedef struct {
	Diag d;
	Arena *a;
	FILE *out;
	char *msgs;
	size_t msglen;
	LexToken tok[256];
	int ntok;
	char kinds[2048]; /* "IDENT ( VALUE ) NEWLINE EOF" */
} Scan;

static void
scan_n(Scan *s, const char *src, size_t len)
{
	memset(s, 0, sizeof *s);
	s->out = open_memstream(&s->msgs, &s->msglen);
	diag_init(&s->d, "t.sg", src, len);
	s->d.out = s->out;
	s->a = arena_new();
	Lexer *lx = lexer_new(src, len, &s->d, s->a);
	size_t o = 0;
	for (;;) {
		LexToken t;
		int k = lexer_next(lx, &t);
		if (s->ntok < 256)
			s->tok[s->ntok++] = t;
		o += (size_t)snprintf(s->kinds + o, sizeof s->kinds - o, "%s%s",
		                      o ? " " : "", lexer_token_name(k));
		if (!k || o >= sizeof s->kinds - 16)
			break;
	}
	lexer_free(lx);
	fflush(s->out);
}

static void
scan(Scan *s, const char *src)
{
	scan_n(s, src, strlen(src));
}

static void
scan_done(Scan *s)
{
	fclose(s->out);
	free(s->msgs);
	diag_fini(&s->d);
	arena_free(s->a);
}

/* The diagnostics contain `want`. */
static void
assert_msg(Scan *s, const char *want)
{
	if (!strstr(s->msgs, want)) {
		print_error("wanted '%s' in:\n%s\n", want, s->msgs);
		fail();
	}
}

static void
assert_loc(Loc l, uint32_t line, uint32_t col, uint32_t len)
{
	assert_int_equal(l.line, line);
	assert_int_equal(l.col, col);
	assert_int_equal(l.len, len);
}

/* ------------------------------------------------------------------ tokens */

static void
test_empty(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "");
	assert_string_equal(s.kinds, "EOF");
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
	scan(&s, "# just a comment\n\n   # another\n");
	assert_string_equal(s.kinds, "NEWLINE NEWLINE NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_statement_tokens(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "%h = matmul(%x, %w1)\n");
	assert_string_equal(s.kinds, "VALUE = IDENT ( VALUE , VALUE ) NEWLINE EOF");
	assert_string_equal(s.tok[0].s, "h");
	assert_string_equal(s.tok[2].s, "matmul");
	assert_string_equal(s.tok[6].s, "w1");
	assert_loc(s.tok[0].loc, 1, 1, 2);
	assert_loc(s.tok[1].loc, 1, 4, 1);
	assert_loc(s.tok[2].loc, 1, 6, 6);
	assert_loc(s.tok[3].loc, 1, 12, 1);
	assert_loc(s.tok[4].loc, 1, 13, 2);
	assert_loc(s.tok[6].loc, 1, 17, 3);
	assert_loc(s.tok[7].loc, 1, 20, 1);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_punctuation(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "{ } = : , ( ) [ ]");
	assert_string_equal(s.kinds, "{ } = : , ( ) [ ] NEWLINE EOF");
	scan_done(&s);
}

static void
test_keywords(void **state)
{
	(void)state;
	static const char *kw[] = {"graph", "dim", "input", "param", "const",
		"stream", "event", "with", "return", "backward", "optimizer",
		"offload", "del", "extern"};
	for (size_t i = 0; i < sizeof kw / sizeof *kw; i++) {
		Scan s;
		char want[64];
		scan(&s, kw[i]);
		snprintf(want, sizeof want, "%s NEWLINE EOF", kw[i]);
		assert_string_equal(s.kinds, want);
		assert_string_equal(s.tok[0].s, kw[i]); /* usable as a key */
		scan_done(&s);
	}
	/* Near-keywords and dtypes are identifiers. */
	Scan s;
	scan(&s, "graphs Dim _del f32 bf16 streams");
	assert_string_equal(s.kinds, "IDENT IDENT IDENT IDENT IDENT IDENT NEWLINE EOF");
	scan_done(&s);
}

static void
test_values(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "%h %attn.q %0 %grad.w1 %_x.9.y");
	assert_string_equal(s.kinds, "VALUE VALUE VALUE VALUE VALUE NEWLINE EOF");
	assert_string_equal(s.tok[0].s, "h");
	assert_string_equal(s.tok[1].s, "attn.q");
	assert_string_equal(s.tok[2].s, "0");
	assert_string_equal(s.tok[3].s, "grad.w1");
	assert_string_equal(s.tok[4].s, "_x.9.y");
	assert_int_equal(s.tok[1].slen, 6);
	assert_loc(s.tok[1].loc, 1, 4, 7);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_integers(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "0 -3 4096 9223372036854775807 -9223372036854775808 007");
	assert_string_equal(s.kinds, "INT INT INT INT INT INT NEWLINE EOF");
	assert_int_equal(s.tok[0].i, 0);
	assert_int_equal(s.tok[1].i, -3);
	assert_int_equal(s.tok[2].i, 4096);
	assert_true(s.tok[3].i == INT64_MAX);
	assert_true(s.tok[4].i == INT64_MIN);
	assert_int_equal(s.tok[5].i, 7);
	assert_loc(s.tok[1].loc, 1, 3, 2); /* the '-' is part of the literal */
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_floats(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "1e-3 0.5 -0.5 2. .5 1E5 -2.5e+2 inf -inf nan -nan 1e-400");
	assert_string_equal(s.kinds, "FLOAT FLOAT FLOAT FLOAT FLOAT FLOAT FLOAT "
	                    "FLOAT FLOAT FLOAT FLOAT FLOAT NEWLINE EOF");
	assert_true(s.tok[0].f == 1e-3);
	assert_true(s.tok[1].f == 0.5);
	assert_true(s.tok[2].f == -0.5);
	assert_true(s.tok[3].f == 2.0);
	assert_true(s.tok[4].f == 0.5);
	assert_true(s.tok[5].f == 1e5);
	assert_true(s.tok[6].f == -250.0);
	assert_true(isinf(s.tok[7].f) && s.tok[7].f > 0);
	assert_true(isinf(s.tok[8].f) && s.tok[8].f < 0);
	assert_true(isnan(s.tok[9].f));
	assert_true(isnan(s.tok[10].f));
	assert_true(s.tok[11].f >= 0 && s.tok[11].f < 1e-300); /* underflow: fine */
	assert_loc(s.tok[8].loc, 1, 37, 4);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
	/* inf and nan inside longer words are identifiers */
	scan(&s, "info nanny");
	assert_string_equal(s.kinds, "IDENT IDENT NEWLINE EOF");
	scan_done(&s);
}

static void
test_bools(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "true false truely");
	assert_string_equal(s.kinds, "BOOL BOOL IDENT NEWLINE EOF");
	assert_int_equal(s.tok[0].i, 1);
	assert_int_equal(s.tok[1].i, 0);
	scan_done(&s);
}

static void
test_strings(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "\"tanh\" \"a\\\"b\" \"c\\\\d\" \"\" \"# not a comment\"");
	assert_string_equal(s.kinds, "STRING STRING STRING STRING STRING NEWLINE EOF");
	assert_string_equal(s.tok[0].s, "tanh");
	assert_string_equal(s.tok[1].s, "a\"b");
	assert_int_equal(s.tok[1].slen, 3);
	assert_string_equal(s.tok[2].s, "c\\d");
	assert_string_equal(s.tok[3].s, "");
	assert_string_equal(s.tok[4].s, "# not a comment");
	assert_loc(s.tok[0].loc, 1, 1, 6);
	assert_loc(s.tok[1].loc, 1, 8, 6);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_string_bytes(void **state)
{
	(void)state;
	/* Strings may hold any byte but a newline: NUL, UTF-8, even bad UTF-8. */
	static const char src[] = "\"a\0b\xc3\xa9\xff\"";
	Scan s;
	scan_n(&s, src, sizeof src - 1);
	assert_string_equal(s.kinds, "STRING NEWLINE EOF");
	assert_int_equal(s.tok[0].slen, 6);
	assert_memory_equal(s.tok[0].s, "a\0b\xc3\xa9\xff", 6);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_comments(void **state)
{
	(void)state;
	Scan s;
	/* Anything goes in a comment, even bytes that are errors elsewhere. */
	static const char src[] = "%a # comment $ \xff\x80 \0 \"\n%b";
	scan_n(&s, src, sizeof src - 1);
	assert_string_equal(s.kinds, "VALUE NEWLINE VALUE NEWLINE EOF");
	assert_loc(s.tok[2].loc, 2, 1, 2);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_newlines_in_brackets(void **state)
{
	(void)state;
	Scan s;
	/* A newline inside ( ) or [ ] continues the statement. */
	scan(&s, "f(%a,\n  %b, x=[1,\n 2])\ng()\n");
	assert_string_equal(s.kinds, "IDENT ( VALUE , VALUE , IDENT = [ INT , INT ] ) "
	                    "NEWLINE IDENT ( ) NEWLINE EOF");
	assert_loc(s.tok[4].loc, 2, 3, 2);
	assert_loc(s.tok[12].loc, 3, 3, 1);
	assert_loc(s.tok[15].loc, 4, 1, 1);
	scan_done(&s);
	/* ... but not inside { }. */
	scan(&s, "{\n}\n");
	assert_string_equal(s.kinds, "{ NEWLINE } NEWLINE EOF");
	scan_done(&s);
}

static void
test_crlf(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "graph g {\r\n  %a = f() # c\r\n}\r\n");
	assert_string_equal(s.kinds, "graph IDENT { NEWLINE VALUE = IDENT ( ) NEWLINE "
	                    "} NEWLINE EOF");
	assert_loc(s.tok[4].loc, 2, 3, 2);
	assert_loc(s.tok[10].loc, 3, 1, 1);
	assert_int_equal(s.d.nerrors, 0);
	scan_done(&s);
}

static void
test_final_newline(void **state)
{
	(void)state;
	Scan s;
	/* A last line without '\n' still ends with a NEWLINE, at end of file. */
	scan(&s, "%a\n%b");
	assert_string_equal(s.kinds, "VALUE NEWLINE VALUE NEWLINE EOF");
	assert_loc(s.tok[3].loc, 2, 3, 0);
	scan_done(&s);
}

static void
test_tabs_and_columns(void **state)
{
	(void)state;
	Scan s;
	/* Columns count bytes: a tab is one, a UTF-8 character in a string two. */
	scan(&s, "\tf(\"\xc3\xa9\", %x)");
	assert_loc(s.tok[0].loc, 1, 2, 1);
	assert_loc(s.tok[2].loc, 1, 4, 4);
	assert_loc(s.tok[4].loc, 1, 10, 2);
	scan_done(&s);
}

/* ------------------------------------------------------------------ errors */

static void
test_stray_bytes(void **state)
{
	(void)state;
	Scan s;
	static const char src[] = "%a \x80 $ \x01 \0 @%b";
	scan_n(&s, src, sizeof src - 1);
	/* Each stray byte is reported and skipped; scanning goes on. */
	assert_string_equal(s.kinds, "VALUE VALUE NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 5);
	assert_msg(&s, "t.sg:1:4: error: stray '\\x80' in program");
	assert_msg(&s, "t.sg:1:6: error: stray '$' in program");
	assert_msg(&s, "t.sg:1:8: error: stray '\\x01' in program");
	assert_msg(&s, "t.sg:1:10: error: stray '\\x00' in program");
	assert_msg(&s, "t.sg:1:12: error: stray '@' in program");
	assert_false(s.tok[1].bad); /* %b itself is fine */
	scan_done(&s);
}

static void
test_non_ascii(void **state)
{
	(void)state;
	Scan s;
	/* A valid UTF-8 character is one error; each invalid byte is one. */
	scan(&s, "f(\xe2\x80\x9cx\xe2\x80\x9d) \xc3 \xff\xfe");
	assert_string_equal(s.kinds, "IDENT ( IDENT ) NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 5);
	assert_msg(&s, "t.sg:1:3: error: stray '\\xe2\\x80\\x9c' in program");
	assert_msg(&s, "t.sg:1:7: error: stray '\\xe2\\x80\\x9d' in program");
	assert_msg(&s, "t.sg:1:12: error: stray '\\xc3' in program");
	assert_msg(&s, "t.sg:1:14: error: stray '\\xff' in program");
	assert_msg(&s, "t.sg:1:15: error: stray '\\xfe' in program");
	scan_done(&s);
}

static void
test_lone_cr(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "%a\r%b\n");
	assert_string_equal(s.kinds, "VALUE VALUE NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 1);
	assert_msg(&s, "t.sg:1:3: error: stray '\\x0d' in program");
	scan_done(&s);
}

static void
test_unterminated_string(void **state)
{
	(void)state;
	Scan s;
	/* The error is at the opening quote; the string still comes back, and
	 * the statement ends at the newline even inside brackets. */
	scan(&s, "f(x=\"abc\n%b\n");
	assert_string_equal(s.kinds, "IDENT ( IDENT = STRING NEWLINE VALUE NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 1);
	assert_msg(&s, "t.sg:1:5: error: unterminated string");
	assert_true(s.tok[4].bad);
	assert_string_equal(s.tok[4].s, "abc");
	scan_done(&s);
	scan(&s, "\"abc\\");
	assert_int_equal(s.d.nerrors, 1);
	assert_msg(&s, "t.sg:1:1: error: unterminated string");
	scan_done(&s);
}

static void
test_bad_escape(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "\"a\\nb\"");
	assert_string_equal(s.kinds, "STRING NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 1);
	assert_msg(&s, "t.sg:1:3: error: unknown escape sequence '\\n'");
	scan_done(&s);
}

static void
test_integer_overflow(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "x 9223372036854775808 -9223372036854775809 99999999999999999999999");
	assert_string_equal(s.kinds, "IDENT INT INT INT NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 3);
	assert_msg(&s, "t.sg:1:3: error: integer literal '9223372036854775808' does not fit in 64 bits");
	assert_msg(&s, "t.sg:1:23: error: integer literal");
	assert_msg(&s, "t.sg:1:44: error: integer literal");
	assert_true(s.tok[1].bad);
	assert_false(s.tok[0].bad);
	scan_done(&s);
}

static void
test_float_overflow(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "1e999 -1e400");
	assert_string_equal(s.kinds, "FLOAT FLOAT NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 2);
	assert_msg(&s, "t.sg:1:1: error: float literal '1e999' is out of range");
	scan_done(&s);
}

static void
test_bad_numbers(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "12abc 1.2.3 0x10 3f");
	assert_string_equal(s.kinds, "INT INT INT INT NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 4);
	assert_msg(&s, "t.sg:1:1: error: invalid number '12abc'");
	assert_msg(&s, "t.sg:1:7: error: invalid number '1.2.3'");
	assert_msg(&s, "t.sg:1:13: error: invalid number '0x10'");
	assert_msg(&s, "t.sg:1:18: error: invalid number '3f'");
	scan_done(&s);
}

static void
test_minus(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "-");
	assert_string_equal(s.kinds, "EOF"); /* no token at all */
	assert_int_equal(s.d.nerrors, 1);
	assert_msg(&s, "t.sg:1:1: error: expected a number after '-'");
	scan_done(&s);
	scan(&s, "f(- 3, -x)");
	assert_string_equal(s.kinds, "IDENT ( INT , IDENT ) NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 2);
	assert_msg(&s, "t.sg:1:3: error: expected a number after '-'");
	assert_msg(&s, "t.sg:1:8: error: expected a number after '-'");
	scan_done(&s);
}

static void
test_lone_percent(void **state)
{
	(void)state;
	Scan s;
	scan(&s, "% = f()");
	assert_string_equal(s.kinds, "VALUE = IDENT ( ) NEWLINE EOF");
	assert_int_equal(s.d.nerrors, 1);
	assert_msg(&s, "t.sg:1:1: error: expected a value name after '%'");
	assert_true(s.tok[0].bad);
	scan_done(&s);
}

static void
test_long_name(void **state)
{
	(void)state;
	size_t n = 1000000;
	char *src = malloc(n + 2);
	src[0] = '%';
	memset(src + 1, 'a', n);
	src[n + 1] = 0;
	Scan s;
	scan_n(&s, src, n + 1);
	assert_string_equal(s.kinds, "VALUE NEWLINE EOF");
	assert_int_equal(s.tok[0].slen, n);
	assert_int_equal(strlen(s.tok[0].s), n);
	assert_loc(s.tok[0].loc, 1, 1, (uint32_t)n + 1);
	scan_done(&s);
	free(src);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_statement_tokens),
		cmocka_unit_test(test_punctuation),
		cmocka_unit_test(test_keywords),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_integers),
		cmocka_unit_test(test_floats),
		cmocka_unit_test(test_bools),
		cmocka_unit_test(test_strings),
		cmocka_unit_test(test_string_bytes),
		cmocka_unit_test(test_comments),
		cmocka_unit_test(test_newlines_in_brackets),
		cmocka_unit_test(test_crlf),
		cmocka_unit_test(test_final_newline),
		cmocka_unit_test(test_tabs_and_columns),
		cmocka_unit_test(test_stray_bytes),
		cmocka_unit_test(test_non_ascii),
		cmocka_unit_test(test_lone_cr),
		cmocka_unit_test(test_unterminated_string),
		cmocka_unit_test(test_bad_escape),
		cmocka_unit_test(test_integer_overflow),
		cmocka_unit_test(test_float_overflow),
		cmocka_unit_test(test_bad_numbers),
		cmocka_unit_test(test_minus),
		cmocka_unit_test(test_lone_percent),
		cmocka_unit_test(test_long_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
