/*
 * main.c - the sgc command: options, reading the input, the pipeline, and
 * writing outputs only once everything succeeded.
 *
 *   sgc [options] FILE.sg -o OUT.cu       compile to one CUDA C file
 *   sgc run [options] FILE.sg             run on the CPU (reference interpreter)
 *   sgc check [options] FILE.sg           run every pass and verifier; write nothing
 *   sgc --version | --help
 *
 * Exit status: 0 success, 1 the input is wrong, 2 wrong usage, 3 an I/O
 * error on a named file, 4 an internal compiler error.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"
#include "sgrt_out.h"

#ifndef SGC_VERSION_STR
#define SGC_VERSION_STR SGC_VERSION
#endif

enum { EXIT_INPUT = 1, EXIT_USAGE = 2, EXIT_IO = 3 };
/* The largest source file read (docs/sgc.1, LIMITS). */
enum { SGC_MAX_SOURCE = 64 << 20 };
enum { MODE_COMPILE, MODE_RUN, MODE_CHECK };
enum { EMIT_CU, EMIT_IR, EMIT_DOT };

typedef struct {
	int mode;
	const char *input;
	const char *output;     /* -o */
	const char *header;     /* --header */
	int emit_main;          /* --main */
	int cuda_graph;         /* --cuda-graph */
	int emit;               /* --emit= */
	const char *arch;
	int md;                 /* -MD */
	const char *mf;         /* -MF */
	PassOptions po;
	const char *graph;      /* --graph */
	VEC(DimOverride) dims;  /* -D */
	RunOptions ro;
	int memory;             /* check --memory */
	int no_line;            /* --no-line */
	const char *color;      /* -fdiagnostics-color= */
} Options;

static const char usage_text[] =
"usage: sgc [options] FILE.sg -o OUT.cu    compile to one CUDA C file\n"
"       sgc run [options] FILE.sg          execute on the CPU (reference interpreter)\n"
"       sgc check [options] FILE.sg        parse, run every pass and verifier; write nothing\n"
"       sgc --version | --help\n";

static const char help_text[] =
"\n"
"options:\n"
"  -o FILE              output file; '-' for standard output\n"
"  --header FILE        also write the C header of the generated API\n"
"  --main               also emit a main() driver\n"
"  --cuda-graph         replay each call of the generated code as a CUDA graph\n"
"  --emit=cu|ir|dot     what -o receives: CUDA C (default), the graph after all\n"
"                       passes in .sg syntax, or a Graphviz picture\n"
"  --dump-after=PASS    print the graph after PASS to standard error ('all': every pass)\n"
"  -D NAME=INT          override (or define) a dim\n"
"  -O0, -O2             no fusion and no memory reuse / optimise (default)\n"
"  --arch=sm_90         target architecture (default sm_90)\n"
"  --graph NAME         compile only that graph of the file\n"
"  --allow-races        report happens-before gaps as warnings\n"
"  -fdiagnostics-color=auto|always|never\n"
"                       colour in diagnostics (auto: on a terminal, and not\n"
"                       with NO_COLOR set; alone: always)\n"
"  --                   what follows is the input file, even one named -x.sg\n"
"  --no-line            no #line directives (by default every kernel and host\n"
"                       statement is mapped to its .sg line for nvcc,\n"
"                       compute-sanitizer and cuda-gdb)\n"
"  --offload=MODE       marked: honour `offload` statements (default); none:\n"
"                       ignore them; auto: also offload saved activations,\n"
"                       each that lowers the estimated peak, until it fits\n"
"  --offload-budget=B   device bytes for --offload=auto (implies it; default 0)\n"
"  --bucket-bytes=B     size of grad_sync's all_reduce buckets (default 25 MiB)\n"
"  --no-remat           keep every activation backward reads (by default, at\n"
"                       -O2, pointwise ones are recomputed in backward where\n"
"                       that lowers the peak)\n"
"  --remat-budget=B     recompute only as many as the estimated device peak\n"
"                       needs to fit B bytes (default 0: every one that lowers it)\n"
"  --test-drop-sync=N   tests only: drop the N-th compiler-made sync and skip\n"
"                       the race verifier (to show --interleave catches it)\n"
"  -MD -MF FILE         write a Make-style dependency file\n"
"\n"
"sgc check options:\n"
"  --memory             print each graph's memory plan and check it\n"
"\n"
"sgc run options:\n"
"  --params P           params, consts and optimizer state (safetensors)\n"
"  --inputs I           inputs (safetensors); repeated: read together, later wins\n"
"  --out O              write outputs, params and state (safetensors)\n"
"  --steps N            run N calls (default 1)\n"
"  --seed S             seed for params missing from --params (default 0)\n"
"  --allow-extra        ignore tensors of --params/--inputs that match no name\n"
"  --interleave=SEED    interleave streams in a random legal order, poisoning\n"
"                       freed buffers\n"
"\n"
"Exit status: 0 success, 1 the input is wrong, 2 wrong usage, 3 an I/O error,\n"
"4 an internal compiler error.\n";

