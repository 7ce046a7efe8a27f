/*
 * codegen.c - the CUDA backend's entry point (`--emit=cu`), the template
 * engine that fills codegen_templates/ sections, and small helpers the
 * other codegen_*.c files share (names, literals, comments).
 *
 * The output file is, in order: the banner and includes, the device
 * helpers, every graph's kernels, every graph's host code (model, call,
 * C API), and the driver main() when --main is given.  Kernels and host
 * code are written into separate memory streams while the graphs are
 * walked, then concatenated, so that every kernel is declared before the
 * host code that launches it.
 */
#include <inttypes.h>
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "codegen.h"

/* ------------------------------------------------------------------ templates */

/* The text of section "FILE:NAME", or NULL; *len gets its length.  A
 * section starts after its line "//@ NAME" and ends at the next "//@ "
 * line (found with strstr: this runs for every statement emitted). */
static const char *
find_section(const char *section, size_t *len)
{
	const char *colon = strchr(section, ':');
	if (!colon)
		return NULL;
	size_t flen = (size_t)(colon - section);
	const char *name = colon + 1;
	size_t nlen = strlen(name);
	char needle[128];
	if (nlen + 7 > sizeof needle)
		return NULL;
	needle[0] = '\n';
	memcpy(needle + 1, "//@ ", 4);
	memcpy(needle + 5, name, nlen);
	needle[nlen + 5] = '\n';
	needle[nlen + 6] = 0;
	for (unsigned i = 0; i < cg_ntemplate_files; i++) {
		const CgTemplateFile *tf = &cg_template_files[i];
		if (strlen(tf->name) != flen || strncmp(tf->name, section, flen) != 0)
			continue;
		const char *p = tf->text;
		if (!p)
			return NULL;
		const char *start;
		if (strncmp(p, needle + 1, nlen + 5) == 0) /* the file's first section */
			start = p + nlen + 5;
		else if ((start = strstr(p, needle)) != NULL)
			start += nlen + 6;
		else
			return NULL;
		const char *end = strstr(start - 1, "\n//@ ");
		end = end ? end + 1 : start + strlen(start);
		*len = (size_t)(end - start);
		return start;
	}
	return NULL;
}

/* The value bound to key (len bytes), or NULL. */
static const char *
lookup(const CgBind *b, const char *key, size_t len)
{
	for (; b->key; b++)
		if (strlen(b->key) == len && strncmp(b->key, key, len) == 0)
			return b->val ? b->val : "";
	return NULL;
}

/* Length of the key after "${" (and an optional '?' or '!'), up to '}'. */
static size_t
key_len(const char *p, const char *section)
{
	size_t n = 0;
	while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= '0' && p[n] <= '9') ||
	       p[n] == '_')
		n++;
	if (p[n] != '}' || n == 0)
		ICE("template %s: malformed placeholder '${%.*s'", section,
		    (int)(n + 1), p);
	return n;
}

/* Writes one line of a template (without its newline) with the
 * placeholders filled. */
static void
emit_line(FILE *f, const char *p, const char *end, const char *section,
          const CgBind *b)
{
	while (p < end) {
		const char *d = memchr(p, '$', (size_t)(end - p));
		if (!d)
			d = end;
		fwrite(p, 1, (size_t)(d - p), f); /* the text up to a '$' */
		p = d;
		if (p == end)
			break;
		if (p + 1 < end && p[1] == '$') {
			fputc('$', f);
			p += 2;
		} else if (p + 1 < end && p[1] == '{') {
			size_t n = key_len(p + 2, section);
			const char *v = lookup(b, p + 2, n);
			if (!v)
				ICE("template %s: no value for '${%.*s}'", section, (int)n,
				    p + 2);
			fputs(v, f);
			p += n + 3;
		} else {
			fputc(*p++, f);
		}
	}
}

/* For a line starting with "${?key}" or "${!key}": whether to write it;
 * *skip gets the prefix's length.  Lines without the prefix are written. */
