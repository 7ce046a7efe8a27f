/*
 * diag.c - diagnostics in the form C compilers use:
 *
 *   model.sg:12:15: error: message
 *      12 |   %o = matmul(%h, %w2)
 *         |               ^~
 *
 * Source lines are printed byte for byte, UTF-8 characters as they are
 * (the caret line counts one column for each), except that bytes that are
 * neither printable ASCII nor part of a valid UTF-8 character (NUL,
 * control bytes, invalid UTF-8) are shown as '?', so a diagnostic never
 * writes raw garbage to the terminal.  Lines longer than 200 bytes are cut
 * around the caret.
 *
 * With colour (-fdiagnostics-color), as Clang: the location and message in
 * bold, the kind in red (error), magenta (warning) or cyan (note), the
 * caret in green.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sgc.h"

enum { SHOW_MAX = 200 };

void
diag_init(Diag *d, const char *path, const char *src, size_t len)
{
	memset(d, 0, sizeof *d);
	d->path = path;
	d->src = src;
	d->srclen = len;
	d->max_errors = 20;
	d->out = stderr;
}

void
diag_fini(Diag *d)
{
	free(d->linestart);
	d->linestart = NULL;
}

static void
build_lines(Diag *d)
{
	uint32_t n = 1, cap = 1024;
	d->linestart = xmalloc(cap * sizeof *d->linestart);
	d->linestart[0] = 0;
	for (size_t i = 0; i < d->srclen; i++) {
		if (d->src[i] != '\n')
			continue;
		if (n == cap) {
			cap *= 2;
			d->linestart = xrealloc(d->linestart, cap * sizeof *d->linestart);
		}
		d->linestart[n++] = (uint32_t)(i + 1);
	}
	d->nlines = n;
}

const char *
diag_line(Diag *d, uint32_t line, size_t *len)
{
	if (!d->src || line == 0)
		return NULL;
	if (!d->linestart)
		build_lines(d);
	if (line > d->nlines)
		return NULL;
	size_t start = d->linestart[line - 1], end = start;
	while (end < d->srclen && d->src[end] != '\n')
		end++;
	if (end > start && d->src[end - 1] == '\r')
		end--;
	*len = end - start;
	return d->src + start;
}

/* An SGR sequence when colour is on. */
static void
sgr(const Diag *d, const char *code)
{
	if (d->color)
		fprintf(d->out, "\033[%sm", code);
}

/* The length of the valid UTF-8 character of two to four bytes at p (of
 * left bytes), 0 when there is none (RFC 3629: no overlong form, no
 * surrogate, nothing above U+10FFFF). */