static int
usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
	va_list ap;
	fputs("sgc: error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs(usage_text, stderr);
	return EXIT_USAGE;
}

/* ------------------------------------------------------------------ options */

static int
parse_int(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno)
		return 0;
	*out = v;
	return 1;
}

static int
is_ident(const char *s, size_t n)
{
	if (!n || !(s[0] == '_' || (s[0] >= 'A' && s[0] <= 'Z') ||
	            (s[0] >= 'a' && s[0] <= 'z')))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return 0;
	return 1;
}

static int
add_define(Options *o, const char *arg)
{
	const char *eq = strchr(arg, '=');
	int64_t n;
	if (!eq || !is_ident(arg, (size_t)(eq - arg)) || !parse_int(eq + 1, &n))
		return usage_error("-D expects NAME=INT, not '%s'", arg);
	if (n < 0)
		return usage_error("-D %.*s: a size cannot be negative", (int)(eq - arg), arg);
	if (n == 0 && eq - arg == 5 && strncmp(arg, "WORLD", 5) == 0)
		return usage_error("-D WORLD=0: WORLD must be at least 1");
	DimOverride d = {.name = strndup(arg, (size_t)(eq - arg)), .n = n};
	vec_push(&o->dims, d);
	return 0;
}

/* Matches "--name=value" or "--name value"; advances *i for the latter. */
static int
opt_value(int argc, char **argv, int *i, const char *name, const char **val,
          int *err)
{
	const char *a = argv[*i];
	size_t n = strlen(name);
	if (strncmp(a, name, n) != 0)
		return 0;
	if (a[n] == '=') {
		*val = a + n + 1;
		return 1;
	}
	if (a[n] != 0)
		return 0;
	if (*i + 1 >= argc) {
		*err = usage_error("option '%s' needs a value", name);
		return 1;
	}
	*val = argv[++*i];
	return 1;
}

static int
parse_u64(const char *name, const char *s, uint64_t *out, int *err)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (!*s || *end || errno || s[0] == '-') {
		*err = usage_error("%s expects a non-negative integer, not '%s'", name, s);
		return 0;
	}
	*out = v;
	return 1;
}

/* Stats the directory part of path ("." when none) into st; *base is
 * the rest. */
static int
stat_dir(const char *path, struct stat *st, const char **base)
{
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	if (!slash)
		return stat(".", st);
	size_t n = (size_t)(slash - path);
	char *dir = xmalloc(n + 2);
	memcpy(dir, path, n);
	dir[n ? n : 1] = 0;
	if (!n)
		dir[0] = '/';
	int rc = stat(dir, st);
	free(dir);
	return rc;
}

/* 1 when paths a and b name one file: the same text; when both exist,
 * the same device and inode; else the same name in the same directory. */
