/*
 * diag.c - diagnostics in the form C compilers use:
 *
 *   model.sg:12:15: error: message
 *      12 |   %o = matmul(%h, %w2)
 *         |               ^~
 *
 * Source lines are printed byte for byte except that bytes that are not
 * printable ASCII (NUL, control bytes, invalid UTF-8) are shown as '?', so
 * a diagnostic never writes raw garbage to the terminal.  Lines longer than
 * 200 bytes are cut around the caret.
 */
#include <stdlib.h>
#include <string.h>

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

static void
show_source(Diag *d, Loc at)
{
	if (!d->src || at.line == 0)
		return;
	if (!d->linestart)
		build_lines(d);
	if (at.line > d->nlines)
		return;
	size_t start = d->linestart[at.line - 1], end = start;
	while (end < d->srclen && d->src[end] != '\n')
		end++;
	if (end > start && d->src[end - 1] == '\r')
		end--;
	size_t col = at.col ? at.col - 1 : 0; /* bytes into the line */
	if (col > end - start)
		col = end - start;
	/* Cut long lines to a window around the caret. */
	size_t from = 0, to = end - start;
	if (to > SHOW_MAX) {
		from = col > SHOW_MAX / 2 ? col - SHOW_MAX / 2 : 0;
		to = from + SHOW_MAX < to ? from + SHOW_MAX : to;
	}
	/* The gutter is 5 wide, wider for line numbers of 6 digits or more. */
	int w = at.line > 99999 ? snprintf(NULL, 0, "%u", at.line) + 1 : 5;
	fprintf(d->out, "%*u | ", w, at.line);
	for (size_t i = from; i < to; i++) {
		unsigned char c = (unsigned char)d->src[start + i];
		fputc(c == '\t' || (c >= 0x20 && c < 0x7f) ? c : '?', d->out);
	}
	fprintf(d->out, "\n%*s | ", w, "");
	for (size_t i = from; i < col; i++)
		fputc(d->src[start + i] == '\t' ? '\t' : ' ', d->out);
	fputc('^', d->out);
	size_t len = at.len;
	for (size_t i = 1; i < len && col + i < to; i++)
		fputc('~', d->out);
	fputc('\n', d->out);
}

void
diag_vreport(Diag *d, const char *kind, Loc at, const char *fmt, va_list ap)
{
	if (at.line)
		fprintf(d->out, "%s:%u:%u: %s: ", d->path, at.line, at.col, kind);
	else
		fprintf(d->out, "%s: %s: ", d->path, kind);
	vfprintf(d->out, fmt, ap);
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