static int
line_wanted(const char *p, const char *section, const CgBind *b, size_t *skip)
{
	*skip = 0;
	if (p[0] != '$' || p[1] != '{' || (p[2] != '?' && p[2] != '!'))
		return 1;
	size_t n = key_len(p + 3, section);
	const char *v = lookup(b, p + 3, n);
	if (!v)
		ICE("template %s: no value for '${%c%.*s}'", section, p[2], (int)n,
		    p + 3);
	*skip = n + 4;
	int set = v[0] && strcmp(v, "0") != 0;
	return p[2] == '?' ? set : !set;
}

/* Writes len bytes of template text t with b's values ("what" names the
 * template in internal-fault messages). */
static void
emit_text(FILE *f, const char *t, size_t len, const char *section, const CgBind *b)
{
	size_t skip;
	const char *end = t + len;
	while (t < end) {
		const char *eol = memchr(t, '\n', (size_t)(end - t));
		const char *next = eol ? eol + 1 : end;
		if (line_wanted(t, section, b, &skip)) {
			emit_line(f, t + skip, eol ? eol : end, section, b);
			if (eol)
				fputc('\n', f);
		}
		t = next;
	}
}

void
cg_emit(FILE *f, const char *section, const CgBind *b)
{
	size_t len;
	const char *t = find_section(section, &len);
	if (!t)
		ICE("no template section '%s'", section);
	emit_text(f, t, len, section, b);
}

const char *
cg_kernel(CgGraph *G, const char *section, const CgBind *b)
{
	Cg *c = G->c;
	size_t nb = 0, len = 0;
	const char *name = NULL;
	while (b[nb].key)
		nb++;
	CgBind *k = xmalloc((nb + 1) * sizeof *k);
	for (size_t i = 0; i <= nb; i++) { /* the text without name and comment */
		k[i] = b[i];
		if (b[i].key && strcmp(b[i].key, "name") == 0)
			name = b[i].val, k[i].val = "@";
		else if (b[i].key && strcmp(b[i].key, "comment") == 0)
			k[i].val = "";
	}
	if (!name)
		ICE("kernel section %s without a name", section);
	char *text = NULL;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		ICE("open_memstream failed");
	fprintf(f, "%s\n", section);
	cg_emit(f, section, k);
	fclose(f);
	free(k);
	uint32_t *seen = map_get(&c->kernels, text, len);
	if (seen) {
		free(text);
		return c->kernel_names.v[*seen];
	}
	map_put(&c->kernels, arena_strndup(c->a, text, len), len, c->kernel_names.n);
	free(text);
	vec_push(&c->kernel_names, name);
	cg_emit(c->kern, section, b);
	return name;
}

char *
cg_subst(Cg *c, const char *text, const CgBind *b)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		ICE("open_memstream failed");
	emit_text(f, text, strlen(text), text, b);
	fclose(f);
	char *s = arena_strndup(c->a, out, len);
	free(out);
	return s;
}

/* ------------------------------------------------------------------ helpers */

char *
cg_fmt(Cg *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = arena_vprintf(c->a, fmt, ap);
	va_end(ap);
	return s;
}

/* Formats into the room left (one vsnprintf when it fits, as it mostly
 * does), else grows and formats again. */
static void
str_vaddf(CgStr *s, const char *fmt, va_list ap)
{
	if (s->cap < 64) {
		s->cap = 64;
		s->p = xrealloc(s->p, s->cap);
	}
	va_list aq;
	va_copy(aq, ap);
	int n = vsnprintf(s->p + s->n, s->cap - s->n, fmt, aq);
	va_end(aq);
	if (n < 0)
		ICE("vsnprintf failed");
	if (s->n + (size_t)n + 1 > s->cap) {
		s->cap = (s->n + (size_t)n + 1) * 2;
		s->p = xrealloc(s->p, s->cap);
		vsnprintf(s->p + s->n, (size_t)n + 1, fmt, ap);
	}
	s->n += (size_t)n;
}