static int
same_file(const char *a, const char *b)
{
	struct stat sa, sb;
	const char *ba, *bb;
	if (strcmp(a, b) == 0)
		return 1;
	if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	return stat_dir(a, &sa, &ba) == 0 && stat_dir(b, &sb, &bb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino && strcmp(ba, bb) == 0;
}

/* Two of the input, -o, --header and -MF naming one file is a usage error (one would
 * silently replace the other).  The defaults (-o from the input's name,
 * -MF from -o's) are not known here; compile() checks them. */
static int
same_outputs(const Options *o)
{
	const char *names[4] = {"the input", "-o", "--header", "-MF"};
	const char *paths[4] = {o->input, o->output, o->header, o->mf};
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			if (paths[i] && paths[j] && strcmp(paths[i], "-") != 0 &&
			    same_file(paths[i], paths[j]))
				return usage_error("%s and %s name the same file '%s'",
				                   names[i], names[j], paths[j]);
	return 0;
}

static int
parse_options(int argc, char **argv, Options *o)
{
	int err = 0, first = 1, offload = 0, budget = 0, rbudget = 0;
	o->po.opt_level = 2;
	o->arch = "sm_90";
	o->ro.steps = 1;
	if (argc > 1 && strcmp(argv[1], "run") == 0) {
		o->mode = MODE_RUN;
		first = 2;
	} else if (argc > 1 && strcmp(argv[1], "check") == 0) {
		o->mode = MODE_CHECK;
		first = 2;
	}
	int files_only = 0; /* after "--": every word is a file */
	for (int i = first; i < argc && !err; i++) {
		const char *a = argv[i], *v = NULL;
		if (files_only || strcmp(a, "-") == 0 || a[0] != '-') {
			if (o->input)
				return usage_error("more than one input file ('%s' and '%s')",
				                   o->input, a);
			o->input = a;
		} else if (strcmp(a, "--") == 0) {
			files_only = 1;
		} else if (strcmp(a, "-o") == 0) {
			if (i + 1 >= argc)
				return usage_error("option '-o' needs a file");
			o->output = argv[++i];
		} else if (strncmp(a, "-o", 2) == 0 && a[2]) {
			o->output = a + 2;
		} else if (opt_value(argc, argv, &i, "--header", &v, &err)) {
			o->header = v;
		} else if (strcmp(a, "--main") == 0) {
			o->emit_main = 1;
		} else if (strcmp(a, "--cuda-graph") == 0) {
			o->cuda_graph = 1;
		} else if (opt_value(argc, argv, &i, "--emit", &v, &err)) {
			if (err)
				break;
			if (strcmp(v, "cu") == 0)
				o->emit = EMIT_CU;
			else if (strcmp(v, "ir") == 0)
				o->emit = EMIT_IR;
			else if (strcmp(v, "dot") == 0)
				o->emit = EMIT_DOT;
			else
				return usage_error("--emit expects cu, ir or dot, not '%s'", v);
		} else if (opt_value(argc, argv, &i, "--dump-after", &v, &err)) {
			if (err)
				break;
			if (!passes_known(v)) {
				fprintf(stderr, "sgc: error: unknown pass '%s'; passes: ", v);
				passes_list(stderr);
				return EXIT_USAGE;
			}
			o->po.dump_after = v;
		} else if (strcmp(a, "-D") == 0) {
			if (i + 1 >= argc)
				return usage_error("option '-D' needs NAME=INT");
			err = add_define(o, argv[++i]);
		} else if (strncmp(a, "-D", 2) == 0) {
			err = add_define(o, a + 2);
		} else if (strcmp(a, "-O0") == 0) {
			o->po.opt_level = 0;
		} else if (strcmp(a, "-O2") == 0) {
			o->po.opt_level = 2;
		} else if (opt_value(argc, argv, &i, "--arch", &v, &err)) {
			if (err)
				break;
			if (strncmp(v, "sm_", 3) != 0 || strlen(v) < 5 ||
			    strspn(v + 3, "0123456789") < 2)
				return usage_error("--arch expects sm_NN (e.g. sm_90), not '%s'", v);
			o->arch = v;
			o->po.sm = atoi(v + 3);
		} else if (opt_value(argc, argv, &i, "--graph", &v, &err)) {
			o->graph = v;
		} else if (strcmp(a, "-fdiagnostics-color") == 0) {
			o->color = "always"; /* as GCC */
		} else if (strncmp(a, "-fdiagnostics-color=", 20) == 0) {
			int on;
			if (!diag_color_mode(a + 20, &on))
				return usage_error("-fdiagnostics-color expects auto, always or "
				                   "never, not '%s'", a + 20);
			o->color = a + 20;
		} else if (strcmp(a, "--no-line") == 0) {
			o->no_line = 1;
		} else if (strcmp(a, "--allow-races") == 0) {
			o->po.allow_races = 1;
		} else if (strcmp(a, "--no-remat") == 0) {
			o->po.no_remat = 1;
		} else if (strcmp(a, "--remat") == 0) {
			o->po.no_remat = 0;
		} else if (opt_value(argc, argv, &i, "--remat-budget", &v, &err)) {
			if (!err && parse_u64("--remat-budget", v, &o->po.remat_budget, &err))
				rbudget = 1;
		} else if (opt_value(argc, argv, &i, "--offload-budget", &v, &err)) {
			if (!err && parse_u64("--offload-budget", v, &o->po.offload_budget, &err))
				budget = 1;
		} else if (opt_value(argc, argv, &i, "--offload", &v, &err)) {
			if (err)
				break;
			if (strcmp(v, "marked") == 0)
				o->po.offload = OFFLOAD_MARKED;
			else if (strcmp(v, "none") == 0)
				o->po.offload = OFFLOAD_NONE;
			else if (strcmp(v, "auto") == 0)
				o->po.offload = OFFLOAD_AUTO;
			else
				return usage_error("--offload expects marked, none or auto, not '%s'", v);
			offload = 1;
		} else if (opt_value(argc, argv, &i, "--bucket-bytes", &v, &err)) {
			if (!err)
				parse_u64("--bucket-bytes", v, &o->po.bucket_bytes, &err);
		} else if (opt_value(argc, argv, &i, "--test-drop-sync", &v, &err)) {
			uint64_t n;
			if (!err && parse_u64("--test-drop-sync", v, &n, &err))
				o->po.test_drop_sync = n > INT_MAX ? INT_MAX : (int)n;
		} else if (o->mode == MODE_CHECK && strcmp(a, "--memory") == 0) {
			o->memory = 1;
		} else if (strcmp(a, "-MD") == 0) {
			o->md = 1;
		} else if (strcmp(a, "-MF") == 0) {
			if (i + 1 >= argc)
				return usage_error("option '-MF' needs a file");
			o->mf = argv[++i];
		} else if (strncmp(a, "-MF", 3) == 0) {
			o->mf = a + 3;
		} else if (o->mode == MODE_RUN &&
		           opt_value(argc, argv, &i, "--params", &v, &err)) {
			o->ro.params = v;
		} else if (o->mode == MODE_RUN &&
		           opt_value(argc, argv, &i, "--inputs", &v, &err)) {
			if (!err && o->ro.ninputs == SGRT_MAX_INPUT_FILES)
				return usage_error("at most %d --inputs files", SGRT_MAX_INPUT_FILES);
			if (!err)
				o->ro.inputs[o->ro.ninputs++] = v;
		} else if (o->mode == MODE_RUN &&
		           opt_value(argc, argv, &i, "--out", &v, &err)) {
			o->ro.out = v;
		} else if (o->mode == MODE_RUN &&
		           opt_value(argc, argv, &i, "--steps", &v, &err)) {
			uint64_t n;
			if (!err && parse_u64("--steps", v, &n, &err)) {
				if (n < 1 || n > INT_MAX)
					return usage_error("--steps expects a count from 1 to %d, "
					                   "not '%s'", INT_MAX, v);
				o->ro.steps = (int)n;
			}
		} else if (o->mode == MODE_RUN &&
		           opt_value(argc, argv, &i, "--seed", &v, &err)) {
			if (!err)
				parse_u64("--seed", v, &o->ro.seed, &err);
		} else if (o->mode == MODE_RUN && strcmp(a, "--allow-extra") == 0) {
			o->ro.allow_extra = 1;
		} else if (o->mode == MODE_RUN &&
		           opt_value(argc, argv, &i, "--interleave", &v, &err)) {
			if (!err && parse_u64("--interleave", v, &o->ro.interleave_seed, &err))
				o->ro.interleave = 1;
		} else {
			return usage_error("unknown option '%s'%s", a,
			                   o->mode != MODE_RUN && (strncmp(a, "--params", 8) == 0 ||
			                   strncmp(a, "--inputs", 8) == 0 || strncmp(a, "--out", 5) == 0 ||
			                   strncmp(a, "--steps", 7) == 0 || strncmp(a, "--seed", 6) == 0 ||
			                   strncmp(a, "--interleave", 12) == 0 ||
			                   strcmp(a, "--allow-extra") == 0)
			                   ? " (it belongs to 'sgc run')" : "");
		}
	}
	if (err)
		return err;
	if (budget && offload && o->po.offload != OFFLOAD_AUTO)
		return usage_error("--offload-budget needs --offload=auto");
	if (budget)
		o->po.offload = OFFLOAD_AUTO;
	if (rbudget && o->po.no_remat)
		return usage_error("--remat-budget needs remat, which --no-remat turns off");
	if (!o->input)
		return usage_error("no input file");
	if (o->mode != MODE_COMPILE && (o->output || o->header || o->emit_main ||
	                                o->md || o->mf))
		return usage_error("'sgc %s' writes no output file; -o, --header, "
		                   "--main, -MD and -MF belong to compilation",
		                   o->mode == MODE_RUN ? "run" : "check");
	if (o->header && o->emit != EMIT_CU)
		return usage_error("--header needs --emit=cu");
	if (o->emit_main && o->emit != EMIT_CU)
		return usage_error("--main needs --emit=cu");
	if (o->mf && !o->md)
		o->md = 1;
	return same_outputs(o);
}

/* ------------------------------------------------------------------ files */

/* Reads a whole file (it may hold NUL bytes); NUL-terminates the copy. */
static char *
read_file(const char *path, size_t *len, int *status)
{
	*status = EXIT_IO;
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "sgc: error: cannot open '%s': %s\n", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		fprintf(stderr, "sgc: error: cannot read '%s': Is a directory\n", path);
		if (f != stdin)
			fclose(f);
		return NULL;
	}
	size_t cap = 65536, n = 0;
	char *buf = xmalloc(cap + 1);
	for (;;) {
		size_t got = fread(buf + n, 1, cap - n, f);
		n += got;
		if (n > SGC_MAX_SOURCE) {
			*status = EXIT_INPUT;
			fprintf(stderr, "sgc: error: '%s' is larger than %d MiB, the limit "
			        "for a source file\n", path, SGC_MAX_SOURCE >> 20);
			free(buf);
			if (f != stdin)
				fclose(f);
			return NULL;
		}
		if (n < cap) {
			if (ferror(f)) {
				fprintf(stderr, "sgc: error: cannot read '%s': %s\n", path,
				        strerror(errno));
				free(buf);
				if (f != stdin)
					fclose(f);
				return NULL;
			}
			break;
		}
		cap *= 2;
		buf = xrealloc(buf, cap + 1);
	}
	if (f != stdin)
		fclose(f);
	buf[n] = 0;
	*len = n;
	return buf;
}

