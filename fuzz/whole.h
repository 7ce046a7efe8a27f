/*
 * whole.h - the part of the fuzz targets that drives one .sg text through
 * the whole compiler (included by fuzz_frontend.c and fuzz_programs.c):
 *
 *   parse_file, sema_module, passes_run           (`sgc check`)
 *   print_module, and the printed IR compiled again and printed unchanged
 *   dot_module, memplan_report_module             (--emit=dot, check --memory)
 *   codegen_module with a header and --main        (`sgc -o`)
 *   interp_run of every graph, when its tensors are small (and WORLD at
 *   most 8): twice, in
 *   program order and under --interleave, two steps each (`sgc run`)
 *
 * Diagnostics go to a memory buffer.  Anything but a clean return is a bug:
 * a sanitizer report, an internal compiler error (it exits), a hang, a
 * leak, a round trip that changes the IR, or an interpreter error that
 * calls itself internal.  A program the checks accept must run.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sgc.h"
#include "backend.h"
#include "interp.h"
#include "passes.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Largest graph the interpreter runs: elements over all its values. */
enum { WHOLE_MAX_ELEMS = 1 << 16 };

typedef struct {
	FILE *devnull;
	int offload; /* PassOptions.offload of the compilations (0: marked) */
	uint64_t remat_budget; /* PassOptions.remat_budget of the compilations */
} Whole;

static _Noreturn void
whole_bug(const char *why, const char *a, const char *b)
{
	fprintf(stderr, "fuzz: %s\n", why);
	if (a)
		fprintf(stderr, "--- first\n%s\n", a);
	if (b)
		fprintf(stderr, "--- second\n%s\n", b);
	abort();
}

/* Elements over all values of g (saturating), to keep runs small. */
static uint64_t
whole_elems(const Graph *g)
{
	uint64_t total = 0;
	for (ValId v = 0; v < g->vals.n; v++) {
		const Type *t = &g->vals.v[v].type;
		uint64_t n = 1;
		for (int d = 0; d < t->rank; d++) {
			uint64_t e = t->d[d] > 0 ? (uint64_t)t->d[d] : 1;
			if (n > WHOLE_MAX_ELEMS || e > WHOLE_MAX_ELEMS)
				return WHOLE_MAX_ELEMS + 1;
			n *= e;
		}
		total += n;
		if (total > WHOLE_MAX_ELEMS)
			return total;
	}
	return total;
}

/* Where whole_run writes each run's outputs, params and optimizer state
 * (its --out): "DIR/whole.PID.TAG.g<graph>.<interleaved>", and what each
 * run returned. */
enum { WHOLE_MAX_GRAPHS = 8 };
typedef struct {
	const char *tag;                    /* NULL: print, write no file */
	int steps;                          /* steps a run makes (0: 2) */
	int ran[WHOLE_MAX_GRAPHS][2];       /* 1: run, 0: too big to run */
	int rc[WHOLE_MAX_GRAPHS][2];        /* interp_run's exit status */
} WholeOut;

static void
whole_out_path(char *buf, size_t len, const char *tag, uint32_t g, int il)
{
	const char *dir = getenv("TMPDIR");
	snprintf(buf, len, "%s/whole.%ld.%s.g%u.%d", dir && *dir ? dir : "/tmp",
	         (long)getpid(), tag, g, il);
}

/* Runs each small graph in program order and interleaved; an interpreter
 * error that calls itself internal is a bug.  With o->tag, each run's
 * results go to a file (whole_out_path; "{rank}" in it for WORLD > 1). */
static void
whole_run(Whole *W, Module *m, const char *src, WholeOut *o)
{
	uint32_t *w = map_get(&m->dimmap, "WORLD", 5);
	int64_t world = w && *w < m->dims.n ? m->dims.v[*w].n : 1;
	for (uint32_t i = 0; i < m->graphs.n && world <= 8; i++) {
		Graph *g = m->graphs.v[i];
		if (whole_elems(g) * (uint64_t)world > WHOLE_MAX_ELEMS)
			continue;
		for (int il = 0; il < 2; il++) {
			char *msg = NULL, path[256];
			size_t len = 0;
			FILE *mf = open_memstream(&msg, &len);
			FILE *old = m->diag->out;
			if (!mf)
				abort();
			m->diag->out = mf;
			RunOptions ro = {.steps = o && o->steps ? o->steps : 2, .seed = 1,
			                 .interleave = il,
			                 .interleave_seed = 7, .seed_inputs = 1,
			                 .print = W->devnull};
			if (o && o->tag && i < WHOLE_MAX_GRAPHS) {
				whole_out_path(path, sizeof path, o->tag, i, il);
				if (world > 1)
					strcat(path, ".{rank}");
				ro.out = path;
			}
			int rc = interp_run(m, g, &ro);
			fclose(mf);
			m->diag->out = old;
			if (msg && strstr(msg, "internal"))
				whole_bug("the interpreter reports an internal error", msg, src);
			free(msg);
			if (o && i < WHOLE_MAX_GRAPHS) {
				o->ran[i][il] = 1;
				o->rc[i][il] = rc;
			}
		}
	}
}