void
cg_str_addf(CgStr *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	str_vaddf(s, fmt, ap);
	va_end(ap);
}

void
cg_str_itemf(CgStr *s, const char *sep, const char *fmt, ...)
{
	va_list ap;
	if (s->n)
		cg_str_addf(s, "%s", sep);
	va_start(ap, fmt);
	str_vaddf(s, fmt, ap);
	va_end(ap);
}

char *
cg_str_done(Cg *c, CgStr *s)
{
	char *t = s->n ? arena_strndup(c->a, s->p, s->n) : "";
	free(s->p);
	*s = (CgStr){0};
	return t;
}

char *
cg_num(Cg *c, int64_t v)
{
	return cg_fmt(c, "%lld", (long long)v);
}

char *
cg_ident(Cg *c, const char *prefix, const char *name)
{
	char *s = cg_fmt(c, "%s%s", prefix, name);
	for (char *p = s + strlen(prefix); *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			*p = '_';
	return s;
}

char *
cg_unique_ident(Cg *c, Map *used, const char *prefix, const char *name)
{
	char *base = cg_ident(c, prefix, name), *nm = base;
	for (int k = 2; map_get(used, nm, strlen(nm)); k++)
		nm = cg_fmt(c, "%s_%d", base, k);
	map_put(used, nm, strlen(nm), 1);
	return nm;
}

char *
cg_lit_float(Cg *c, double v, int f)
{
	char buf[32];
	if (isnan(v))
		return f ? "sg_nanf()" : "sg_nan()";
	if (isinf(v))
		return v < 0 ? (f ? "-sg_inff()" : "-sg_inf()") : (f ? "sg_inff()" : "sg_inf()");
	if (f) {
		/* The shortest text whose double rounds to the same float. */
		float x = (float)v;
		for (int p = 1; p <= 9; p++) {
			snprintf(buf, sizeof buf, "%.*g", p, (double)x);
			if ((float)strtod(buf, NULL) == x)
				break;
		}
	} else {
		fmt_double(buf, v);
	}
	int whole = !strpbrk(buf, ".en");
	return cg_fmt(c, "%s%s%s", f ? "(float)" : "", buf, whole ? ".0" : "");
}

char *
cg_lit_int(Cg *c, int64_t v)
{
	if (v == INT64_MIN)
		return "(-9223372036854775807LL - 1)";
	return cg_fmt(c, v < 0 ? "(%" PRId64 "LL)" : "%" PRId64 "LL", v);
}

const char *
cg_source_name(Cg *c)
{
	const char *p = c->co->input, *s = strrchr(p, '/');
	return text_escape(c->a, s ? s + 1 : p); /* (in strings and comments) */
}

char *
cg_where(Cg *c, const Node *n)
{
	return cg_fmt(c, "%s:%u", cg_source_name(c), n->loc.line);
}

void
cg_error(Cg *c, const Node *n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	diag_vreport(c->m->diag, "error", n->loc, fmt, ap);
	va_end(ap);
	c->m->diag->nerrors++;
	c->failed = 1;
}

/* An attribute's value as .sg text. */
static char *
attr_text(Cg *c, Graph *g, const Attr *a)
{
	char buf[32];
	switch (a->type) {
	case AT_INT: return cg_fmt(c, "%" PRId64, a->i);
	case AT_BOOL: return a->i ? "true" : "false";
	case AT_FLOAT: return cg_fmt(c, "%s", fmt_double(buf, a->f));
	case AT_NUM:
		if (a->num_kind == OK_FLOAT)
			return cg_fmt(c, "%s", fmt_double(buf, a->f));
		if (a->num_kind == OK_BOOL)
			return a->i ? "true" : "false";
		return cg_fmt(c, "%" PRId64, a->i ? a->i : (int64_t)a->f);
	case AT_STR: return text_c_string(c->a, a->s ? a->s : "");
	case AT_IDENT: return cg_fmt(c, "%s", a->s ? a->s : "");
	case AT_DTYPE: return (char *)dtype_name((DType)a->i);
	case AT_STREAM:
		return (char *)(a->i >= 0 && (uint64_t)a->i < g->streams.n
		                ? g->streams.v[a->i].name : "?");
	case AT_EVENT:
		return (char *)(a->i >= 0 && (uint64_t)a->i < g->events.n
		                ? g->events.v[a->i].name : "?");
	case AT_INTS: {
		CgStr s = {0};
		cg_str_addf(&s, "[");
		for (uint32_t k = 0; k < a->nints; k++)
			cg_str_addf(&s, "%s%" PRId64, k ? ", " : "", a->ints[k]);
		cg_str_addf(&s, "]");
		return cg_str_done(c, &s);
	}
	}
	return "?";
}

/* An operand as .sg text. */
static char *
opnd_text(Cg *c, Graph *g, const Opnd *o)
{
	char buf[32];
	switch (o->kind) {
	case OK_VAL: return cg_fmt(c, "%%%s", g->vals.v[o->v].name);
	case OK_INT: return cg_fmt(c, "%" PRId64, o->i);
	case OK_FLOAT: return cg_fmt(c, "%s", fmt_double(buf, o->f));
	case OK_BOOL: return o->i ? "true" : "false";
	case OK_STREAM: return cg_fmt(c, "%s", g->streams.v[o->v].name);
	case OK_EVENT: return cg_fmt(c, "%s", g->events.v[o->v].name);
	}
	return "?";
}

char *
cg_node_text(Cg *c, Graph *g, const Node *n)
{
	CgStr s = {0};
	for (uint32_t j = 0; j < n->nres; j++)
		cg_str_itemf(&s, ", ", "%%%s", g->vals.v[n->res[j]].name);
	if (n->nres)
		cg_str_addf(&s, " = ");
	if (n->op == OP_DEL || n->op == OP_OFFLOAD) {
		cg_str_addf(&s, "%s %s", op_name(n->op), opnd_text(c, g, &n->opnd[0]));
		return cg_str_done(c, &s);
	}
	cg_str_addf(&s, "%s(", op_name(n->op));
	int k = 0;
	for (uint32_t i = 0; i < n->nopnd; i++, k++)
		cg_str_addf(&s, "%s%s", k ? ", " : "", opnd_text(c, g, &n->opnd[i]));
	if (n->op < OP__N) {
		const OpInfo *oi = &op_table[n->op];
		for (uint32_t i = 0; i < n->nattr && i < oi->nattr; i++) {
			if (!n->attr[i].set)
				continue;
			cg_str_addf(&s, "%s%s=%s", k++ ? ", " : "", oi->attr[i].name,
			            attr_text(c, g, &n->attr[i]));
		}
	}
	for (uint32_t i = 0; i < n->nextra; i++)
		cg_str_addf(&s, "%s%s=%s", k++ ? ", " : "", n->extra[i].key,
		            attr_text(c, g, &n->extra[i].a));
	/* (user text in it, string attributes, is escaped: text_escape) */
	cg_str_addf(&s, ")");
	return cg_str_done(c, &s);
}

char *
cg_stmt_text(Cg *c, Graph *g, const Node *n)
{
	size_t len = 0;
	const char *line = diag_line(c->m->diag, n->loc.line, &len);
	if (!line)
		return cg_node_text(c, g, n);
	while (len && (*line == ' ' || *line == '\t'))
		line++, len--;
	while (len && (line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	const char *made = n->flags & NF_USER ? NULL : cg_node_text(c, g, n);
	/* at most two bytes a source byte (a `/` after `*` gets a blank) */
	char *out = arena_alloc(c->a, 2 * len + (made ? strlen(made) + 10 : 0) + 1), *q = out;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)line[i];
		if (ch == '/' && i && line[i - 1] == '*')
			*q++ = ' ', *q++ = '/'; /* no end of a block comment */
		else if (ch == '\\' || ch < 0x20 || ch > 0x7e)
			*q++ = '?'; /* no line splice, nothing unprintable */
		else
			*q++ = (char)ch;
	}
	if (made)
		q += sprintf(q, "  [sgc: %s]", made);
	*q = 0;
	return out;
}

/* ------------------------------------------------------------------ dtypes */

const char *
cg_ctype(DType t)
{
	static const char *const n[DT__N] = {
		"double", "float", "sg_f16", "sg_bf16", "sg_i64", "sg_i32", "sg_bool",
	};
	return t < DT__N ? n[t] : "void";
}

const char *
cg_regtype(DType t)
{
	switch (t) {
	case DT_F64: return "double";
	case DT_F32: case DT_F16: case DT_BF16: return "float";
	default: return "sg_i64";
	}
}

const char *
cg_dtname(DType t)
{
	return t < DT__N ? dtype_name(t) : "void";
}

const char *
cg_sgrt_dtype(DType t)
{
	static const char *const n[DT__N] = {
		"SGRT_F64", "SGRT_F32", "SGRT_F16", "SGRT_BF16", "SGRT_I64",
		"SGRT_I32", "SGRT_BOOL",
	};
	return t < DT__N ? n[t] : "-1";
}

/* ------------------------------------------------------------------ #line */

/* The marker cg_line_mark writes; never in generated code otherwise. */
static const char line_marker[] = "//@sgc-line ";

char *
cg_line_mark(Cg *c, uint32_t line)
{
	if (c->co->no_line || line == 0)
		return "";
	return cg_fmt(c, "%s%u", line_marker, line);
}

/* Writes text to f, turning the marks of cg_line_mark into #line
 * directives: each code line of a marked region (not blank, not a
 * comment) gets `#line N "FILE.sg"`, so that every line of a kernel or
 * host statement is its .sg line in nvcc's errors, compute-sanitizer's
 * reports and cuda-gdb; after the region the first code line gets a
 * `#line` back to the .cu file's own numbering.  A directive may not
 * stand among a macro's arguments (ISO C++ leaves that undefined), so in a
 * marked region a macro call that the templates spread over several lines
 * (SGRT_KERNEL(..., launch)) is written on one.  The text comes in pieces
 * (the prelude, the kernels, the host code), each ending a line, so that
 * none is copied into one string first. */
typedef struct {
	FILE *f;
	const char *sgq, *cuq;  /* the file names as C string literals */
	uint32_t out, cur, back; /* back: return to .cu numbering */
	int in_comment;         /* inside a block comment */
	int depth;              /* open parentheses (at most 64 tracked) */
	uint64_t macro;         /* bit k: parenthesis k opens a macro call */
	int joining;            /* the last line ended inside a macro call */
} LineWriter;

static void
lines_begin(Cg *c, LineWriter *w, FILE *f)
{
	const CodegenOptions *co = c->co;
	const char *sg = strcmp(co->input, "-") == 0 ? "<stdin>" : co->input;
	const char *cu = co->output;
	if (!cu || strcmp(cu, "-") == 0) { /* sgc's default: FILE.sg -> FILE.cu */
		size_t n = strlen(co->input);
		n -= n > 3 && strcmp(co->input + n - 3, ".sg") == 0 ? 3 : 0;
		cu = strcmp(co->input, "-") == 0 ? "<stdout>" :
		     cg_fmt(c, "%.*s.cu", (int)n, co->input);
	}
	*w = (LineWriter){.f = f, .sgq = text_c_string(c->a, sg),
	                  .cuq = text_c_string(c->a, cu), .out = 1};
}

/* Whether the parenthesis at r (on the line from q) opens a macro call:
 * the name before it is in capitals (SGRT_KERNEL, SGRT_TRY). */
static int
macro_before(const char *q, const char *r)
{
	while (r > q && (r[-1] == ' ' || r[-1] == '\t'))
		r--;
	const char *b = r;
	while (b > q && (isalnum((unsigned char)b[-1]) || b[-1] == '_'))
		b--;
	if (r - b < 2 || !isupper((unsigned char)*b))
		return 0;
	for (const char *t = b; t < r; t++)
		if (islower((unsigned char)*t))
			return 0;
	return 1;
}

static void
lines_write(LineWriter *w, const char *text, size_t len)
{
	const size_t ml = sizeof line_marker - 1;
	if (len && text[len - 1] != '\n')
		ICE("generated code: a piece that does not end a line");
	for (const char *p = text, *end = text + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl + 1 : end;
		size_t n = (size_t)(e - p);
		if (n > ml && memcmp(p, line_marker, ml) == 0) {
			w->cur = (uint32_t)strtoul(p + ml, NULL, 10);
			w->back = 0;
			p = e;
			continue;
		}
		const char *q = p;
		while (q < e && (*q == ' ' || *q == '\t'))
			q++;
		/* Code: not blank, not a comment (nor inside one), no directive. */
		int code = !w->in_comment && q < e && *q != '\n' && *q != '#' &&
		           !(q + 1 < e && q[0] == '/' && (q[1] == '/' || q[1] == '*'));
		const char *line = p;
		int line_comment = 0;
		for (const char *r = q; r < e; r++) {
			if (w->in_comment) {
				if (r + 1 < e && r[0] == '*' && r[1] == '/') {
					w->in_comment = 0;
					r++;
				}
			} else if (r + 1 < e && r[0] == '/' && (r[1] == '/' || r[1] == '*')) {
				line_comment = r[1] == '/';
				if (line_comment)
					break;
				w->in_comment = 1;
				r++;
			} else if (*r == '"' || *r == '\'') { /* a literal: to its end */
				for (char qc = *r++; r < e && *r != qc && *r != '\n'; r++)
					r += *r == '\\';
			} else if (*r == '(') {
				if (w->depth < 64)
					w->macro = (w->macro & ~(1ull << w->depth)) |
					           ((uint64_t)macro_before(q, r) << w->depth);
				w->depth++;
			} else if (*r == ')' && w->depth > 0) {
				w->depth--;
			}
		}
		int in_macro = 0;
		for (int k = 0; k < w->depth && k < 64; k++)
			in_macro |= (int)((w->macro >> k) & 1);
		if (w->joining) { /* the rest of a macro call: after one space */
			p = q;
			n = (size_t)(e - q);
		} else if (code && w->cur) {
			fprintf(w->f, "#line %u %s\n", w->cur, w->sgq);
			w->out++;
		} else if (code && w->back) {
			fprintf(w->f, "#line %u %s\n", w->out + 1, w->cuq);
			w->out++;
			w->back = 0;
		}
		w->joining = code && w->cur && in_macro && !line_comment && n > 1;
		if (w->joining) {
			fwrite(p, 1, n - 1, w->f);
			fputc(' ', w->f);
		} else {
			fwrite(p, 1, n, w->f);
			w->out++;
		}
		if (w->cur && *line == '}' && !w->joining) { /* the end of the function */
			w->cur = 0;
			w->back = 1;
			w->depth = 0;
		}
		p = e;
	}
}

static void
lines_puts(LineWriter *w, const char *s)
{
	lines_write(w, s, strlen(s));
}

/* ------------------------------------------------------------------ kernels */

uint32_t
codegen_kernels_of(Module *m, Graph *g, int opt_level, uint32_t *kernel)
{
	(void)m;
	const Sched *s = sched_get(g, opt_level); /* the fusion pass's groups */
	FusionInfo fi;
	fusion_analyse(g, &fi);
	/* The node whose kernel computes node i. */
	NodeId *home = xmalloc((g->nodes.n + 1) * sizeof *home);
	for (NodeId i = 0; i < g->nodes.n; i++) {
		int gi = s->group[i];
		const FuseGroup *grp = gi >= 0 ? &s->groups.v[gi] : NULL;
		home[i] = !grp ? i : grp->into != NONE ? grp->into :
		          grp->after != NONE ? grp->after : grp->nodes[0];
		kernel[i] = NONE;
	}
	uint32_t nk = 0;
	for (NodeId i = 0; i < g->nodes.n; i++) {
		if ((g->nodes.v[i].flags & NF_DEAD) || fi.region[i] == NONE)
			continue;
		NodeId h = home[i]; /* numbered at the first node it computes */
		kernel[i] = kernel[h] != NONE ? kernel[h] : (kernel[h] = nk++);
	}
	free(home);
	fusion_free(&fi);
	return nk;
}

/* ------------------------------------------------------------------ entry */

/* The options that shaped the output, for the banner. */
static char *
options_text(Cg *c)
{
	const CodegenOptions *co = c->co;
	return cg_fmt(c, "-O%d --arch=%s%s%s", co->opt_level, co->arch,
	              co->cuda_graph ? " --cuda-graph" : "",
	              co->emit_main ? " --main" : "");
}

/* The C names each graph G gets (G, then G_SUFFIX), as codegen_templates/
 * api.cu spells them. */
static const char *const api_suffixes[] = {
	"", "call", "call_io", "capture", "create", "destroy", "event_names",
	"graph_run", "last_error", "load", "model", "peak_bytes", "prog_call",
	"prog_create", "prog_destroy", "prog_runtime", "prog_tensor", "program",
	"run", "runtime", "save", "stream_names", "stream_priorities", "tensor",
	"tensors",
};

/* Whether a graph's C API names would be the runtime's (sgrt_create is
 * libsgrt's) or the kernel library's: sgrt, sgrt_*, sg_*, sgk_*. */
static int
reserved_api_name(const char *name)
{
	return strcmp(name, "sgrt") == 0 || strncmp(name, "sgrt_", 5) == 0 ||
	       strncmp(name, "sg_", 3) == 0 || strncmp(name, "sgk_", 4) == 0;
}

/* Graphs whose C names clash (`g` and `g_prog` both give g_prog_create),
 * or are reserved: an error at the (later) graph.  Returns 0 after
 * reporting. */
static int
check_api_names(Cg *c)
{
	Module *m = c->m;
	Map seen; /* C name -> graph index */
	int ok = 1;
	map_init(&seen);
	for (uint32_t i = 0; i < m->graphs.n && ok; i++) {
		Graph *g = m->graphs.v[i];
		if (reserved_api_name(g->name)) {
			diag_error(m->diag, g->loc, "graph name '%s' is reserved: its C API "
			           "('%s_create'...) would clash with the runtime's and the "
			           "kernel library's names (sgrt, sgrt_*, sg_*, sgk_*); rename it",
			           g->name, g->name);
			ok = 0;
			break;
		}
		for (size_t k = 0; k < sizeof api_suffixes / sizeof *api_suffixes; k++) {
			const char *name = *api_suffixes[k]
			                   ? cg_fmt(c, "%s_%s", g->name, api_suffixes[k]) : g->name;
			uint32_t *other = map_get(&seen, name, strlen(name));
			if (other && *other != i) {
				Graph *o = m->graphs.v[*other];
				diag_error(m->diag, g->loc, "graph '%s' and graph '%s' would both "
				           "define '%s' in the generated C API; rename one",
				           g->name, o->name, name);
				diag_note(m->diag, o->loc, "graph '%s' is here", o->name);
				ok = 0;
				break;
			}
			map_put(&seen, name, strlen(name), i);
		}
	}
	map_free(&seen);
	return ok;
}

int
codegen_module(Module *m, const CodegenOptions *co, FILE *cu, FILE *h)
{
	Cg c = {.m = m, .co = co, .a = m->arena, .hdr = h};
	char *ktext = NULL, *htext = NULL;
	size_t klen = 0, hlen = 0;
	if (!check_api_names(&c))
		return 0;
	map_init(&c.kernels);
	c.kern = open_memstream(&ktext, &klen);
	c.host = open_memstream(&htext, &hlen);
	if (!c.kern || !c.host)
		ICE("open_memstream failed");
	CgStr gl = {0};
	for (uint32_t i = 0; i < m->graphs.n; i++)
		cg_str_itemf(&gl, ", ", "%s", m->graphs.v[i]->name);
	char *graphs = cg_str_done(&c, &gl);
	CgGraph *gs = arena_alloc(c.a, (m->graphs.n + 1) * sizeof *gs);
	if (h)
		CG_EMIT(h, "api.cu:header_top", {"version", SGC_VERSION},
		        {"source", text_escape(c.a, co->input)});
	for (uint32_t i = 0; i < m->graphs.n && !c.failed; i++) {
		if (!cg_graph_analyse(&gs[i], &c, m->graphs.v[i]) || !cg_graph_body(&gs[i]))
			break;
		cg_graph_api(&gs[i]);
	}
	if (!c.failed && co->emit_main && m->graphs.n > 0)
		cg_main(&c, &gs[0]);
	if (h)
		CG_EMIT(h, "api.cu:header_bottom", {"x", ""});
	for (uint32_t i = 0; i < m->graphs.n; i++)
		cg_graph_free(&gs[i]);
	fclose(c.kern);
	fclose(c.host);
	map_free(&c.kernels);
	vec_free(&c.kernel_names);
	if (!c.failed) {
		char *pre = NULL;
		size_t plen = 0;
		FILE *pf = open_memstream(&pre, &plen);
		if (!pf)
			ICE("open_memstream failed");
		CG_EMIT(pf, "prelude.cu:banner", {"version", SGC_VERSION},
		        {"source", text_escape(c.a, co->input)}, {"options", options_text(&c)},
		        {"graphs", graphs}, {"arch", co->arch});
		CG_EMIT(pf, "prelude.cu:includes", {"x", ""});
		for (uint32_t i = 0; i < c.libraries.n; i++) {
			if (!c.attn_dropout && strcmp(c.libraries.v[i], "sgk_attention.cuh") == 0)
				CG_EMIT(pf, "prelude.cu:attention_no_dropout", {"x", ""});
			CG_EMIT(pf, "prelude.cu:library", {"file", c.libraries.v[i]});
		}
		fclose(pf);
		LineWriter w;
		lines_begin(&c, &w, cu);
		lines_write(&w, pre, plen);
		lines_write(&w, ktext, klen);
		lines_puts(&w, "\n#ifndef __CUDACC_RTC__\n");
		lines_write(&w, htext, hlen);
		lines_puts(&w, "\n#endif /* __CUDACC_RTC__ */\n");
		free(pre);
	}
	vec_free(&c.libraries);
	free(ktext);
	free(htext);
	return !c.failed;
}

void
codegen_memory_report(FILE *f, Module *m, const char *only_graph, int opt_level)
{
	for (uint32_t i = 0; i < m->graphs.n; i++) {
		Graph *g = m->graphs.v[i];
		if (only_graph && strcmp(only_graph, g->name) != 0)
			continue;
		/* The plan the generated code reserves: the memplan pass's, over
		 * the program as its kernels run it (checked by the verifier after
		 * that pass: an internal error when two live buffers overlap). */
		const Sched *s = g->sched;
		if (!s || !s->planned)
			ICE("graph '%s' has no memory plan", g->name);
		memplan_report(f, g, &s->plan);
		/* --offload-budget is held to the plan of the graph as the
		 * passes leave it, before fusion (docs/offload.md): shown too. */
		MemPlan pre;
		memplan_build(g, opt_level, &pre);
		fprintf(f, "  before fusion: device arena peak %" PRIu64
		        " bytes (what --offload-budget is held to)\n", pre.peak);
		memplan_free(&pre);
		fprintf(f, "  check: no two buffers that may be live at once share memory\n");
	}
}