/* Writes data to path as compilers do (runtime/sgrt_out.h: a device or
 * FIFO in place, a symlink through, else a mkstemp file renamed over the
 * target), so that a failure leaves no partial file.  "-" writes to
 * standard output. */
static int
write_output(const char *path, const char *data, size_t len)
{
	if (strcmp(path, "-") == 0) {
		if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0) {
			fprintf(stderr, "sgc: error: cannot write standard output: %s\n",
			        strerror(errno));
			return EXIT_IO;
		}
		return 0;
	}
	int e = sgrt_out_file(path, data, len);
	if (e) {
		fprintf(stderr, "sgc: error: cannot write '%s': %s\n", path, strerror(e));
		return EXIT_IO;
	}
	return 0;
}

/* Removes an output written before a later one failed; only a regular
 * file (never a device, FIFO or what a symlink names). */
static void
drop_output(const char *path)
{
	struct stat st;
	if (strcmp(path, "-") != 0 && lstat(path, &st) == 0 && S_ISREG(st.st_mode))
		remove(path);
}

/* A path in a Make rule "OUT: INPUT", escaped as GCC does (and Make and
 * Ninja read): a blank gets a backslash and the backslashes before it are
 * doubled, '#' becomes \#, '$' becomes $$; other backslashes stay. */