/* The back end: CUDA C with a header and a main(), into memory. */
static void
whole_codegen(Module *m)
{
	char *cu = NULL, *h = NULL;
	size_t culen = 0, hlen = 0;
	FILE *fc = open_memstream(&cu, &culen), *fh = open_memstream(&h, &hlen);
	if (!fc || !fh)
		abort();
	CodegenOptions co = {.opt_level = 2, .arch = "sm_90", .emit_main = 1,
	                     .input = "fuzz \"dir\"\n/fuzz.sg", .header = "fuzz.h"};
	codegen_module(m, &co, fc, fh);
	fclose(fc);
	fclose(fh);
	free(cu);
	free(h);
}

/*
 * Compiles src[0..len) as `sgc check` does, with diagnostics to diagout.
 * What a clean compilation goes through after the checks (see the top):
 * with WHOLE_BACKEND the dot, plan report and code generation, with
 * WHOLE_RUN the interpreter's runs (their results to o's files, o may be
 * NULL); *ir receives the printed IR (malloc'd).  Returns 1 on success, 0
 * when a diagnostic error stopped it.
 */
enum { WHOLE_BACKEND = 1, WHOLE_RUN = 2 };
static int
whole_compile(Whole *W, const char *src, size_t len, FILE *diagout, int opt,
              int full, WholeOut *o, char **ir, size_t *irlen)
{
	Arena *a = arena_new();
	Diag d;
	AstFile f;
	Module m;
	PassOptions po = {.allow_races = 0, .opt_level = opt, .dump_after = NULL,
	                  .offload = W->offload, .remat_budget = W->remat_budget};
	int ok = 0;

	memset(&f, 0, sizeof f);
	memset(&m, 0, sizeof m);
	diag_init(&d, "fuzz.sg", src, len);
	d.out = diagout;
	m.arena = a;
	m.diag = &d;
	map_init(&m.dimmap);

	parse_file(src, len, &d, a, &f);
	if (d.nerrors == 0)
		sema_module(&m, &f, NULL, 0);
	if (d.nerrors == 0)
		passes_run(&m, &po);
	if (d.nerrors == 0) {
		ok = 1;
		if (ir) {
			FILE *mf = open_memstream(ir, irlen);
			if (!mf)
				abort();
			print_module(mf, &m, NULL);
			fclose(mf);
		}
		if (full & WHOLE_BACKEND) {
			dot_module(W->devnull, &m, NULL, opt);
			memplan_report_module(W->devnull, &m, NULL, opt);
			whole_codegen(&m);
		}
		if (full & WHOLE_RUN)
			whole_run(W, &m, src, o);
	}
	ast_free(&f);
	module_free(&m);
	diag_fini(&d);
	arena_free(a);
	return ok;
}

/* The whole check of one text: compiled through everything, and its
 * printed IR compiled again to the same print.  Returns whether it
 * compiled; its runs' results go to o's files (o may be NULL). */
static int
whole_check(Whole *W, const char *src, size_t len, int opt, WholeOut *o)
{
	char *ir1 = NULL, *ir2 = NULL;
	size_t len1 = 0, len2 = 0;
	int ok = whole_compile(W, src, len, W->devnull, opt, WHOLE_BACKEND | WHOLE_RUN,
	                       o, &ir1, &len1);
	if (ok) {
		if (!whole_compile(W, ir1, len1, W->devnull, opt, 0, NULL, &ir2, &len2)) {
			whole_compile(W, ir1, len1, stderr, opt, 0, NULL, NULL, NULL);
			whole_bug("the printed IR does not compile", ir1, NULL);
		}
		if (len1 != len2 || memcmp(ir1, ir2, len1) != 0)
			whole_bug("printing the printed IR changes it", ir1, ir2);
	}
	free(ir1);
	free(ir2);
	return ok;
}

/* The state of a fuzz target (libFuzzer calls plain functions). */
static Whole whole;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	ops_init();
	whole.devnull = fopen("/dev/null", "w");
	if (!whole.devnull)
		abort();
	return 0;
}