static size_t
utf8_len(const unsigned char *p, size_t left)
{
	if (!left || p[0] < 0xc2 || p[0] > 0xf4)
		return 0;
	size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : 2;
	if (n > left)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
	    (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
		return 0;
	return n;
}

/* Where the character at u[i] ends: after its UTF-8 bytes, or after the
 * one byte that is none. */
static size_t
char_end(const unsigned char *u, size_t i, size_t to)
{
	size_t k = utf8_len(u + i, to - i);
	return i + (k ? k : 1);
}

static void
show_source(Diag *d, Loc at)
{
	size_t n;
	const char *line = diag_line(d, at.line, &n);
	if (!line)
		return;
	size_t col = at.col ? at.col - 1 : 0; /* bytes into the line */
	if (col > n)
		col = n;
	/* Cut long lines to a window around the caret. */
	size_t from = 0, to = n;
	if (to > SHOW_MAX) {
		from = col > SHOW_MAX / 2 ? col - SHOW_MAX / 2 : 0;
		to = from + SHOW_MAX < to ? from + SHOW_MAX : to;
	}
	/* The gutter is 5 wide, wider for line numbers of 6 digits or more. */
	int w = at.line > 99999 ? snprintf(NULL, 0, "%u", at.line) + 1 : 5;
	fprintf(d->out, "%*u | ", w, at.line);
	/* (the window's ends may cut a character: its bytes show as '?') */
	const unsigned char *u = (const unsigned char *)line;
	for (size_t i = from; i < to;) {
		size_t k = utf8_len(u + i, to - i);
		if (k) {
			fwrite(u + i, 1, k, d->out);
			i += k;
			continue;
		}
		fputc(u[i] == '\t' || (u[i] >= 0x20 && u[i] < 0x7f) ? u[i] : '?', d->out);
		i++;
	}
	fprintf(d->out, "\n%*s | ", w, "");
	for (size_t i = from; i < col; i = char_end(u, i, to))
		fputc(line[i] == '\t' ? '\t' : ' ', d->out);
	sgr(d, "1;32");
	fputc('^', d->out);
	size_t end = col + (at.len ? at.len : 1);
	for (size_t i = char_end(u, col, to); i < end && i < to; i = char_end(u, i, to))
		fputc('~', d->out);
	sgr(d, "0");
	fputc('\n', d->out);
}

void
diag_vreport(Diag *d, const char *kind, Loc at, const char *fmt, va_list ap)
{
	sgr(d, "1");
	if (at.line)
		fprintf(d->out, "%s:%u:%u: ", d->path, at.line, at.col);
	else
		fprintf(d->out, "%s: ", d->path);
	sgr(d, kind[0] == 'e' ? "1;31" : kind[0] == 'w' ? "1;35" : "1;36");
	fprintf(d->out, "%s: ", kind);
	sgr(d, "0;1");
	vfprintf(d->out, fmt, ap);
	sgr(d, "0");
	fputc('\n', d->out);
	show_source(d, at);
}

int
diag_full(const Diag *d)
{
	return d->nerrors >= d->max_errors;
}

void
diag_error(Diag *d, Loc at, const char *fmt, ...)
{
	va_list ap;
	if (d->nerrors >= d->max_errors) {
		d->nerrors++;
		return;
	}
	va_start(ap, fmt);
	diag_vreport(d, "error", at, fmt, ap);
	va_end(ap);
	if (++d->nerrors == d->max_errors)
		fprintf(d->out, "%s: fatal error: too many errors emitted, stopping now\n",
		        d->path);
}

void
diag_warning(Diag *d, Loc at, const char *fmt, ...)
{
	va_list ap;
	d->nwarnings++;
	if (d->nerrors >= d->max_errors)
		return;
	va_start(ap, fmt);
	diag_vreport(d, "warning", at, fmt, ap);
	va_end(ap);
}

void
diag_note(Diag *d, Loc at, const char *fmt, ...)
{
	va_list ap;
	/* A note belongs to the diagnostic just before it; none once full. */
	if (d->nerrors > d->max_errors ||
	    (d->nerrors == d->max_errors && d->max_errors == 0))
		return;
	va_start(ap, fmt);
	diag_vreport(d, "note", at, fmt, ap);
	va_end(ap);
}

int
diag_color_mode(const char *mode, int *color)
{
	if (strcmp(mode, "always") == 0)
		*color = 1;
	else if (strcmp(mode, "never") == 0)
		*color = 0;
	else if (strcmp(mode, "auto") == 0)
		*color = isatty(STDERR_FILENO) && !getenv("NO_COLOR");
	else
		return 0;
	return 1;
}

/* ------------------------------------------------------------------ did you mean */

enum { SUGGEST_MAX = 64 }; /* longer names are not compared */

/* The edit distance of a and b (Levenshtein, one row). */
static size_t
edit_distance(const char *a, size_t na, const char *b, size_t nb)
{
	size_t row[SUGGEST_MAX + 1];
	for (size_t j = 0; j <= nb; j++)
		row[j] = j;
	for (size_t i = 1; i <= na; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= nb; j++) {
			size_t up = row[j];
			size_t best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[nb];
}

void
diag_suggest_init(DiagSuggest *s, const char *name)
{
	s->name = name;
	s->best = NULL;
	/* The first distance too far; never all of the name (no 'B' for 'D'). */
	size_t n = strlen(name), most = (n + 2) / 3;
	s->dist = (most < n ? most : n - (n > 0)) + 1;
}

void
diag_suggest_add(DiagSuggest *s, const char *cand)
{
	if (!cand)
		return;
	size_t na = strlen(s->name), nb = strlen(cand);
	if (!cand[0] || na > SUGGEST_MAX || nb > SUGGEST_MAX || strcmp(cand, s->name) == 0)
		return;
	size_t gap = na > nb ? na - nb : nb - na;
	if (gap >= s->dist)
		return;
	size_t d = edit_distance(s->name, na, cand, nb);
	if (d < s->dist) {
		s->dist = d;
		s->best = cand;
	}
}

const char *
diag_suggest_text(const DiagSuggest *s, const char *prefix, char *buf, size_t cap)
{
	if (!s->best)
		return "";
	snprintf(buf, cap, "; did you mean '%s%s'?", prefix, s->best);
	return buf;
}