static void
put_make_path(FILE *f, const char *p)
{
	for (const char *s = p; *s; s++) {
		if (*s == ' ' || *s == '\t') {
			for (const char *b = s; b > p && b[-1] == '\\'; b--)
				fputc('\\', f);
			fputc('\\', f);
		} else if (*s == '#') {
			fputc('\\', f);
		} else if (*s == '$') {
			fputc('$', f);
		}
		fputc(*s, f);
	}
}

/* The input's path with its .sg (if any) replaced by suffix, in the
 * input's directory: the contract's "FILE.cu beside the input". */
static char *
beside_input(const char *input, const char *suffix)
{
	size_t n = strlen(input);
	const char *base = strrchr(input, '/');
	base = base ? base + 1 : input;
	if (strlen(base) > 3 && strcmp(input + n - 3, ".sg") == 0)
		n -= 3;
	char *s = xmalloc(n + strlen(suffix) + 1);
	memcpy(s, input, n);
	strcpy(s + n, suffix);
	return s;
}

/* ------------------------------------------------------------------ main */

/* CUDA C into mem (compiler/backend/codegen.c) and, with --header, the header's
 * text into *htext; 0 after a diagnostic. */
static int
emit_cu(Options *o, Module *m, FILE *mem, char **htext, size_t *hlen)
{
	CodegenOptions co = {.opt_level = o->po.opt_level, .arch = o->arch,
	                     .cuda_graph = o->cuda_graph, .emit_main = o->emit_main,
	                     .input = o->input, .header = o->header,
	                     .output = o->output, .no_line = o->no_line};
	FILE *h = NULL;
	if (o->header && !(h = open_memstream(htext, hlen)))
		ICE("open_memstream failed");
	int ok = codegen_module(m, &co, mem, h);
	if (h)
		fclose(h);
	return ok;
}

