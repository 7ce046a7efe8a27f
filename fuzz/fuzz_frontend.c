/*
 * fuzz_frontend.c - libFuzzer target for the front end.
 *
 * The input bytes are a .sg file.  They go through the path of `sgc check`:
 * parse_file, sema_module, passes_run, with diagnostics written to
 * /dev/null.  Anything but a clean return is a bug: a sanitizer report, an
 * internal compiler error (which exits), a hang or a leak.
 *
 * When the input compiles cleanly, its printed IR must compile again and
 * print the same text (the promise of `--emit=ir`); a difference aborts.
 *
 * Build and run: see fuzz/README.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sgc.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static FILE *devnull;

/* Frees what a compilation holds outside its arena. */
static void
free_compilation(AstFile *f, Module *m)
{
	ast_free(f);
	module_free(m);
}

/*
 * Compiles src[0..len) as `sgc check` does, with diagnostics to diagout.
 * When ir is not NULL and the compilation succeeded, *ir receives the
 * printed IR (malloc'd, *irlen bytes).  Returns 1 on success, 0 when a
 * diagnostic error stopped it.
 */
static int
compile(const char *src, size_t len, FILE *diagout, char **ir, size_t *irlen)
{
	Arena *a = arena_new();
	Diag d;
	AstFile f;
	Module m;
	PassOptions po = {.allow_races = 0, .opt_level = 2, .dump_after = NULL};
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
	}
	free_compilation(&f, &m);
	diag_fini(&d);
	arena_free(a);
	return ok;
}

/* Prints the two texts of a failed round trip and aborts. */
static _Noreturn void
roundtrip_failed(const char *why, const char *first, const char *second)
{
	fprintf(stderr, "fuzz_frontend: %s\n--- first print\n%s\n", why, first);
	if (second)
		fprintf(stderr, "--- second print\n%s\n", second);
	abort();
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	ops_init();
	devnull = fopen("/dev/null", "w");
	if (!devnull)
		abort();
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The front end gets a NUL-terminated copy, as main.c reads files. */
	char *src = xmalloc(size + 1);
	char *ir1 = NULL, *ir2 = NULL;
	size_t len1 = 0, len2 = 0;

	memcpy(src, data, size);
	src[size] = 0;
	if (compile(src, size, devnull, &ir1, &len1)) {
		if (!compile(ir1, len1, devnull, &ir2, &len2)) {
			compile(ir1, len1, stderr, NULL, NULL);
			roundtrip_failed("the printed IR does not compile", ir1, NULL);
		}
		if (len1 != len2 || memcmp(ir1, ir2, len1) != 0)
			roundtrip_failed("printing the printed IR changes it", ir1, ir2);
	}
	free(ir1);
	free(ir2);
	free(src);
	return 0;
}