static int
compile(Options *o, Module *m)
{
	char *text = NULL, *htext = NULL;
	size_t len = 0, hlen = 0;
	FILE *mem = open_memstream(&text, &len);
	if (!mem)
		ICE("open_memstream failed");
	int status = 0;
	switch (o->emit) {
	case EMIT_IR:
		print_module(mem, m, o->graph);
		break;
	case EMIT_DOT:
		dot_module(mem, m, o->graph, o->po.opt_level);
		break;
	case EMIT_CU:
		if (!emit_cu(o, m, mem, &htext, &hlen)) {
			fclose(mem);
			free(text);
			free(htext);
			return EXIT_INPUT;
		}
		break;
	}
	fclose(mem);
	char *out_default = NULL;
	const char *out = o->output;
	if (!out) {
		/* FILE.sg -> FILE.cu; standard input -> standard output. */
		if (o->emit == EMIT_CU && strcmp(o->input, "-") != 0)
			out = out_default = beside_input(o->input, ".cu");
		else
			out = "-";
	}
	if (o->header && strcmp(out, "-") == 0 && strcmp(o->header, "-") == 0)
		status = usage_error("the output and --header both go to standard output");
	else if (o->md && !o->mf && strcmp(out, "-") == 0)
		status = usage_error("-MD with the output on standard output needs -MF FILE "
		                     "(the dependency file's name comes from the output's)");
	else if (o->header && strcmp(out, "-") != 0 && same_file(out, o->header))
		status = usage_error("the output and --header name the same file '%s'", out);
	else if (o->md && !o->mf && o->header && strcmp(out, "-") != 0 &&
	         strlen(o->header) == strlen(out) + 2 &&
	         strncmp(o->header, out, strlen(out)) == 0 &&
	         strcmp(o->header + strlen(out), ".d") == 0)
		status = usage_error("the dependency file and --header name the same "
		                     "file '%s'", o->header);
	if (status) {
		free(out_default);
		free(text);
		free(htext);
		return status;
	}
	/* The side files first, the output last: standard output gets
	 * nothing when the header or the depfile cannot be written, and a
	 * failed output takes its side files with it. */
	const char *mf = NULL, *hdr = NULL; /* the side files written */
	char *mf_default = NULL;
	if (o->header) {
		status = write_output(o->header, htext, hlen);
		hdr = status ? NULL : o->header;
	}
	if (!status && o->md) {
		char *dep = NULL;
		size_t dlen = 0;
		FILE *d = open_memstream(&dep, &dlen);
		if (!d)
			ICE("open_memstream failed");
		put_make_path(d, out);
		fputs(":", d);
		if (strcmp(o->input, "-") != 0) { /* standard input is no file */
			fputc(' ', d);
			put_make_path(d, o->input);
		}
		fputs("\n", d);
		fclose(d);
		mf = o->mf;
		if (!mf) {
			size_t n = strlen(out);
			mf_default = xmalloc(n + 3);
			snprintf(mf_default, n + 3, "%s.d", out);
			mf = mf_default;
		}
		status = write_output(mf, dep, dlen);
		free(dep);
		if (status)
			mf = NULL;
	}
	if (!status)
		status = write_output(out, text, len);
	if (status) { /* no output without its header and depfile */
		if (hdr)
			drop_output(hdr);
		if (mf)
			drop_output(mf);
	}
	free(mf_default);
	free(out_default);
	free(text);
	free(htext);
	return status;
}

/* 0 when everything printed to standard output reached it, else an
 * error (EXIT_IO): --help into a full disk fails as the output does. */
static int
stdout_written(void)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "sgc: error: cannot write standard output: %s\n",
		        strerror(errno));
		return EXIT_IO;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	Options o = {0};
	if (argc == 2 && (strcmp(argv[1], "--version") == 0 ||
	                  strcmp(argv[1], "-v") == 0)) {
		printf("sgc %s\n", SGC_VERSION_STR);
		return stdout_written();
	}
	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(usage_text, stdout);
		fputs(help_text, stdout);
		return stdout_written();
	}
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "--version") == 0)
			return usage_error("'%s' stands alone", argv[i]);
	int status = parse_options(argc, argv, &o);
	if (status)
		return status;

	ops_init();
	size_t len;
	char *src = read_file(o.input, &len, &status);
	if (!src)
		return status;
	status = 0;
	/* A UTF-8 byte-order mark (some editors write one) is not part of
	 * the program. */
	const char *text = src;
	if (len >= 3 && memcmp(src, "\xEF\xBB\xBF", 3) == 0) {
		text += 3;
		len -= 3;
	}
	Diag diag;
	diag_init(&diag, o.input, text, len);
	diag_color_mode(o.color ? o.color : "auto", &diag.color);
	Module m = {.arena = arena_new(), .diag = &diag, .only_graph = o.graph};
	AstFile ast = {0};
	parse_file(text, len, &diag, m.arena, &ast);
	if (!diag.nerrors)
		sema_module(&m, &ast, o.dims.v, (int)o.dims.n);
	if (!diag.nerrors && o.graph && m.graphs.n == 0) {
		fprintf(stderr, "%s: error: no graph named '%s'\n", o.input, o.graph);
		diag.nerrors++;
	} else if (!diag.nerrors && m.graphs.n == 0) {
		/* "A .sg file holds one or more graphs" (the language spec):
		 * --main would have no graph to drive. */
		fprintf(stderr, "%s: error: the file holds no graph\n", o.input);
		diag.nerrors++;
	}
	if (!diag.nerrors)
		passes_run(&m, &o.po);
	if (diag.nerrors) {
		status = EXIT_INPUT;
	} else if (o.mode == MODE_COMPILE) {
		status = compile(&o, &m);
	} else if (o.mode == MODE_CHECK && o.memory) {
		codegen_memory_report(stdout, &m, o.graph, o.po.opt_level);
	} else if (o.mode == MODE_RUN) {
		if (m.graphs.n > 1 && !o.graph) {
			fprintf(stderr, "%s: error: the file has %u graphs; choose one "
			        "with --graph NAME\n", o.input, m.graphs.n);
			status = EXIT_INPUT;
		} else {
			status = interp_run(&m, m.graphs.v[0], &o.ro);
		}
	}
	/* sgc run's printed values, check --memory's report: a failed write
	 * to standard output is an error. */
	if (!status)
		status = stdout_written();
	ast_free(&ast);
	module_free(&m);
	for (uint32_t i = 0; i < o.dims.n; i++)
		free((char *)o.dims.v[i].name);
	vec_free(&o.dims);
	arena_free(m.arena);
	diag_fini(&diag);
	free(src);
	return status;
}
